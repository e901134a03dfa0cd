"""Pages rendered in a browser (issue 31), with the real Chromium (/usr/bin/chromium) against real local pages: content
a script adds is read and fires a threshold, `wait_for`, a page that never settles and a renderer that crashes are
unreachable checks (the worker goes on), create without a browser is refused with a sentence, a dry run and the
"this page builds its content with JavaScript" note, and the screenshots only their owner can see."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from adapters.settings import Settings
from models.screenshots import Screenshot
from models.tables import MonitorRun
from tests.conftest import REQUIRE_SERVICES, TEST_DATABASE_URL, TEST_REDIS_URL
from tests.integration.helpers import db, login, monitor_row, tool, wakes

CHROMIUM = shutil.which("chromium") or ""

pytestmark = pytest.mark.skipif(not CHROMIUM and not REQUIRE_SERVICES,
                                reason="Chromium is not installed (apt-get install chromium)")

#: a shop page whose price a script puts in after 500 ms: the server's HTML has no #price at all
LATE_PRICE = """<html><body><h1>Shop</h1><script>
setTimeout(() => { const p = document.createElement('p'); p.id = 'price'; p.textContent = 'Price: $PRICE';
                   document.body.appendChild(p); }, 500);
</script></body></html>"""
#: the price comes at 1.5 s, after the network is idle; the .loaded mark says it is there
LATE_MARK = """<html><body><p id='price'>loading</p><script>
setTimeout(() => { const p = document.getElementById('price'); p.textContent = 'Price: $PRICE';
                   p.classList.add('loaded'); }, 1500);
</script></body></html>"""
#: the price comes at 2 s, well after the network is idle, with no wait_for: the read waits for the selector
LATER_PRICE = LATE_PRICE.replace("}, 500);", "}, 2000);")
#: a page whose image never answers: the network never goes idle
NEVER_SETTLES = "<html><body><p id='price'>Price: 1</p><img src='/slow.png'></body></html>"


class Site:
    """Pages on 127.0.0.1 a test sets and changes, and other files; /slow.png holds its request open until the
    site stops. `asked` counts the requests of each path."""

    def __init__(self) -> None:
        site = self
        self.pages: dict[str, str] = {}
        self.files: dict[str, tuple[bytes, str]] = {}
        self.asked: dict[str, int] = {}
        self.stopping = threading.Event()
        #: set once /slow.png was asked for: the page's document is loaded in its renderer
        self.slow_asked = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                site.asked[self.path] = site.asked.get(self.path, 0) + 1
                if self.path == "/slow.png":
                    site.slow_asked.set()
                    site.stopping.wait(60)
                    return
                page = site.pages.get(self.path)
                found = page is not None or self.path in site.files
                body, kind = site.files.get(self.path) or ((page or "not found").encode(), "text/html; charset=utf-8")
                self.send_response(200 if found else 404)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def set(self, path: str, body: str) -> str:
        self.pages[path] = body
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def put(self, path: str, body: bytes, kind: str) -> None:
        """A file other than a page (an image, a script)."""
        self.files[path] = (body, kind)

    def stop(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def site():
    server = Site()
    yield server
    server.stop()


@pytest.fixture()
def settings(tmp_path) -> Settings:
    """The integration settings, with the local Chromium a worker launches once and reuses."""
    return Settings(VIGIL_DATA_DIR=str(tmp_path), DATABASE_URL=TEST_DATABASE_URL, REDIS_URL=TEST_REDIS_URL,
                    SECRET_KEY="integration-test-secret", FETCH_ALLOW_LOOPBACK=True, MONITOR_MIN_INTERVAL_SECONDS=1,
                    FETCH_TIMEOUT_SECONDS=8, CREATE_FETCH_TIMEOUT_SECONDS=15, BROWSER_EXECUTABLE=CHROMIUM)


def create(client, token: str, url: str, **arguments) -> dict:
    args = {"description": "the price drops below 90", "interval": "5m", "on_match": "Tell the user.",
            "source": {"type": "page", "url": url, "selector": "#price", "render": "browser"},
            "check": {"type": "threshold", "op": "<", "value": 90}, **arguments}
    return tool(client, token, "monitor_create", args).json()


def runs_after_baseline(monitor_id: str) -> list[str]:
    with db():
        return [run.kind for run in MonitorRun.select().where(MonitorRun.monitor == monitor_id)
                .order_by(MonitorRun.id) if run.kind not in ("baseline", "armed")]


def test_rendered_page_reads_what_a_script_adds_and_fires_a_threshold(client, owner, site, run_due_checks):
    url = site.set("/shop", LATE_PRICE.replace("$PRICE", "95.10"))
    body = create(client, owner[1], url)
    assert body["ok"], body
    monitor_id = body["result"]["monitor_id"]
    assert "95.10" in body["result"]["baseline"]
    run_due_checks()  # the same page again: a quiet check, no event written
    assert runs_after_baseline(monitor_id) == [] and wakes(monitor_id) == []
    assert monitor_row(monitor_id).check_count == 2
    site.set("/shop", LATE_PRICE.replace("$PRICE", "89.50"))
    run_due_checks()
    [wake] = wakes(monitor_id)
    assert "89.50 is below 90 (was 95.10)" in wake.content


def test_the_server_html_alone_has_no_price(client, owner, site):
    """The proof the page needs the browser: without render the same create fails on the selector."""
    url = site.set("/shop", LATE_PRICE.replace("$PRICE", "95.10"))
    source = {"type": "page", "url": url, "selector": "#price"}
    with_browser = tool(client, owner[1], "monitor_create", {
        "description": "price", "source": source, "check": {"type": "change"}, "dry_run": True}).json()
    assert with_browser["ok"], with_browser
    assert any("builds its content with JavaScript" in note for note in with_browser["result"]["notes"])


def test_wait_for_reads_the_page_once_the_selector_shows(client, owner, site):
    url = site.set("/late", LATE_MARK.replace("$PRICE", "95.10"))
    body = create(client, owner[1], url, source={"type": "page", "url": url, "selector": "#price",
                                                 "render": "browser", "wait_for": "#price.loaded"})
    assert body["ok"], body
    assert "95.10" in body["result"]["baseline"]


def test_a_selector_that_shows_after_the_network_settles_is_waited_for(client, owner, site):
    """The page is read once it settles; a selector that matches nothing yet is waited for (up to 5 s), then the
    page is read again; one that never shows is a selector that matches nothing."""
    url = site.set("/later", LATER_PRICE.replace("$PRICE", "95.10"))
    body = create(client, owner[1], url)
    assert body["ok"], body
    assert "95.10" in body["result"]["baseline"]
    url = site.set("/never", LATER_PRICE.replace("$PRICE", "95.10").replace("'price'", "'cost'"))
    body = create(client, owner[1], url)
    assert not body["ok"] and "matches nothing" in str(body), body


def test_a_page_that_never_settles_is_an_unreachable_check(client, owner, site, run_due_checks):
    url = site.set("/shop", LATE_PRICE.replace("$PRICE", "95.10"))
    monitor_id = create(client, owner[1], url)["result"]["monitor_id"]
    site.set("/shop", NEVER_SETTLES)
    run_due_checks()
    monitor = monitor_row(monitor_id)
    assert "did not finish loading in the browser within 8 seconds" in monitor.last_error
    assert monitor.unreachable_since is not None and monitor.status == "active"


def _renderers_of_this_process() -> list[int]:
    """The pids of Chromium renderers started from this process (its Playwright driver's Chromium), never
    another's."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), []):
            todo.append(child)
            try:
                with open(f"/proc/{child}/cmdline", "rb") as fh:
                    if b"--type=renderer" in fh.read():
                        found.append(child)
            except OSError:
                pass
    return found


def test_a_crashed_renderer_is_an_unreachable_check_and_the_worker_goes_on(client, owner, site, run_due_checks):
    url = site.set("/shop", LATE_PRICE.replace("$PRICE", "95.10"))
    monitor_id = create(client, owner[1], url)["result"]["monitor_id"]
    site.set("/shop", NEVER_SETTLES)  # held open, so the renderer is there to kill
    killed: list[int] = []

    def kill_renderers() -> None:  # once the page is loaded and waits for its image: every renderer there is
        while not done.is_set() and not killed:
            if not site.slow_asked.wait(0.2):
                continue
            for pid in _renderers_of_this_process():
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
    done = threading.Event()
    killer = threading.Thread(target=kill_renderers)
    killer.start()
    try:
        run_due_checks()
    finally:
        done.set()
        killer.join()
    assert killed, "no renderer was found to kill"
    monitor = monitor_row(monitor_id)
    assert "renderer crashed" in monitor.last_error and monitor.unreachable_since is not None
    site.set("/shop", LATE_PRICE.replace("$PRICE", "80"))
    run_due_checks()  # the same worker renders the next check
    assert len(wakes(monitor_id)) == 1
    assert monitor_row(monitor_id).unreachable_since is None


def test_render_browser_without_a_browser_is_refused_with_how_to_enable_it(client, owner, site, reconfigure):
    reconfigure(BROWSER_EXECUTABLE="", BROWSER_CDP_URL="")
    url = site.set("/shop", LATE_PRICE.replace("$PRICE", "95.10"))
    body = create(client, owner[1], url)
    assert body["ok"] is False
    assert "BROWSER_CDP_URL" in body["error"] and "chromium" in body["error"]
    with db():
        assert MonitorRun.select().count() == 0 and Screenshot.select().count() == 0
    plain = tool(client, owner[1], "monitor_create", {
        "description": "price", "source": {"type": "page", "url": url}, "check": {"type": "change"}}).json()
    assert plain["ok"], plain  # everything else works as before


def test_wait_for_without_render_is_refused(client, owner, site):
    url = site.set("/shop", LATE_PRICE.replace("$PRICE", "95.10"))
    body = create(client, owner[1], url, source={"type": "page", "url": url, "wait_for": "#price"})
    assert body["ok"] is False and "wait_for works with render" in body["error"]


def test_dry_run_renders_and_stores_nothing(client, owner, site):
    url = site.set("/shop", LATE_PRICE.replace("$PRICE", "85"))
    body = create(client, owner[1], url, dry_run=True)
    assert body["ok"], body
    assert body["result"]["dry_run"] is True and "85" in str(body["result"])
    with db():
        assert MonitorRun.select().count() == 0 and Screenshot.select().count() == 0


def test_create_switches_to_the_browser_when_only_the_rendered_page_matches(client, owner, site):
    url = site.set("/shop", LATE_PRICE.replace("$PRICE", "95.10"))
    body = tool(client, owner[1], "monitor_create", {
        "description": "price", "source": {"type": "page", "url": url, "selector": "#price"},
        "check": {"type": "threshold", "op": "<", "value": 90}}).json()
    assert body["ok"], body
    assert any("builds its content with JavaScript" in note for note in body["result"]["notes"])
    assert monitor_row(body["result"]["monitor_id"]).source["render"] == "browser"


def test_screenshots_on_baseline_and_fire_are_the_owners_alone(client, owner, stranger, site, run_due_checks):
    url = site.set("/shop", LATE_PRICE.replace("$PRICE", "95.10"))
    monitor_id = create(client, owner[1], url)["result"]["monitor_id"]
    site.set("/shop", LATE_PRICE.replace("$PRICE", "70"))
    run_due_checks()
    with db():
        shots = [(shot.id, shot.kind, bytes(shot.image)) for shot in
                 Screenshot.select().where(Screenshot.monitor == monitor_id).order_by(Screenshot.id)]
    assert [kind for _, kind, _ in shots] == ["baseline", "fired"]
    assert all(image.startswith(b"\xff\xd8") and len(image) <= 200 * 1024 for _, _, image in shots)
    login(client, "stranger@example.com", "stranger-password")
    assert client.get(f"/monitors/{monitor_id}/screenshots/{shots[1][0]}").status_code == 404
    client.cookies.clear()
    login(client)
    answer = client.get(f"/monitors/{monitor_id}/screenshots/{shots[1][0]}")
    assert answer.status_code == 200 and answer.headers["content-type"] == "image/jpeg"
    assert answer.content == shots[1][2]
    page = client.get(f"/monitors/{monitor_id}").text
    assert f"/monitors/{monitor_id}/screenshots/{shots[1][0]}" in page


def jpeg_size(image: bytes) -> tuple[int, int]:
    """(width, height) from a JPEG's frame header."""
    at = 2
    while at < len(image):
        marker, length = image[at + 1], int.from_bytes(image[at + 2:at + 4], "big")
        if 0xC0 <= marker <= 0xC3:
            return int.from_bytes(image[at + 7:at + 9], "big"), int.from_bytes(image[at + 5:at + 7], "big")
        at += 2 + length
    raise AssertionError("no frame header in the JPEG")


def test_the_picture_of_a_price_shows_its_text_with_the_page_around_it(client, owner, site):
    """The price is a paragraph as wide as the page; its picture is its words with some of the page around them, not
    a strip the width of the page and one line high, which the monitor page could only show a few pixels tall."""
    url = site.set("/shop", LATE_PRICE.replace("$PRICE", "95.10"))
    monitor_id = create(client, owner[1], url)["result"]["monitor_id"]
    with db():
        [image] = [bytes(shot.image) for shot in Screenshot.select().where(Screenshot.monitor == monitor_id)]
    width, height = jpeg_size(image)
    assert 320 <= width <= 640 and height >= 96, (width, height)


def test_screenshots_kept_are_the_newest(client, owner, site, run_due_checks, reconfigure):
    reconfigure(MONITOR_SCREENSHOTS_KEPT=2)
    url = site.set("/shop", LATE_PRICE.replace("$PRICE", "95"))
    monitor_id = create(client, owner[1], url, max_wakes=5)["result"]["monitor_id"]
    for price in ("80", "95", "70"):
        site.set("/shop", LATE_PRICE.replace("$PRICE", price))
        run_due_checks()
    with db():
        kinds = [shot.kind for shot in Screenshot.select().where(Screenshot.monitor == monitor_id)]
    assert kinds == ["fired", "fired"] and len(wakes(monitor_id)) == 2
