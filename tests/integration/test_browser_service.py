"""Production's browser (issue 31): pages rendered in a Chromium started on its own with --remote-debugging-port,
reached over CDP (BROWSER_CDP_URL), from a worker that takes the `browser` queue; a plain `vigil worker` leaves
that queue alone. `vigil web`, the workers and the scheduler are real processes on the integration database."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import redis

from tests.conftest import REQUIRE_SERVICES, TEST_REDIS_URL
from tests.integration.helpers import running_stack, wait_for
from tests.integration.test_browser_pages import LATE_PRICE, Site
from tests.processes import VIGIL

CHROMIUM = shutil.which("chromium") or ""

pytestmark = pytest.mark.skipif(not CHROMIUM and not REQUIRE_SERVICES,
                                reason="Chromium is not installed (apt-get install chromium)")


def start_browser_service(profile: Path) -> tuple[subprocess.Popen, str]:
    """A headless Chromium as an operator runs one for Vigil: its DevTools port (0: any free one) is read from the
    DevToolsActivePort file it writes in its profile."""
    process = subprocess.Popen([CHROMIUM, "--headless", "--remote-debugging-port=0",
                                "--remote-debugging-address=127.0.0.1", f"--user-data-dir={profile}", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                                "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    active = profile / "DevToolsActivePort"
    wait_for(lambda: active.exists() and active.read_text().strip(), timeout=30,
             message="Chromium wrote no DevToolsActivePort")
    return process, f"http://127.0.0.1:{active.read_text().split()[0]}"


@pytest.fixture()
def browser_service(tmp_path):
    process, url = start_browser_service(tmp_path / "chromium-profile")
    yield url
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


@pytest.fixture()
def site():
    server = Site()
    yield server
    server.stop()


def test_renders_go_to_the_browser_queue_and_its_worker_over_cdp(tmp_path, browser_service, site, owner):
    url = site.set("/shop", LATE_PRICE.replace("$PRICE", "95.10"))
    with running_stack(tmp_path, scheduler=True, BROWSER_CDP_URL=browser_service,
                       FETCH_TIMEOUT_SECONDS="10", CREATE_FETCH_TIMEOUT_SECONDS="15") as stack:
        stack.token = owner[1]
        # 5 s: longer than a render, which a claim made while it runs would make stale (nothing recorded)
        created = stack.tool("conv-browser", description="the price drops below 90", interval="5s",
                             source={"type": "page", "url": url, "selector": "#price", "render": "browser"},
                             check={"type": "threshold", "op": "<", "value": 90}, on_match="Tell the user.")
        assert "95.10" in created["baseline"]  # the web rendered the baseline in the browser service
        site.set("/shop", LATE_PRICE.replace("$PRICE", "80"))
        queue = redis.Redis.from_url(TEST_REDIS_URL)
        # the plain worker leaves the renders queued: only a browser worker takes them
        wait_for(lambda: queue.llen("dramatiq:browser") > 0, timeout=30, message="no render was queued")
        assert stack.query("SELECT count(*) FROM messages WHERE role = 'wake'") == [(0,)]
        stack._start("browser-worker", [VIGIL, "worker", "--processes", "1", "--threads", "2", "--queues", "browser"])
        try:
            wait_for(lambda: stack.query("SELECT count(*) FROM messages WHERE role = 'wake'") == [(1,)], timeout=60,
                     message="the browser worker did not fire")
        except AssertionError:
            print(stack.log_tails(6000))
            raise
        [(content,)] = stack.query("SELECT content FROM messages WHERE role = 'wake'")
        assert "80 is below 90" in content
        kinds = [row[0] for row in stack.query("SELECT kind FROM screenshots ORDER BY id")]
        assert kinds == ["baseline", "fired"]
