"""Which URLs and addresses Vigil may contact: the URL's syntax (no DNS), and each resolved address checked
against the SSRF rules (private, loopback unless allowed, link-local, metadata, NAT64/6to4 wrappers…)."""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from engine.errors import BlockedURL, FetchError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_METADATA = frozenset(map(ipaddress.ip_address, ("169.254.169.254", "fd00:ec2::254",
                                                  "100.100.100.200")))
_AZURE_WIRESERVER = ipaddress.ip_address("168.63.129.16")
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
_SHARED_NAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_HOST_NAME = re.compile(r"(?:[\w-]+\.)*[\w-]+\.?")


def check_url(url: str) -> str:
    """Validate `url` syntactically (no DNS) and return it unchanged, or raise BlockedURL."""
    if not isinstance(url, str) or not url:
        raise BlockedURL("The url is empty; give a full address such as https://example.com/.")
    return _checked(url) if len(url) <= _REMEMBERED_URL_CHARS else _checked.__wrapped__(url)


#: the longest url whose check is remembered (the cache holds at most 4,096 of them)
_REMEMBERED_URL_CHARS = 2048


@functools.lru_cache(maxsize=4096)
def _checked(url: str) -> str:
    """check_url's syntax checks: they depend on the text alone, so a url checked before (every GET of a watched
    page checks its url again, ~45 µs) is not walked again; one refused raises each time (errors are not cached)."""
    if "\\" in url or any(c.isspace() or not c.isprintable() for c in url):
        raise BlockedURL("The url must not contain spaces, control characters or backslashes; "
                         "percent-encode them (a space is %20) and use forward slashes.")
    try:
        parts = urlsplit(url)
    except ValueError:
        raise BlockedURL("The url could not be parsed; check the IPv6 host brackets.") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not url[len(scheme) + 1:].startswith("//"):
        raise BlockedURL(f"The url must start with http:// or https:// (got '{scheme or 'none'}').")
    _check_authority(parts)
    return url


def literal_reason(url: str, allow_loopback: bool, allow_private: bool = False) -> str | None:
    """Why a checked url's host may not be contacted, when the host is an address written out (or localhost),
    so a registration can say so at once; None for a host name, whose addresses are checked at connect time."""
    host = (urlsplit(url).hostname or "").rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return None if allow_loopback or allow_private else "a loopback address (this machine)"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    return forbidden_reason(ip, allow_loopback, allow_private)


def _check_authority(parts) -> None:
    if "@" in parts.netloc:
        raise BlockedURL("The url must not contain a user name or password before the host; "
                         "remove everything up to and including '@'.")
    host = parts.hostname or ""
    if not host:
        raise BlockedURL("The url must include a host name, e.g. https://example.com/.")
    if "%" in host:
        raise BlockedURL(f"The host '{host}' must not contain '%'; write the host name plainly.")
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise BlockedURL(f"The IPv6 address '{host}' in the url is not valid.") from None
    elif not _HOST_NAME.fullmatch(host):
        raise BlockedURL(f"The host name '{host}' is not valid; use a domain such as example.com.")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise BlockedURL("The url's port is invalid; use a number from 1 to 65535 or leave it out.")


def forbidden_reason(ip: IPAddress, allow_loopback: bool, allow_private: bool = False) -> str | None:
    """None when `ip` may be contacted, otherwise a short reason such as "a private address". `allow_private`
    (a judge model server on this machine or the local network, JUDGE_ALLOW_PRIVATE_URLS) also lets loopback,
    private and carrier-grade NAT addresses through; metadata, link-local and the rest stay refused."""
    if ip.version == 4:
        return _address_reason(ip, allow_loopback, allow_private)
    if ip.ipv4_mapped is not None:
        return _address_reason(ip.ipv4_mapped, allow_loopback, allow_private)
    inner = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF) if ip in _NAT64 else ip.sixtofour
    if inner is None:
        return _address_reason(ip, allow_loopback, allow_private)
    inner_reason = _address_reason(inner, allow_loopback=False)
    if inner_reason:
        return f"an IPv6 address embedding {inner}, {inner_reason}"
    return None if ip in _NAT64 else _address_reason(ip, allow_loopback, allow_private)


_RULES = (
    (lambda ip: ip in _METADATA, "the cloud metadata address"),
    (lambda ip: ip == _AZURE_WIRESERVER, "the cloud platform's internal address"),
    (lambda ip: ip.is_loopback, "a loopback address (this machine)"),
    (lambda ip: ip.is_unspecified, "the unspecified address"),
    (lambda ip: ip.version == 4 and ip in _THIS_NETWORK, "a 'this network' address"),
    (lambda ip: ip.is_link_local, "a link-local address"),
    (lambda ip: ip.version == 4 and ip in _SHARED_NAT, "a carrier-grade NAT address"),
    (lambda ip: ip.is_private, "a private address"),
    (lambda ip: ip.is_multicast, "a multicast address"),
    (lambda ip: ip.version == 6 and (int(ip) < 1 << 32 or ip.is_site_local), "an obsolete address"),
    (lambda ip: ip.is_reserved or not ip.is_global, "a reserved, non-public address"),
)


#: what allow_private lets through besides loopback: the local network, where a self-hosted model server runs
#: (RFC 1918, carrier-grade NAT as Tailscale uses it, IPv6 unique local), the metadata addresses in them excepted
_LOCAL_NETWORKS = tuple(map(ipaddress.ip_network, ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                                                   "100.64.0.0/10", "fc00::/7")))


def _address_reason(ip: IPAddress, allow_loopback: bool, allow_private: bool = False) -> str | None:
    if ip.is_loopback and (allow_loopback or allow_private):
        return None
    if allow_private and ip not in _METADATA and any(ip in network for network in _LOCAL_NETWORKS):
        return None
    return next((reason for test, reason in _RULES if test(ip)), None)


def resolve_allowed(host: str, port: int, allow_loopback: bool, allow_private: bool = False) -> list[str]:
    """Resolve `host`; every address must be allowed, else BlockedURL. DNS failure: unreachable."""
    name = host.strip("[]")
    try:
        infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except UnicodeError:
        raise BlockedURL(f"The host name '{name}' is not a valid host name.") from None
    except OSError as exc:
        raise FetchError(f"The host name '{name}' could not be resolved; check the domain.",
                         unreachable=True) from exc
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    for address in addresses:
        reason = forbidden_reason(ipaddress.ip_address(address.split("%")[0]), allow_loopback, allow_private)
        if reason:
            target = f"{name}," if address == name else f"{name}, which resolves to {address},"
            raise BlockedURL(f"The url points to {target} {reason}; "
                             "only public internet addresses may be fetched.")
    return addresses


@dataclass(frozen=True)
class Own:
    """Vigil itself, which none of its outbound requests may reach (DESIGN.md, "Who may do what"): the (host, port)
    of each public origin (PUBLIC_API_BASE_URL, PUBLIC_APP_URL, API_URL) and of each address the web tier listens
    on, where 0.0.0.0 or :: stands for every address of this machine. FETCH_ALLOW_LOOPBACK does not lift it."""
    origins: frozenset = frozenset()
    listening: frozenset = frozenset()

    def __bool__(self) -> bool:
        return bool(self.origins or self.listening)

    @classmethod
    def of(cls, urls, listening=()) -> Own:
        """From Vigil's public urls (empty or unparsable ones skipped) and the (host, port) pairs it listens on."""
        origins = set()
        for url in urls:
            try:
                parts = urlsplit(url.strip())
                port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
            except ValueError:
                continue
            if parts.hostname:
                origins.add((_plain(parts.hostname), port))
        return cls(frozenset(origins), frozenset((_plain(host), int(port)) for host, port in listening))


#: what a request to Vigil itself is told, after where it pointed
ITSELF = "which is Vigil itself; a monitor can't watch or call Vigil's own API."
_ANY_ADDRESS = frozenset({"0.0.0.0", "::", ""})
#: how long the addresses of an origin's name, and whether an address is this machine's, are remembered
_REMEMBER_SECONDS = 60


def resolve_guarded(host: str, port: int, allow_loopback: bool, own: Own | None = None,
                    allow_private: bool = False) -> list[str]:
    """resolve_allowed, and then none of the addresses may be Vigil's own (`own`) on that port, else BlockedURL.
    Decided by the resolved address and port, whatever name or headers the request carries."""
    name = host.strip("[]")
    if own and (_plain(name), port) in own.origins:
        raise BlockedURL(f"The url points to {name}:{port}, {ITSELF}")
    addresses = resolve_allowed(host, port, allow_loopback, allow_private)
    for address in addresses if own else ():
        if _is_own(_ip(address), port, own):
            target = f"{name}:{port}" if address == name else f"{name}:{port}, which resolves to {address},"
            raise BlockedURL(f"The url points to {target} {ITSELF}")
    return addresses


def own_literal_reason(url: str, own: Own | None) -> str | None:
    """Why a checked url is Vigil itself, decided without DNS (for a registration to say so at once): its host
    and port are an origin's, or it writes out an address (or localhost) that is one of Vigil's own; else None."""
    if not own:
        return None
    parts = urlsplit(url)
    host, port = _plain(parts.hostname or ""), parts.port or (443 if parts.scheme.lower() == "https" else 80)
    if (host, port) in own.origins:
        return f"{host}:{port}, {ITSELF}"
    if host == "localhost" or host.endswith(".localhost"):
        candidates = ("127.0.0.1", "::1")
    else:
        candidates = (host,)
    for candidate in candidates:
        try:
            ip = _ip(candidate)
        except ValueError:
            return None
        if _is_own(ip, port, own, resolve=False):
            return f"{host}:{port}, {ITSELF}"
    return None


def _plain(host: str) -> str:
    return host.strip("[]").rstrip(".").lower()


def _ip(address: str) -> IPAddress:
    ip = ipaddress.ip_address(address.split("%")[0])
    return ip.ipv4_mapped if ip.version == 6 and ip.ipv4_mapped is not None else ip


def _is_own(ip: IPAddress, port: int, own: Own, resolve: bool = True) -> bool:
    bucket = int(time.monotonic() // _REMEMBER_SECONDS)
    for host, own_port in (*own.listening, *own.origins):
        if own_port != port:
            continue
        if host in _ANY_ADDRESS:
            if _is_local(ip, bucket):
                return True
        elif ip in _addresses_of(host, bucket, resolve):
            return True
    return False


@functools.lru_cache(maxsize=256)
def _addresses_of(host: str, bucket: int, resolve: bool = True) -> frozenset:
    """The addresses a name of Vigil's own resolves to (remembered for a minute); none when it doesn't resolve."""
    if host == "localhost" or host.endswith(".localhost"):
        return frozenset(map(ipaddress.ip_address, ("127.0.0.1", "::1")))
    try:
        return frozenset({_ip(host)})
    except ValueError:
        if not resolve:
            return frozenset()
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return frozenset()
    return frozenset(_ip(info[4][0]) for info in infos)


@functools.lru_cache(maxsize=1024)
def _is_local(ip: IPAddress, bucket: int) -> bool:
    """Whether `ip` is an address of this machine (what a server listening on 0.0.0.0 or :: answers on): loopback,
    or an address a socket can be bound to here."""
    if ip.is_loopback or ip.is_unspecified:
        return True
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((str(ip), 0))
    except OSError:
        return False
    return True
