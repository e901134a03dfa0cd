"""SSRF: every internal, metadata or unusable target is refused at create time (the tool answers a refusal and
stores nothing), at fetch time (the Fetcher raises BlockedURL) and after a redirect from an allowed page.

A real server on 127.0.0.1 (reachable with FETCH_ALLOW_LOOPBACK) redirects to each target. Each refusal is
checked by its reason, and an allowed control URL is fetched in the same setting, so no case can pass because
the fetch failed for some other reason. The single-address and syntax rules themselves are unit tested in
tests/unit/test_http_guard.py; here they are driven end to end.
"""

from __future__ import annotations

import socket
from urllib.parse import quote, unquote

import pytest

import engine.wire
from engine.http import BlockedURL, FetchPolicy, Fetcher
from models.tables import Monitor
from tests.integration.helpers import db, monitor_row, tool
from tests.httpd import Handler, serve

PAGE = b"<html><body><p>public page</p></body></html>"
#: Refused whatever FETCH_ALLOW_LOOPBACK says: (url, the reason the refusal must give).
ALWAYS = [
    ("http://169.254.169.254/latest/meta-data/", "the cloud metadata address"),
    ("http://[fd00:ec2::254]/", "the cloud metadata address"),
    ("http://100.100.100.200/", "the cloud metadata address"),
    ("http://168.63.129.16/", "the cloud platform's internal address"),
    ("http://0/", "the unspecified address"),
    ("http://[::]/", "the unspecified address"),
    ("http://10.0.0.1/", "a private address"),
    ("http://172.16.0.1/", "a private address"),
    ("http://192.168.1.1/", "a private address"),
    ("http://100.64.0.1/", "a carrier-grade NAT address"),
    ("http://[fc00::1]/", "a private address"),
    ("http://[fe80::1]/", "a link-local address"),
    ("http://[64:ff9b::7f00:1]/", "an IPv6 address embedding 127.0.0.1"),
    ("http://[2002:7f00:1::]/", "an IPv6 address embedding 127.0.0.1"),
]
#: Not a usable http(s) url at all: refused before any lookup.
UNUSABLE = [
    ("http://example.com\\@127.0.0.1/", "backslashes"),
    ("http://evil@127.0.0.1/", "user name or password"),
    ("file:///etc/passwd", "(got 'file')"),
    ("gopher://127.0.0.1:70/_stats", "(got 'gopher')"),
    ("ftp://127.0.0.1/", "(got 'ftp')"),
    ("dict://127.0.0.1:11211/stat", "(got 'dict')"),
    ("data:text/html,<h1>hi</h1>", "(got 'data')"),
    ("javascript:alert(1)", "(got 'javascript')"),
]
#: This machine, spelled every way: refused unless FETCH_ALLOW_LOOPBACK (a {port} is filled with the server's).
LOOPBACK = ["http://127.0.0.1:{port}/page/", "http://localhost:{port}/page/", "http://[::1]:{port}/page/",
            "http://2130706433:{port}/page/", "http://0x7f000001:{port}/page/", "http://127.1:{port}/page/",
            "http://[::ffff:127.0.0.1]:{port}/page/"]
#: The IPv4 spellings, which reach the test server (it listens on 127.0.0.1 only) once loopback is allowed.
LOOPBACK_V4 = [url for url in LOOPBACK if "[" not in url]
REFUSED = ALWAYS + UNUSABLE


class Redirector(Handler):
    """/page/ is a plain page; /to/<quoted url> redirects there; /chain/<n> redirects n times, then the page."""

    def route_page(self, _: str) -> None:
        self.send(200, PAGE, [("Content-Type", "text/html")])

    def route_to(self, arg: str) -> None:
        self.send(302, b"", [("Location", unquote(arg))])

    def route_chain(self, arg: str) -> None:
        hops = int(arg)
        self.send(302, b"", [("Location", f"/chain/{hops - 1}" if hops > 1 else "/page/")])


@pytest.fixture(scope="module")
def site():
    with serve(Redirector) as base:
        yield base


def via(site: str, target: str) -> str:
    return f"{site}/to/{quote(target, safe='')}"


def port_of(site: str) -> int:
    return int(site.rsplit(":", 1)[1])


@pytest.fixture()
def fetch():
    made = []

    def get(url: str, allow_loopback: bool):
        made.append(Fetcher(FetchPolicy(timeout=5, allow_loopback=allow_loopback)))
        return made[-1].get(url)
    yield get
    for fetcher in made:
        fetcher.close()


def refused(fetch, url: str, allow_loopback: bool) -> BlockedURL:
    with pytest.raises(BlockedURL) as info:
        fetch(url, allow_loopback)
    assert info.value.unreachable is False
    return info.value


def monitors() -> int:
    with db():
        return Monitor.select().count()


def create(client, token: str, url: str) -> dict:
    return tool(client, token, "monitor_create", {"description": "watch it", "source": {"type": "page", "url": url}}
                ).json()


def assert_refused_at_create(client, token: str, url: str, reason: str) -> None:
    body = create(client, token, url)
    assert body["ok"] is False, body
    assert reason in body["error"], body["error"]
    assert monitors() == 0


# Fetch time ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("allow_loopback", [False, True], ids=["default", "loopback-allowed"])
@pytest.mark.parametrize("url, reason", REFUSED)
def test_fetcher_refuses_target(fetch, site, url, reason, allow_loopback):
    assert reason in refused(fetch, url, allow_loopback).message
    assert fetch(f"{site}/page/", True).body == PAGE  # the control: the same kind of fetch works


@pytest.mark.parametrize("url", LOOPBACK)
def test_fetcher_refuses_loopback_spellings_by_default(fetch, site, url):
    assert "a loopback address" in refused(fetch, url.format(port=port_of(site)), False).message


@pytest.mark.parametrize("url", LOOPBACK_V4)
def test_fetcher_loopback_setting_allows_those_spellings(fetch, site, url):
    assert fetch(url.format(port=port_of(site)), True).body == PAGE


@pytest.mark.parametrize("url, reason", ALWAYS)
def test_fetcher_refuses_target_after_redirect(fetch, site, url, reason):
    assert reason in refused(fetch, via(site, url), True).message


@pytest.mark.parametrize("url, reason", UNUSABLE)
def test_fetcher_refuses_unusable_redirect(fetch, site, url, reason):
    error = refused(fetch, via(site, url), True)
    assert error.message.startswith("The page redirected to an unusable url: ")


# Create time: the tool answers a refusal and stores nothing -------------------------------------------------

@pytest.mark.parametrize("url, reason", REFUSED)
def test_create_refuses_target_directly_and_after_redirect(client, owner, site, url, reason):
    assert_refused_at_create(client, owner[1], url, reason)
    redirected = create(client, owner[1], via(site, url))
    assert redirected["ok"] is False and monitors() == 0
    assert reason in redirected["error"] or "redirected to an unusable url" in redirected["error"]
    assert create(client, owner[1], f"{site}/page/")["ok"] is True  # the control, in the same setting


@pytest.mark.parametrize("url", LOOPBACK)
def test_create_refuses_loopback_without_the_setting(client, owner, reconfigure, site, url):
    reconfigure(FETCH_ALLOW_LOOPBACK=False)
    assert_refused_at_create(client, owner[1], url.format(port=port_of(site)), "a loopback address")


def test_create_refuses_a_redirect_chain_over_the_limit(client, owner, site):
    body = create(client, owner[1], f"{site}/chain/6")
    assert body["ok"] is False and "more than 5 redirects" in body["error"] and monitors() == 0
    assert create(client, owner[1], f"{site}/chain/5")["ok"] is True


def test_check_that_starts_redirecting_inward_records_the_refusal(client, owner, run_due_checks):
    """A page that was public at create time and later redirects to the metadata address: the check fails."""
    class Turncoat(Redirector):
        inward = False

        def route_page(self, arg: str) -> None:
            if Turncoat.inward:
                return self.route_to(quote("http://169.254.169.254/latest/meta-data/", safe=""))
            return super().route_page(arg)

    with serve(Turncoat) as base:
        result = create(client, owner[1], f"{base}/page/")
        assert result["ok"] is True
        Turncoat.inward = True
        run_due_checks()
    assert "the cloud metadata address" in monitor_row(result["result"]["monitor_id"]).last_error


# DNS rebinding ----------------------------------------------------------------------------------------------

PUBLIC = "93.184.216.34"


class Rebinder:
    """rebind.test answers `answers` in turn (the last one from then on). Connections to PUBLIC are carried to
    the local server, as if it were that public host; every address connected to is recorded."""

    def __init__(self, answers: list[str], local_port: int):
        self.answers, self.local_port = answers, local_port
        self.lookups: list[str] = []
        self.connected: list[str] = []

    def lookup(self, real, host, port, *args, **kwargs):
        if host != "rebind.test":
            return real(host, port, *args, **kwargs)
        answer = self.answers[min(len(self.lookups), len(self.answers) - 1)]
        self.lookups.append(answer)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answer, port))]

    def connect(self, real, address, *args, **kwargs):
        self.connected.append(address[0])
        return real(("127.0.0.1", self.local_port) if address[0] == PUBLIC else address, *args, **kwargs)


@pytest.fixture()
def rebinder(monkeypatch, site):
    """Patches the two network primitives the fetcher uses: the resolver and the socket connect."""
    def make(answers: list[str]) -> Rebinder:
        rebinder = Rebinder(answers, port_of(site))
        real_lookup, real_connect = socket.getaddrinfo, engine.wire.create_connection
        monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: rebinder.lookup(real_lookup, *a, **k))
        monkeypatch.setattr(engine.wire, "create_connection", lambda *a, **k: rebinder.connect(real_connect, *a, **k))
        return rebinder
    return make


@pytest.mark.parametrize("private", ["127.0.0.1", "10.0.0.1"])
def test_dns_rebinding_is_refused_at_connect_time(rebinder, site, private):
    """Public on the first lookup, private on the next: the fetcher looks up once per connection and connects to
    exactly what it approved, so the second answer is checked (and refused) before any connection to it."""
    dns = rebinder([PUBLIC, private])
    url = f"http://rebind.test:{port_of(site)}/page/"
    fetcher = Fetcher(FetchPolicy(timeout=5, allow_loopback=False))
    try:
        assert fetcher.get(url).body == PAGE  # the public answer is fetched: the control
        assert dns.lookups == [PUBLIC]  # one lookup for the whole get: nothing to rebind in between
        fetcher.close()  # the next get needs a new connection, so a new lookup: now the name points inside
        with pytest.raises(BlockedURL) as info:
            fetcher.get(url)
    finally:
        fetcher.close()
    assert f"rebind.test, which resolves to {private}" in info.value.message
    assert dns.lookups == [PUBLIC, private]
    assert dns.connected == [PUBLIC], "the fetcher connected to an address it had not approved"
