"""The operator's egress proxy (OUTBOUND_PROXY, NO_PROXY): which requests go through it, and the CONNECT handshake.

Companies enforce egress rules with a forward proxy (Stripe's Smokescreen is built for the SSRF case), so every
outbound request Vigil makes can go through one. The SSRF guard (engine/addresses.py) still runs first, in Vigil:
the destination's name is resolved and refused when it is loopback, private, link-local or Vigil itself, before
the proxy is asked. The proxy is then asked for the destination by its *name* (CONNECT host:port, or an
absolute-form GET), so the proxy's own domain rules apply; it resolves the name again, which is why it must
refuse internal addresses itself (Smokescreen does by default). The proxy's own address is the operator's
choice and is never checked: it may well be on a private network.

Plain http goes to the proxy as absolute-form requests; https through a CONNECT tunnel, TLS end to end.
"""

from __future__ import annotations

import base64
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from engine.errors import FetchError

#: the longest answer head a proxy may send to CONNECT
MAX_CONNECT_HEAD = 16 * 1024


class ProxySettingError(ValueError):
    """OUTBOUND_PROXY or NO_PROXY can't be used; the message says what to write instead (never the password)."""


@dataclass(frozen=True)
class Proxy:
    """The forward proxy: where it listens, and the Proxy-Authorization value its user:pass gives (or "")."""
    host: str
    port: int
    authorization: str = ""

    @property
    def shown(self) -> str:
        """The proxy for messages and logs: host and port, never the credentials."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def connect_head(self, host: str, port: int) -> bytes:
        """The CONNECT request for `host`:`port` (an IPv6 address in brackets)."""
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        lines = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}"]
        if self.authorization:
            lines.append(f"Proxy-Authorization: {self.authorization}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def tunnel(self, sock: socket.socket, host: str, port: int) -> None:
        """Asks the proxy, over `sock` (a connection to it), for a tunnel to `host`:`port`; FetchError if refused."""
        try:
            sock.sendall(self.connect_head(host, port))
            head = b""
            while b"\r\n\r\n" not in head:
                if len(head) > MAX_CONNECT_HEAD:
                    raise FetchError(f"The egress proxy {self.shown} sent an answer too long to be one to CONNECT.",
                                     unreachable=True)
                chunk = sock.recv(4096)
                if not chunk:
                    raise FetchError(f"The egress proxy {self.shown} closed the connection instead of answering.",
                                     unreachable=True)
                head += chunk
        except OSError as exc:
            raise FetchError(f"The egress proxy {self.shown} did not answer CONNECT.", unreachable=True) from exc
        check_connect_answer(self, head, host, port)

    def open(self, timeout: float) -> socket.socket:
        """A TCP connection to the proxy itself (not guarded: the operator chose it)."""
        try:
            return socket.create_connection((self.host, self.port), max(timeout, 0.001))
        except OSError as exc:
            raise FetchError(f"The egress proxy {self.shown} (OUTBOUND_PROXY) could not be reached.",
                             unreachable=True) from exc


def check_connect_answer(proxy: Proxy, head: bytes, host: str, port: int) -> None:
    """Raise FetchError (refused()) unless the proxy's answer head to CONNECT is a 2xx."""
    status_line = head.split(b"\r\n", 1)[0].decode("latin-1", "replace")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise FetchError(f"The egress proxy {proxy.shown} did not answer CONNECT with HTTP.", unreachable=True)
    code = int(parts[1])
    if not 200 <= code < 300:
        raise refused(proxy, code, parts[2] if len(parts) > 2 else "", host, port)


def refused(proxy: Proxy, code: int, reason: str, host: str, port: int) -> FetchError:
    """The error of a request the proxy answered itself. A refusal (403, or 407: Smokescreen's answer to a
    destination its rules deny, and other proxies' to missing credentials) is the operator's rule, not an outage;
    a 5xx is (the proxy could not reach the host)."""
    said = f"{code} {reason}".strip()[:80]
    hint = "; if it asks for credentials, put user:password in OUTBOUND_PROXY" if code == 407 else ""
    return FetchError(f"The egress proxy {proxy.shown} refused to connect to {host}:{port} ({said}){hint}.",
                      unreachable=code >= 500)


@dataclass(frozen=True)
class NoProxy:
    """NO_PROXY as curl, Go and requests read it: comma-separated entries, each `*` (nothing is proxied), a domain
    (`example.com` or `.example.com`: it and every name under it), an IP address, or a CIDR block (matched against
    a url that writes the address out); any entry may end in `:port` to match that port only."""
    everything: bool = False
    domains: tuple[tuple[str, int | None], ...] = ()
    networks: tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, int | None], ...] = ()

    @classmethod
    def parse(cls, raw: str) -> NoProxy:
        domains, networks, everything = [], [], False
        for entry in filter(None, (part.strip().lower() for part in (raw or "").split(","))):
            if entry == "*":
                everything = True
                continue
            host, port = _split_port(entry)
            try:
                networks.append((ipaddress.ip_network(host.strip("[]"), strict=False), port))
            except ValueError:
                name = host.lstrip("*").lstrip(".").rstrip(".")
                if not name:
                    raise ProxySettingError(f"NO_PROXY holds an empty entry {entry!r}; list host names, domains, "
                                            "addresses or CIDR blocks separated by commas.") from None
                domains.append((name, port))
        return cls(everything, tuple(domains), tuple(networks))

    def matches(self, host: str, port: int) -> bool:
        """Whether a request to `host`:`port` goes direct."""
        if self.everything:
            return True
        name = host.strip("[]").rstrip(".").lower()
        try:
            ip = ipaddress.ip_address(name)
        except ValueError:
            ip = None
        if ip is not None:
            if any(ip in network and want in (None, port) for network, want in self.networks):
                return True
        return any((name == domain or name.endswith("." + domain)) and want in (None, port)
                   for domain, want in self.domains)


def _split_port(entry: str) -> tuple[str, int | None]:
    """'host:port' → (host, port); an IPv6 address or CIDR without brackets has no port."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif entry.count(":") == 1:
        host, _, port = entry.partition(":")
    else:
        return entry, None
    if not port:
        return host, None
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ProxySettingError(f"NO_PROXY entry {entry!r} has an invalid port; write host:port with a port from 1 "
                                "to 65535.")
    return host, int(port)


@dataclass(frozen=True)
class Egress:
    """Where outbound requests go: through `proxy` unless NO_PROXY (`direct`) says the destination is reached
    directly. Hashable: it is part of the fetcher's connection pool key."""
    proxy: Proxy
    direct: NoProxy = NoProxy()

    @classmethod
    def of(cls, outbound_proxy: str, no_proxy: str = "") -> Egress | None:
        """From the two settings; None when OUTBOUND_PROXY is empty (every request goes direct)."""
        if not (outbound_proxy or "").strip():
            return None
        return cls(parse_proxy(outbound_proxy.strip()), NoProxy.parse(no_proxy))

    def proxy_for(self, host: str, port: int) -> Proxy | None:
        """The proxy a request to `host`:`port` goes through, or None to go direct."""
        return None if self.direct.matches(host, port) else self.proxy


def parse_proxy(raw: str) -> Proxy:
    """OUTBOUND_PROXY, http://[user:password@]host:port; errors never repeat the value (it may hold a password)."""
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError:
        raise ProxySettingError("OUTBOUND_PROXY could not be read; write it as http://host:port or "
                                "http://user:password@host:port.") from None
    if parts.scheme.lower() != "http":
        raise ProxySettingError("OUTBOUND_PROXY must start with http:// (Vigil talks to the proxy in plain HTTP and "
                                "tunnels https through it with CONNECT), e.g. http://proxy.internal:4750.")
    if not parts.hostname:
        raise ProxySettingError("OUTBOUND_PROXY must name the proxy's host, e.g. http://proxy.internal:4750.")
    if (parts.path or "/") != "/" or parts.query or parts.fragment:
        raise ProxySettingError("OUTBOUND_PROXY must be only http://host:port, without a path or query.")
    authorization = ""
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        authorization = "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")
    return Proxy(parts.hostname, port or 80, authorization)
