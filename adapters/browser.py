"""Pages rendered in Chromium through Playwright: the transport of a page source with `render: "browser"` (issue 31).

Where the browser runs: a browser service over CDP (BROWSER_CDP_URL) in production, or a local Chromium
(BROWSER_EXECUTABLE, or `chromium` on PATH) launched once per process and reused. Playwright's sync API binds its
objects to the thread that made them, and a worker has many threads, so one thread per process runs an asyncio
loop with the async API, and worker threads hand it their renders and wait (`Browser.session()`).

Each check gets a context of its own, closed after it (RenderSession): downloads, popups, permissions and service
workers are refused, video, audio and fonts are not fetched, and every request goes through the guarded proxy when
one is given (the SSRF guard with the address pinned), else is checked by the route handler against the same
rules. At most BROWSER_CONCURRENCY pages are open per process; a page that never settles, or whose renderer
crashes, is an unreachable check (FetchError), never a lost worker.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from engine.addresses import Own, resolve_guarded
from engine.errors import BlockedURL, FetchError

log = logging.getLogger(__name__)

#: what a rendered page does not fetch: nothing a check reads (images are fetched: a price may be one)
REFUSED_TYPES = frozenset({"media", "font"})
#: the file names of fonts, video and audio, routed (and refused) behind the guarded proxy
REFUSED_NAMES = re.compile(r"\.(?:woff2?|ttf|otf|eot|mp4|webm|ogv|mov|m4v|mp3|m4a|ogg|oga|wav|flac|aac)(?:[?#]|$)",
                           re.IGNORECASE)
#: a local Chromium's flags (STACK-NOTES: Debian's chromium with Playwright); the heap cap bounds one page's memory
LAUNCH_ARGS = ("--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--no-first-run", "--disable-quic", "--disable-dev-shm-usage", "--js-flags=--max-old-space-size=512")
VIEWPORT = {"width": 1280, "height": 800}
#: after the page settles, how long a selector that matches nothing yet is waited for (content a script adds late)
SELECTOR_GRACE_SECONDS = 5.0
#: after a navigation fails, how long a crash of its renderer is waited for, to tell the two apart
CRASH_GRACE_SECONDS = 0.5
#: JPEG qualities a screenshot is tried at, best first, until one fits the size cap
SCREENSHOT_QUALITIES = (70, 45, 25)
#: the largest side of an element's picture (CSS px): a larger element is pictured in part, around its centre
SCREENSHOT_MAX_SIDE = 2400
#: the page shown around a selected element's text, px, and the least a picture of it shows (width, height)
SCREENSHOT_PAD, SCREENSHOT_MIN = 16, (320, 96)

#: the text of the outermost matches of a selector (the body without one), cut at a number of characters
_READ_TEXT = """([selector, limit]) => {
  const root = document.body || document.documentElement;
  if (!root) return [];
  const found = selector ? Array.from(document.querySelectorAll(selector)) : [root];
  const chosen = new Set(found);
  const outer = found.filter(el => { for (let p = el.parentElement; p; p = p.parentElement)
                                       if (chosen.has(p)) return false; return true; });
  const parts = []; let left = limit;
  for (const el of outer) {
    if (left <= 0) break;
    let text = (el.innerText !== undefined ? el.innerText : el.textContent) || "";
    if (text.length > left) text = text.slice(0, left);
    left -= text.length; parts.push(text);
  }
  return parts;
}"""


@dataclass(frozen=True)
class BrowserConfig:
    """Where the browser is and what a render may do; built from the settings (browser_config)."""
    cdp_url: str = ""
    executable: str = ""
    concurrency: int = 2
    timeout: float = 30.0
    #: characters of text read from the page at most (FETCH_MAX_BYTES; the text is cut to bytes after)
    max_chars: int = 1024 * 1024
    screenshot_max_bytes: int = 200 * 1024
    allow_loopback: bool = False
    own: Own | None = None
    #: the guarded forward proxy every request of a page goes through, or "" (then the route handler checks each)
    proxy_url: str = ""

    @property
    def usable(self) -> bool:
        return bool(self.cdp_url or self.executable)


def local_executable(configured: str, embedded: bool) -> str:
    """The local Chromium to launch: BROWSER_EXECUTABLE, or in embedded mode Debian's `chromium` on PATH, or ""."""
    if configured:
        return configured
    return (shutil.which("chromium") or shutil.which("chromium-browser") or "") if embedded else ""


class Browser:
    """One process's browser: started or connected on first use, started again after it died."""

    def __init__(self, config: BrowserConfig, start_proxy: Callable[[], object] | None = None):
        """`start_proxy`: starts the guarded proxy (adapters/egress_proxy.start_guarded_proxy) every page's
        requests go through, on first use; its `url` then stands for config.proxy_url."""
        self.config = config
        self._start_proxy = start_proxy
        self._proxy = None
        self._slots = threading.BoundedSemaphore(max(1, config.concurrency))
        self._start_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._playwright = None
        self._browser = None
        self._connecting: asyncio.Lock | None = None

    def session(self, timeout: float | None = None) -> RenderSession:
        """A page for one check, loaded within `timeout` seconds (default the config's); close() it after (a
        `with` block does)."""
        return RenderSession(self, timeout or self.config.timeout)

    def run(self, coroutine, timeout: float):
        """Run `coroutine` on the browser's loop and wait at most `timeout` seconds for it."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._started_loop())
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def close(self) -> None:
        """Close the browser (or the CDP connection) and stop the loop; a later session starts them again."""
        loop = self._loop
        if loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(15)
        except Exception as exc:  # noqa: BLE001 - closing what may be dead already
            log.info("closing the browser: %s", exc)
        loop.call_soon_threadsafe(loop.stop)
        self._loop = None

    def _started_loop(self) -> asyncio.AbstractEventLoop:
        with self._start_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="vigil-browser", daemon=True).start()
                self._loop, self._connecting = loop, None
            return self._loop

    async def connected(self):
        """The Playwright browser, launched or connected now if there is none or it went away."""
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._browser is not None and self._browser.is_connected():
                return self._browser
            if self._start_proxy is not None and self._proxy is None:
                self._proxy = await asyncio.get_running_loop().run_in_executor(None, self._start_proxy)
            if self._playwright is None:
                from playwright.async_api import async_playwright

                self._playwright = await async_playwright().start()
            config = self.config
            chromium = self._playwright.chromium
            if config.cdp_url:
                self._browser = await chromium.connect_over_cdp(config.cdp_url, timeout=config.timeout * 1000)
            else:
                self._browser = await chromium.launch(executable_path=config.executable, args=list(LAUNCH_ARGS),
                                                      timeout=config.timeout * 1000)
            return self._browser

    @property
    def proxy_url(self) -> str:
        return self._proxy.url if self._proxy is not None else self.config.proxy_url

    async def _shutdown(self) -> None:
        browser, playwright, proxy = self._browser, self._playwright, self._proxy
        self._browser = self._playwright = self._proxy = None
        if proxy is not None:
            proxy.close()
        if browser is not None:
            await browser.close()
        if playwright is not None:
            await playwright.stop()


class RenderSession:
    """One check's page: render() opens it and reads the text, screenshot() pictures what it read, close() ends
    the context. Holds one of the process's BROWSER_CONCURRENCY slots from render() to close()."""

    def __init__(self, browser: Browser, timeout: float):
        self._browser = browser
        self._timeout = timeout
        self._context = None
        self._page = None
        self._selector: str | None = None
        self._holds_slot = False

    def __enter__(self) -> RenderSession:
        return self

    def __exit__(self, *_) -> None:
        self.close()

    @property
    def used(self) -> bool:
        return self._page is not None

    def render(self, url: str, selector: str | None, wait_for: str | None) -> bytes:
        if not self._holds_slot:
            self._browser._slots.acquire()
            self._holds_slot = True
        self._selector = selector
        try:
            parts = self._browser.run(self._render(url, selector, wait_for), self._timeout + 5)
        except TimeoutError:
            raise _did_not_settle(url, self._timeout) from None
        except FetchError:
            raise
        except Exception as exc:  # noqa: BLE001 - Playwright's errors, the browser gone: the check is unreachable
            raise _failed(url, exc) from None
        return json.dumps(parts, ensure_ascii=False).encode("utf-8")

    def screenshot(self) -> bytes | None:
        """A JPEG of the selected element (or the viewport) within the size cap; None when there is no page or
        no picture fits."""
        if self._page is None:
            return None
        try:
            return self._browser.run(self._screenshot(), 20)
        except Exception as exc:  # noqa: BLE001 - a picture is a nicety: the check stands without it
            log.info("no screenshot: %s", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            return None

    def close(self) -> None:
        context, self._context, self._page = self._context, None, None
        try:
            if context is not None:
                self._browser.run(_close_quietly(context), 15)
        except Exception as exc:  # noqa: BLE001 - a context of a dead browser is gone with it
            log.info("closing a browser context: %s", exc)
        finally:
            if self._holds_slot:
                self._holds_slot = False
                self._browser._slots.release()

    async def _render(self, url: str, selector: str | None, wait_for: str | None) -> list[str]:
        config = self._browser.config
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        browser = await self._browser.connected()
        proxy_url = self._browser.proxy_url
        guard = _Guard(config, guarded_by_proxy=bool(proxy_url))
        # the page's own address, refused in the guard's words: behind the proxy it would read as the page's 403
        refused = await guard.refused(url)
        if refused is not None:
            raise refused
        options = {"service_workers": "block", "accept_downloads": False, "viewport": VIEWPORT,
                   "java_script_enabled": True, "ignore_https_errors": False}
        if proxy_url:  # Playwright adds "<-loopback>" itself, so loopback requests go through the proxy too
            options["proxy"] = {"server": proxy_url}
        self._context = context = await browser.new_context(**options)
        context.set_default_timeout(self._timeout * 1000)
        await context.add_init_script(_NO_POPUPS)
        # behind the guarded proxy only fonts and media need refusing: by their names, so other requests never
        # wait on this process (each routed request is a round trip to it); without the proxy, every request
        await context.route(REFUSED_NAMES if proxy_url else "**/*", guard.handle)
        page = await context.new_page()
        # any other page is a popup (window.open, target=_blank)
        context.on("page", lambda other: other is page or asyncio.ensure_future(_close_popup(other)))
        self._page = page
        crashed = loop.create_future()
        page.on("crash", lambda _: crashed.done() or crashed.set_result(True))
        try:
            response = await _racing(crashed, self._load(page, url, wait_for, deadline))
        except asyncio.TimeoutError:
            raise _did_not_settle(url, self._timeout) from None
        except _Crashed:
            raise
        except Exception:  # a navigation aborted by a dying renderer: say so when its crash is reported just after
            await asyncio.wait({crashed}, timeout=CRASH_GRACE_SECONDS)
            if crashed.done():
                raise _Crashed() from None
            raise
        _check_status(response)
        # read first, and wait for the selector only when it matches nothing yet: asking Playwright whether it
        # matches (query_selector) costs a round trip and its selector engine in the page, ~4% of a quiet check
        parts = await _racing(crashed, page.evaluate(_READ_TEXT, [selector, config.max_chars]))
        if parts or not selector:
            return parts
        grace = min(SELECTOR_GRACE_SECONDS, deadline - loop.time())
        if grace <= 0:
            return parts
        try:
            await _racing(crashed, page.wait_for_selector(selector, state="attached", timeout=grace * 1000))
        except Exception:  # noqa: BLE001 - still nothing: the check says the selector matches nothing
            if crashed.done():
                raise
            return parts
        return await _racing(crashed, page.evaluate(_READ_TEXT, [selector, config.max_chars]))

    async def _load(self, page, url: str, wait_for: str | None, deadline: float):
        """Navigate, then wait for the network to settle, or for `wait_for` when given; a Playwright timeout past
        the deadline is asyncio.TimeoutError."""
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        loop = asyncio.get_running_loop()
        left = lambda: max(deadline - loop.time(), 0.001) * 1000  # noqa: E731
        try:
            if wait_for:
                response = await page.goto(url, wait_until="domcontentloaded", timeout=left())
                await page.wait_for_selector(wait_for, state="visible", timeout=left())
            else:
                response = await page.goto(url, wait_until="networkidle", timeout=left())
        except PlaywrightTimeout:
            raise asyncio.TimeoutError from None
        return response

    async def _screenshot(self) -> bytes | None:
        page, cap = self._page, self._browser.config.screenshot_max_bytes
        clip = await page.evaluate(_AROUND_TEXT, [self._selector, SCREENSHOT_PAD, SCREENSHOT_MIN, SCREENSHOT_MAX_SIDE]) \
            if self._selector else None
        for quality in SCREENSHOT_QUALITIES:
            options = {"clip": clip, "full_page": True} if clip else {}
            picture = await page.screenshot(type="jpeg", quality=quality, timeout=10_000, animations="disabled",
                                            **options)
            if len(picture) <= cap:
                return picture
        return None


#: the picture of a selected element: its text's own box (a block element is as wide as the page, its text often a
#: few words at its left), with some of the page around it, at least SCREENSHOT_MIN, centred on it and kept
#: within the page; null when nothing matches or it shows nothing (then the viewport is pictured)
_AROUND_TEXT = """([selector, pad, [minWidth, minHeight], maxSide]) => {
  const element = document.querySelector(selector);
  if (!element) return null;
  const range = document.createRange();
  range.selectNodeContents(element);
  let box = range.getBoundingClientRect();
  if (!box.width || !box.height) box = element.getBoundingClientRect();
  if (!box.width || !box.height) return null;
  const pageWidth = document.documentElement.scrollWidth, pageHeight = document.documentElement.scrollHeight;
  const width = Math.min(Math.max(box.width + 2 * pad, minWidth), maxSide, pageWidth);
  const height = Math.min(Math.max(box.height + 2 * pad, minHeight), maxSide, pageHeight);
  const left = box.left + window.scrollX + box.width / 2 - width / 2;
  const top = box.top + window.scrollY + box.height / 2 - height / 2;
  return {x: Math.max(0, Math.min(left, pageWidth - width)), y: Math.max(0, Math.min(top, pageHeight - height)),
          width, height};
}"""


class _Guard:
    """A context's route handler: refuses the types a check never needs and, without a guarded proxy, any request
    to an address the SSRF guard refuses (resolved here; the proxy also pins the address it checked)."""

    def __init__(self, config: BrowserConfig, guarded_by_proxy: bool):
        self._config = config
        self._by_proxy = guarded_by_proxy
        self._allowed: dict[tuple[str, int], FetchError | None] = {}

    async def handle(self, route) -> None:
        request = route.request
        if request.resource_type in REFUSED_TYPES or self._by_proxy:
            await route.abort("blockedbyclient")
            return
        if not self._by_proxy and await self.refused(request.url):
            await route.abort("addressunreachable")
            return
        await route.continue_()

    async def refused(self, url: str) -> FetchError | None:
        """Why `url` may not be fetched, as the SSRF guard words it (BlockedURL; a name that does not resolve is
        unreachable), or None; remembered per host and port."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            return None if parts.scheme in ("data", "blob") else BlockedURL(f"The scheme {parts.scheme} is refused.")
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        key = (host, port)
        if key not in self._allowed:
            config, reason = self._config, None
            try:
                await asyncio.get_running_loop().run_in_executor(
                    None, resolve_guarded, host, port, config.allow_loopback, config.own)
            except FetchError as exc:
                reason = exc
            self._allowed[key] = reason
        return self._allowed[key]


async def _racing(crashed: asyncio.Future, work):
    """`work`, unless the page's renderer crashes first (Playwright may otherwise wait out its whole timeout)."""
    task = asyncio.ensure_future(work)
    done, _ = await asyncio.wait({task, crashed}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        return task.result()
    task.cancel()
    raise _Crashed()


class _Crashed(Exception):
    pass


#: run before any script of the page's own: window.open gets no window, and a click on a link that would open
#: another window or start a download is cancelled, so neither is fetched. What gets past this (a page that sets
#: location to a file served as an attachment) is no download either: the context accepts none, and a new page
#: is closed as it opens (_close_popup); its request went through the guarded proxy like any other.
_NO_POPUPS = """
window.open = () => null;
addEventListener('click', (event) => {
  const link = event.target instanceof Element ? event.target.closest('a[href], area[href]') : null;
  if (link && (link.hasAttribute('download') || (link.target && link.target.toLowerCase() !== '_self'))) {
    event.preventDefault();
  }
}, true);
"""


async def _close_popup(page) -> None:
    try:
        await page.close()
    except Exception:  # noqa: BLE001 - gone already
        pass


async def _close_quietly(context) -> None:
    try:
        await context.close()
    except Exception:  # noqa: BLE001 - the browser went away with it
        pass


def _check_status(response) -> None:
    """The document's status as the fetcher reads it: 429 and 5xx unreachable, other 4xx an error."""
    if response is None:
        return
    code = response.status
    if code == 429 or code >= 500:
        raise FetchError(f"The server answered {code}.", unreachable=True)
    if code >= 400:
        raise FetchError(f"The page answered {code}.")


def _did_not_settle(url: str, seconds: float) -> FetchError:
    host = urlsplit(url).netloc
    return FetchError(f"The page at {host} did not finish loading in the browser within {seconds:g} seconds.",
                      unreachable=True)


def _failed(url: str, exc: BaseException) -> FetchError:
    host = urlsplit(url).netloc
    if isinstance(exc, _Crashed) or "crash" in str(exc).lower():
        return FetchError(f"The browser's renderer crashed while showing the page at {host}.", unreachable=True)
    first = (str(exc).splitlines() or [type(exc).__name__])[0]
    if "net::ERR_" in first:
        code = first[first.index("net::ERR_"):].split()[0]
        if code in ("net::ERR_BLOCKED_BY_CLIENT", "net::ERR_ADDRESS_UNREACHABLE"):
            return BlockedURL(f"The page at {host} may not be opened: its address is one Vigil does not fetch.")
        return FetchError(f"The browser could not load the page at {host} ({code}).", unreachable=True)
    return FetchError(f"The browser could not show the page at {host} ({first[:160]}).", unreachable=True)


def process_browser(config: BrowserConfig, start_proxy: Callable[[], object] | None = None) -> Browser | None:
    """This process's Browser for `config` (one per process and config), or None where none is set up."""
    if not config.usable:
        return None
    with _lock:
        key = (config, os.getpid())
        if key not in _browsers:
            _browsers[key] = Browser(config, start_proxy)
        return _browsers[key]


_lock = threading.Lock()
_browsers: dict[tuple, Browser] = {}


def browser_config(settings) -> BrowserConfig:
    """The settings' browser: BROWSER_CDP_URL, else BROWSER_EXECUTABLE or (embedded) `chromium` on PATH."""
    from engine.addresses import Own

    own = Own.of((settings.PUBLIC_API_BASE_URL, settings.PUBLIC_APP_URL, settings.API_URL), settings.listen_addresses)
    return BrowserConfig(cdp_url=settings.BROWSER_CDP_URL,
                         executable="" if settings.BROWSER_CDP_URL else local_executable(settings.BROWSER_EXECUTABLE,
                                                                                         settings.embedded),
                         concurrency=settings.BROWSER_CONCURRENCY, timeout=settings.FETCH_TIMEOUT_SECONDS,
                         max_chars=settings.FETCH_MAX_BYTES, screenshot_max_bytes=settings.BROWSER_SCREENSHOT_MAX_BYTES,
                         allow_loopback=settings.FETCH_ALLOW_LOOPBACK, own=own)
