"""BROWSER_CONCURRENCY bounds the pages one process renders at once (issue 31), with the real Chromium: with one
slot, a second render waits until the first page is closed, and only then asks for its page."""

from __future__ import annotations

import shutil
import threading

import pytest

from adapters.browser import Browser, BrowserConfig
from tests.conftest import REQUIRE_SERVICES
from tests.integration.test_browser_pages import NEVER_SETTLES, Site

CHROMIUM = shutil.which("chromium") or ""

pytestmark = pytest.mark.skipif(not CHROMIUM and not REQUIRE_SERVICES,
                                reason="Chromium is not installed (apt-get install chromium)")


@pytest.fixture()
def site():
    server = Site()
    yield server
    server.stop()


def test_a_render_past_the_concurrency_waits_for_a_slot(site):
    held = site.set("/one", NEVER_SETTLES)  # its image is held open until the site lets it go
    waiting = site.set("/two", "<html><body><p id='price'>Price: 2</p></body></html>")
    browser = Browser(BrowserConfig(executable=CHROMIUM, concurrency=1, timeout=20, allow_loopback=True))
    read: dict[str, bytes] = {}

    def render(url: str) -> None:
        with browser.session() as session:
            read[url] = session.render(url, "#price", None)

    first = threading.Thread(target=render, args=(held,), daemon=True)
    second = threading.Thread(target=render, args=(waiting,), daemon=True)
    try:
        first.start()
        assert site.slow_asked.wait(30), "the first page never loaded"
        second.start()
        second.join(1.5)
        assert second.is_alive() and "/two" not in site.asked, "a second page rendered beside the first"
        site.stopping.set()  # the image fails: the first page settles, is read and closed
        first.join(40)
        second.join(40)
        assert not first.is_alive() and not second.is_alive()
        assert b"Price: 1" in read[held] and b"Price: 2" in read[waiting]
        assert site.asked["/two"] == 1
    finally:
        browser.close()
