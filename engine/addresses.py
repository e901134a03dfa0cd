"""Which URLs and addresses Vigil may contact: the URL's syntax (no DNS), and each resolved address checked
against the SSRF rules (private, loopback unless allowed, link-local, metadata, NAT64/6to4 wrappers…)."""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
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
