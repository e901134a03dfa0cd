"""OUTBOUND_PROXY and NO_PROXY as engine/egress.py reads them: the proxy's address and credentials, which
destinations go direct, and settings Vigil can't use refused at start-up with a sentence that never repeats the
password."""

from __future__ import annotations

import pytest

from adapters.settings import Settings, SettingsError
from engine.egress import Egress, NoProxy, Proxy, ProxySettingError, parse_proxy


def test_proxy_url_gives_host_port_and_basic_credentials():
    assert parse_proxy("http://proxy.internal:4750") == Proxy("proxy.internal", 4750, "")
    assert parse_proxy("http://10.0.5.10") == Proxy("10.0.5.10", 80, "")
    assert parse_proxy("http://[fd00::5]:3128").shown == "[fd00::5]:3128"
    with_user = parse_proxy("http://vigil:p%40ss%3Aword@proxy.internal:3128/")
    assert with_user.authorization == "Basic dmlnaWw6cEBzczp3b3Jk"  # vigil:p@ss:word
    assert with_user.shown == "proxy.internal:3128"
    assert with_user.connect_head("example.com", 443) == (
        b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n"
        b"Proxy-Authorization: Basic dmlnaWw6cEBzczp3b3Jk\r\n\r\n")
    assert Proxy("p", 1).connect_head("2001:db8::1", 443).startswith(b"CONNECT [2001:db8::1]:443 HTTP/1.1\r\n")


@pytest.mark.parametrize("raw, says", [
    ("https://proxy.internal:443", "must start with http://"),
    ("socks5://u:secretpw@proxy:1080", "must start with http://"),
    ("proxy.internal:4750", "must start with http://"),
    ("http://:4750", "must name the proxy's host"),
    ("http://u:secretpw@proxy:4750/path", "without a path"),
    ("http://u:secretpw@proxy:99999", "could not be read"),
])
def test_unusable_proxy_settings_are_refused_without_repeating_them(raw, says):
    with pytest.raises(ProxySettingError) as refused:
        parse_proxy(raw)
    assert says in str(refused.value) and "secretpw" not in str(refused.value)
    with pytest.raises(SettingsError) as at_start:
        Settings.from_env({"OUTBOUND_PROXY": raw, "VIGIL_DATA_DIR": "/tmp/vigil-unit-egress"})
    assert says in str(at_start.value) and "secretpw" not in str(at_start.value)


@pytest.mark.parametrize("no_proxy, host, port, direct", [
    ("", "example.com", 443, False),
    ("*", "example.com", 443, True),
    ("example.com", "example.com", 443, True),
    ("example.com", "api.example.com", 443, True),
    ("example.com", "notexample.com", 443, False),
    (".example.com", "example.com", 443, True),
    ("*.example.com", "www.example.com", 80, True),
    ("Example.COM.", "www.example.com.", 80, True),
    ("example.com:8443", "example.com", 8443, True),
    ("example.com:8443", "example.com", 443, False),
    ("10.0.0.0/8", "10.20.30.40", 80, True),
    ("10.0.0.0/8", "11.0.0.1", 80, False),
    ("10.0.0.0/8", "ten.example.com", 80, False),  # CIDR entries match addresses written out, not names
    ("192.0.2.7", "192.0.2.7", 80, True),
    ("::1", "[::1]", 80, True),
    ("[2001:db8::1]:8080", "2001:db8::1", 8080, True),
    ("2001:db8::/32", "2001:db8:5::1", 443, True),
    (" a.test , b.test ", "b.test", 443, True),
])
def test_no_proxy_follows_the_usual_rules(no_proxy, host, port, direct):
    assert NoProxy.parse(no_proxy).matches(host, port) is direct
    egress = Egress.of("http://proxy:3128", no_proxy)
    assert (egress.proxy_for(host, port) is None) is direct


def test_no_proxy_with_a_bad_port_or_an_empty_domain_is_refused():
    for raw in ("example.com:http", "example.com:0", "."):
        with pytest.raises(ProxySettingError):
            NoProxy.parse(raw)


def test_no_proxy_set_means_every_request_goes_direct():
    assert Egress.of("", "example.com") is None
    assert Settings().egress is None
    assert Settings(OUTBOUND_PROXY="http://proxy:3128").egress == Egress(Proxy("proxy", 3128))
