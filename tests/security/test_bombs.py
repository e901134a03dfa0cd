"""Response bombs from real servers on 127.0.0.1: a gzip body that inflates past the cap, Content-Length 10^12,
an endless chunked body and a body dripping one byte every two seconds. Each fetch stops at FETCH_MAX_BYTES or
at the overall deadline, and the worker stays healthy: the bomb monitor's check records a clear error and a
normal monitor checked in the same batch still works.

(The fetcher's own gzip, oversized and dripping body cases are in tests/integration/test_fetcher.py; here the
bombs the fetcher had not met, and every bomb through the worker.)
"""

from __future__ import annotations

import time
import zlib

import pytest

from engine.http import FetchError, FetchPolicy, Fetcher
from engine.sources import SourceIO, parse_source, read
from tests.integration.helpers import monitor_row, tool, wakes
from tests.httpd import Handler, serve

MIB = 1024 * 1024
CAP = 64 * 1024
DEADLINE = 3
#: how much later than the deadline a stopped fetch may end: generous, this is not a timing test
SLACK = 5
HTML = b"<html><body><p id='v'>value 1</p></body></html>"
JSON = b'{"value": 1}'


def _gzip_bomb(size: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"<p>" + b"a" * (MIB - 3)
    return b"".join(packer.compress(block) for _ in range(size // MIB)) + packer.flush()


class Bombs(Handler):
    """/<bomb>/<name>: the normal page `name` (html or json) until the test arms the bomb, then the bomb."""

    armed: set[str] = set()
    changed: set[str] = set()
    gzip_body = b""

    def route_gzip(self, name: str) -> None:
        if name not in self.armed:
            return self.normal(name)
        self.send(200, self.gzip_body, [("Content-Type", "text/html"), ("Content-Encoding", "gzip")])

    def route_huge(self, name: str) -> None:
        if name not in self.armed:
            return self.normal(name)
        self.stream({"Content-Length": str(10 ** 12)}, lambda chunk: chunk)

    def route_chunked(self, name: str) -> None:
        if name not in self.armed:
            return self.normal(name)
        self.stream({"Transfer-Encoding": "chunked"}, lambda chunk: b"%x\r\n%s\r\n" % (len(chunk), chunk))

    def route_drip(self, name: str) -> None:
        if name not in self.armed:
            return self.normal(name)
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self.write_until_hung_up(lambda: b"x", pause=2)

    def route_page(self, name: str) -> None:
        self.normal(name)

    def normal(self, name: str) -> None:
        body, kind = (JSON, "application/json") if name.startswith("json") else (HTML, "text/html")
        if name in self.changed:
            body = body.replace(b"1", b"2")
        self.send(200, body, [("Content-Type", kind)])

    def stream(self, headers: dict, frame) -> None:
        self.send_response(200)
        for key, value in {"Content-Type": "text/html", **headers}.items():
            self.send_header(key, value)
        self.end_headers()
        chunk = b"<p>" + b"a" * 65533
        self.write_until_hung_up(lambda: frame(chunk), pause=0)

    def write_until_hung_up(self, piece, pause: float) -> None:
        deadline = time.monotonic() + 60  # a safety net: a bomb never outlives a test run
        try:
            while time.monotonic() < deadline:
                self.wfile.write(piece())
                self.wfile.flush()
                if pause:
                    time.sleep(pause)
        except OSError:
            pass


@pytest.fixture(scope="module")
def bombs():
    Bombs.gzip_body = _gzip_bomb(64 * MIB)
    with serve(Bombs) as base:
        yield base


@pytest.fixture(autouse=True)
def disarmed():
    Bombs.armed, Bombs.changed = set(), set()
    yield


@pytest.fixture()
def small_limits(reconfigure):
    return reconfigure(FETCH_MAX_BYTES=CAP, FETCH_TIMEOUT_SECONDS=DEADLINE, MONITOR_MIN_INTERVAL_SECONDS=1)


def fetched(url: str):
    fetcher = Fetcher(FetchPolicy(timeout=DEADLINE, max_bytes=CAP, allow_loopback=True))
    started = time.monotonic()
    try:
        return fetcher.get(url), time.monotonic() - started
    finally:
        fetcher.close()


@pytest.mark.parametrize("bomb", ["huge", "chunked"])
def test_fetcher_stops_an_endless_body_at_the_cap(bombs, bomb):
    Bombs.armed = {"page"}
    response, took = fetched(f"{bombs}/{bomb}/page")
    assert response.truncated is True and len(response.body) == CAP
    assert took < DEADLINE + SLACK


def create(client, token: str, url: str, kind: str) -> dict:
    body = tool(client, token, "monitor_create", {"description": "watch it", "source": {"type": kind, "url": url},
                                                  "interval": "1m", "max_wakes": 5}).json()
    assert body["ok"], body
    return body["result"]


CUT_SHORT = "The response is larger than 65,536 bytes, the most Vigil reads (FETCH_MAX_BYTES), and a JSON document"
TIMED_OUT = f"timed out after {DEADLINE} seconds"
#: what the bomb monitor's check records: the deadline's error, or for a body cut at the cap, the page as far as
#: the cap (a page is read up to the limit) and, for JSON that can't be read in part, an error that says why
RECORDED = {("gzip", "json"): CUT_SHORT, ("huge", "json"): CUT_SHORT, ("chunked", "json"): CUT_SHORT,
            ("drip", "json"): TIMED_OUT, ("drip", "page"): TIMED_OUT}


@pytest.mark.parametrize("bomb", ["gzip", "huge", "chunked", "drip"])
@pytest.mark.parametrize("kind", ["page", "json"])
def test_worker_survives_a_bomb_and_records_it(client, owner, bombs, small_limits, run_due_checks, bomb, kind):
    victim = create(client, owner[1], f"{bombs}/{bomb}/{kind}-victim", kind)["monitor_id"]
    bystander = create(client, owner[1], f"{bombs}/page/{kind}-bystander", kind)["monitor_id"]
    Bombs.armed = {f"{kind}-victim"}
    Bombs.changed = {f"{kind}-bystander"}
    started = time.monotonic()
    run_due_checks()
    assert time.monotonic() - started < DEADLINE + SLACK
    assert len(wakes(bystander)) == 1, "the normal monitor checked beside the bomb did not wake on its change"
    assert monitor_row(bystander).last_error == ""
    victim_row = monitor_row(victim)
    expected = RECORDED.get((bomb, kind))
    if expected:
        assert expected in victim_row.last_error and wakes(victim) == []
    else:  # a page cut at the cap: read as far as the cap, which is a change like any other
        assert victim_row.last_error == "" and len(wakes(victim)) == 1
        assert "aaaa" in wakes(victim)[0].content and len(wakes(victim)[0].content.encode()) < 2 * CAP


@pytest.mark.parametrize("raw, readable", [
    ({"type": "json"}, False),
    ({"type": "metric", "metric": "up"}, False),
    ({"type": "feed", "items_path": "items", "key_path": "id"}, False),
    ({"type": "feed"}, True),  # an XML feed cut short still yields its first entries
    ({"type": "page"}, True),
])
def test_sources_read_whole_refuse_a_body_cut_at_the_cap(bombs, raw, readable):
    Bombs.armed = {"page"}
    spec = parse_source({**raw, "url": f"{bombs}/chunked/page"})
    io = SourceIO(Fetcher(FetchPolicy(timeout=DEADLINE, max_bytes=CAP, allow_loopback=True)))
    try:
        if readable:
            assert len(read(spec, io)) == CAP
        else:
            with pytest.raises(FetchError, match="larger than 65,536 bytes") as info:
                read(spec, io)
            assert info.value.unreachable is False
    finally:
        io.fetcher.close()
