"""What a rendered page may not do (issue 31), with the real Chromium against a real local site: a popup it opens
gets no window and is never fetched, a download link it clicks is cancelled before its request, a service worker's
script is never fetched, the permissions it asks for are denied, and fonts and media are never fetched, while images
are (a price may be one)."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import REQUIRE_SERVICES
from tests.integration.helpers import tool
from tests.integration.test_browser_pages import Site, settings  # noqa: F401 - settings: the local Chromium's

CHROMIUM = shutil.which("chromium") or ""

pytestmark = pytest.mark.skipif(not CHROMIUM and not REQUIRE_SERVICES,
                                reason="Chromium is not installed (apt-get install chromium)")

#: a page that tries everything a rendered page is refused, then writes what happened into #result
GREEDY = """<html><head><style>
@font-face { font-family: shop; src: url('/font.woff2') format('woff2'); }
body { font-family: shop, sans-serif; }
</style></head><body><p id="result">pending</p><img src="/price.png"><audio src="/jingle.mp3" autoplay></audio>
<video src="/ad.mp4" autoplay muted></video>
<a id="dl" href="/file.bin" download>file</a><script>
const seen = [];
const done = (what) => { seen.push(what); };
const popup = window.open('/popup', '_blank');
done(popup ? 'popup:opened' : 'popup:refused');
document.getElementById('dl').click();
const sw = navigator.serviceWorker ? navigator.serviceWorker.register('/sw.js').then(
  () => done('worker:registered'), () => done('worker:refused')) : Promise.resolve(done('worker:refused'));
const geo = new Promise((resolve) => navigator.geolocation.getCurrentPosition(
  () => { done('location:granted'); resolve(); }, () => { done('location:denied'); resolve(); }, {timeout: 2000}));
const notify = (window.Notification ? Notification.requestPermission() : Promise.resolve('denied')).then(
  (state) => done('notifications:' + (state === 'granted' ? 'granted' : 'refused')));
Promise.all([sw, geo, notify]).then(() => {
  const result = document.getElementById('result');
  result.textContent = 'Outcome: ' + seen.sort().join(' ');
  result.classList.add('done');
});
</script></body></html>"""
#: a 1x1 PNG
PIXEL = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                      "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")


@pytest.fixture()
def site():
    server = Site()
    server.put("/price.png", PIXEL, "image/png")
    server.put("/sw.js", b"self.addEventListener('fetch', () => {});", "text/javascript")
    for path in ("/popup", "/file.bin", "/font.woff2", "/jingle.mp3", "/ad.mp4"):
        server.put(path, b"x" * 2048, "application/octet-stream")
    yield server
    server.stop()


def test_a_rendered_page_is_refused_popups_downloads_workers_permissions_fonts_and_media(client, owner, site):
    answer = tool(client, owner[1], "monitor_create", {
        "description": "the outcome line changes", "interval": "5m", "on_match": "Tell the user.",
        "source": {"type": "page", "url": site.set("/shop", GREEDY), "selector": "#result", "render": "browser",
                   "wait_for": "#result.done"},
        "check": {"type": "change"}}).json()
    assert answer["ok"], answer
    outcome = answer["result"]["baseline"]
    # window.open gets no window, a service worker's registration never fetches its script (Playwright's block
    # answers it), and permissions are denied: headless Chromium asks no one and grants nothing
    assert "popup:refused" in outcome and "location:denied" in outcome and "notifications:refused" in outcome, outcome
    assert "/popup" not in site.asked and "/sw.js" not in site.asked, site.asked
    assert "/file.bin" not in site.asked, "the download link's click was not cancelled"
    # fonts and media are refused by name before they are fetched; the image is fetched (the screenshot shows it)
    assert not {"/font.woff2", "/jingle.mp3", "/ad.mp4"} & set(site.asked), site.asked
    assert site.asked.get("/price.png") == 1 and site.asked["/shop"] == 1, site.asked


def test_a_page_at_a_refused_address_is_refused_in_the_guards_words(site):
    """Behind the guarded proxy, the proxy's 403 for a loopback page read as "The page answered 403"; the render
    refuses the page's own address first, with the sentence a server-read page gets."""
    from adapters.browser import Browser, BrowserConfig
    from adapters.egress_proxy import start_guarded_proxy
    from adapters.settings import Settings
    from engine.errors import BlockedURL

    browser = Browser(BrowserConfig(executable=CHROMIUM, timeout=15), lambda: start_guarded_proxy(Settings()))
    try:
        with browser.session() as session, pytest.raises(BlockedURL) as refused:
            session.render(site.set("/shop", GREEDY), "#result", None)
    finally:
        browser.close()
    assert "127.0.0.1, a loopback address" in str(refused.value), refused.value
    assert site.asked == {}, "the page was fetched"
