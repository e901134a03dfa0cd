import ipaddress
import socket

import pytest

from engine.addresses import check_url, forbidden_reason, resolve_allowed
from engine.errors import BlockedURL, FetchError

FORBIDDEN = [
    "169.254.169.254", "fd00:ec2::254", "100.100.100.200", "168.63.129.16", "127.0.0.1", "::1",
    "::ffff:127.0.0.1", "0.0.0.0", "::", "10.0.0.1", "172.16.0.1", "192.168.1.1", "100.64.0.1",
    "fc00::1", "fe80::1", "64:ff9b::7f00:1", "2002:7f00:1::", "0.1.2.3", "224.0.0.1", "ff02::1",
    "::7f00:1", "255.255.255.255", "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe", "2002:a00:1::",
]


def ip(text):
    return ipaddress.ip_address(text)


@pytest.mark.parametrize("url", [
    "http://example.com", "https://example.com/path?q=1#frag", "HTTPS://Example.COM:8443/",
    "http://93.184.216.34/", "http://[2606:4700::1111]:80/x", "https://bücher.de/", "http://a.b-c_d.example./",
])
def test_check_url_accepts_plain_http_urls(url):
    assert check_url(url) == url


@pytest.mark.parametrize("url, fragment", [
    ("ftp://example.com/file", "(got 'ftp')"),
    ("file:///etc/passwd", "(got 'file')"),
    ("gopher://example.com/", "(got 'gopher')"),
    ("javascript:alert(1)", "(got 'javascript')"),
    ("data:text/html,hi", "(got 'data')"),
    ("example.com/page", "http:// or https://"),
    ("http:example.com", "http:// or https://"),
    ("", "empty"),
    ("http://", "host name"),
    ("http:///path", "host name"),
    ("http://:80/", "host name"),
    ("http://example.com\\@127.0.0.1/", "backslash"),
    ("http://evil@127.0.0.1/", "user name or password"),
    ("http://user:pw@example.com/", "user name or password"),
    ("http://exa mple.com/", "spaces"),
    ("http://example.com/a b", "spaces"),
    ("http://example.com/\x00", "control"),
    ("http://example.com/\u200b", "control"),
    ("http://example.com:99999/", "port"),
    ("http://example.com:0/", "port"),
    ("http://example.com:http/", "port"),
    ("http://[::1/", "parsed"),
    ("http://[fe80::1%25eth0]/", "%"),
    ("http://[::g]/", "IPv6"),
    ("http://exa%6dple.com/", "%"),
    ("http://a..b/", "host name"),
])
def test_check_url_refuses_with_instruction(url, fragment):
    with pytest.raises(BlockedURL) as info:
        check_url(url)
    assert fragment in info.value.message
    assert info.value.unreachable is False
    assert info.value.message.endswith(".")


@pytest.mark.parametrize("address", FORBIDDEN)
def test_forbidden_reason_refuses_non_public(address):
    assert forbidden_reason(ip(address), allow_loopback=False)


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:4700::1111", "8.8.8.8",
                                     "::ffff:93.184.216.34", "64:ff9b::808:808", "2002:808:808::"])
def test_forbidden_reason_allows_public(address):
    assert forbidden_reason(ip(address), allow_loopback=False) is None


@pytest.mark.parametrize("address", ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"])
def test_forbidden_reason_allow_loopback_allows_loopback(address):
    assert forbidden_reason(ip(address), allow_loopback=True) is None


@pytest.mark.parametrize("address", [a for a in FORBIDDEN
                                     if a not in ("127.0.0.1", "::1", "::ffff:127.0.0.1")])
def test_forbidden_reason_allow_loopback_still_refuses_others(address):
    assert forbidden_reason(ip(address), allow_loopback=True)


def test_forbidden_reason_names_metadata_and_private():
    assert forbidden_reason(ip("169.254.169.254"), False) == "the cloud metadata address"
    assert forbidden_reason(ip("10.0.0.1"), False) == "a private address"
    assert "127.0.0.1" in forbidden_reason(ip("64:ff9b::7f00:1"), True)


@pytest.mark.parametrize("host", ["2130706433", "0x7f000001", "127.1", "localhost", "127.0.0.1"])
def test_resolve_allowed_refuses_loopback_spellings(host):
    with pytest.raises(BlockedURL) as info:
        resolve_allowed(host, 80, allow_loopback=False)
    assert "loopback" in info.value.message


def test_resolve_allowed_allow_loopback_returns_address():
    assert resolve_allowed("2130706433", 80, allow_loopback=True) == ["127.0.0.1"]
    assert resolve_allowed("[::1]", 80, allow_loopback=True) == ["::1"]


def test_resolve_allowed_refuses_when_any_address_forbidden(monkeypatch):
    def fake(host, port, *args, **kwargs):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
                for a in ("93.184.216.34", "10.0.0.1")]
    monkeypatch.setattr(socket, "getaddrinfo", fake)
    with pytest.raises(BlockedURL) as info:
        resolve_allowed("rebind.example", 80, allow_loopback=False)
    assert "10.0.0.1" in info.value.message and "private" in info.value.message


def test_resolve_allowed_dns_failure_is_unreachable(monkeypatch):
    def fake(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    monkeypatch.setattr(socket, "getaddrinfo", fake)
    with pytest.raises(FetchError) as info:
        resolve_allowed("nope.invalid", 80, allow_loopback=False)
    assert info.value.unreachable is True
    assert not isinstance(info.value, BlockedURL)


def test_a_url_is_checked_the_same_whether_or_not_it_was_checked_before():
    good = "https://example.com/page?x=1"
    assert check_url(good) == check_url(good) == good
    for _ in range(2):  # a refusal is not remembered as an answer: it is refused again, with its reason
        with pytest.raises(BlockedURL, match="user name or password"):
            check_url("https://user:pw@example.com/")
    long_path = "https://example.com/" + "a" * 5000  # past the cached length: checked all the same
    assert check_url(long_path) == long_path
    with pytest.raises(BlockedURL, match="spaces"):
        check_url(long_path + " b")


#: what JUDGE_ALLOW_PRIVATE_URLS lets through for an account's judge model: this machine and the local network
LOCAL_NETWORK = ["127.0.0.1", "::1", "::ffff:127.0.0.1", "10.0.0.1", "172.16.0.1", "192.168.1.1", "100.64.0.1",
                 "fc00::1"]


@pytest.mark.parametrize("address", LOCAL_NETWORK)
def test_forbidden_reason_allow_private_allows_the_local_network(address):
    assert forbidden_reason(ip(address), allow_loopback=False, allow_private=True) is None


@pytest.mark.parametrize("address", [a for a in FORBIDDEN if a not in LOCAL_NETWORK])
def test_forbidden_reason_allow_private_still_refuses_metadata_and_the_rest(address):
    assert forbidden_reason(ip(address), allow_loopback=False, allow_private=True)
