"""Checks of pages rendered in a browser (issue 31): one fresh browser page per check, through the one pipeline,
and a picture of what it showed on a baseline or a fire."""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import replace
from datetime import datetime

from engine.checks.base import CheckSpec
from engine.pipeline import BASELINE, ERROR, FIRED, Outcome, Prior, run_check
from adapters.browser import Browser, BrowserConfig, browser_config, process_browser
from adapters.settings import Settings
from engine.sources import SourceIO, SourcePolicy
from engine.sources.base import SourceSpec
from models import utcnow
from models.screenshots import keep_screenshot
from tasks.runtime import Runtime, current

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=8)
def _config(settings: Settings) -> BrowserConfig:
    return browser_config(settings)  # looks for chromium on PATH: once per settings, not per check


def can_render(settings: Settings) -> bool:
    """Whether this process's settings give it a browser (BROWSER_CDP_URL, or a local Chromium)."""
    return _config(settings).usable


def source_policy(runtime: Runtime) -> SourcePolicy:
    """The runtime's source policy, saying whether pages may be rendered (a create refuses render otherwise)."""
    return replace(runtime.source_policy, browser=can_render(runtime.settings))


def browser(runtime: Runtime) -> Browser | None:
    """This process's browser (adapters/browser.py), started on first use, every page's requests through the
    guarded proxy; None without one."""
    return process_browser(_config(runtime.settings), _guarded_proxy_starter(runtime.settings))


def render_io(runtime: Runtime, timeout: float | None = None) -> SourceIO:
    """Sources for one rendered read: this thread's fetcher and a fresh browser page (renderer), which the caller
    closes (renderer.close()) once done with it, its screenshot taken or not."""
    found = browser(runtime)
    return SourceIO(runtime.fetcher(), source_policy(runtime), found.session(timeout) if found else None)


def _guarded_proxy_starter(settings: Settings):
    """What starts the guarded forward proxy a browser's requests go through (adapters/egress_proxy.py)."""
    from adapters.egress_proxy import start_guarded_proxy

    return lambda: start_guarded_proxy(settings)


def render_check(runtime: Runtime, source: SourceSpec, check: CheckSpec, prior: Prior, now: datetime,
                 placeholders: dict | None) -> Outcome:
    """run_check on a page of its own (closed after); a baseline or a match carries its screenshot."""
    return rendered(runtime, render_io(runtime), lambda io: run_check(
        io, source, check, prior, runtime.settings.FETCH_MAX_TEXT_BYTES, now=now, placeholders=placeholders))


def rendered(runtime: Runtime, io: SourceIO, check) -> Outcome:
    """`check(io)`'s outcome, with the page's screenshot when it is a baseline or a match (and screenshots are
    kept); the browser page is closed after, whatever happened."""
    try:
        outcome = check(io)
        if outcome.kind in (BASELINE, FIRED) and io.renderer is not None \
                and runtime.settings.MONITOR_SCREENSHOTS_KEPT > 0:
            outcome = replace(outcome, picture=io.renderer.screenshot())
        return outcome
    finally:
        if io.renderer is not None:
            io.renderer.close()


def keep_picture(runtime: Runtime, monitor_id: str, outcome: Outcome) -> None:
    """Store a recorded baseline's or fire's screenshot (a judge that said no match leaves a change: none)."""
    if outcome.kind not in (BASELINE, FIRED) or not outcome.picture:
        return
    try:
        keep_screenshot(monitor_id, outcome.kind, outcome.picture, utcnow(), runtime.settings.MONITOR_SCREENSHOTS_KEPT)
    except Exception:  # noqa: BLE001 - the check is recorded; a picture that could not be stored is only logged
        log.exception("could not store the screenshot of monitor %s", monitor_id)


#: what a create or dry run says when a page needed the browser to show what its selector picks
NEEDED_BROWSER = ("This page builds its content with JavaScript: the selector matched nothing in the HTML its server "
                  "sends, so I used render: \"browser\" (the page rendered in Chromium), and checks will render it "
                  "the same way.")


def first_reading(prepared, read, checked_at: datetime, picture: bool = True):
    """A create's (or dry run's) first read, `read(prepared, io, max_text_bytes, now)`: a page with render
    "browser" on a browser page of its own (with its screenshot when `picture`), and a plain page whose selector
    matches nothing in the server's HTML read again rendered, when a browser is set up. Returns (outcome,
    prepared), the prepared one switched to render "browser", with a note, when that is what found it."""
    runtime = current()
    settings = runtime.settings
    max_text = settings.FETCH_MAX_TEXT_BYTES
    source = prepared.spec.source
    if source.type == "page" and source.render:
        return _rendered_read(runtime, prepared, read, checked_at, picture, settings.CREATE_FETCH_TIMEOUT_SECONDS), \
            prepared
    started = time.monotonic()
    outcome = read(prepared, runtime.create_io(), max_text, checked_at)
    if not (source.type == "page" and source.selector and outcome.kind == ERROR and "matches nothing" in outcome.error
            and can_render(settings)):
        return outcome, prepared
    left = settings.CREATE_FETCH_TIMEOUT_SECONDS - (time.monotonic() - started)
    if left < 1:
        return outcome, prepared
    as_rendered = replace(prepared, spec=replace(prepared.spec, source=replace(source, render="browser")))
    again = _rendered_read(runtime, as_rendered, read, checked_at, picture, left)
    if again.kind == ERROR:
        return outcome, prepared  # the plain page's error stands: rendering did not find it either
    return again, replace(as_rendered, notes=[*prepared.notes, NEEDED_BROWSER])


def _rendered_read(runtime: Runtime, prepared, read, checked_at: datetime, picture: bool, timeout: float) -> Outcome:
    io = render_io(runtime, timeout)
    if not picture:
        try:
            return read(prepared, io, runtime.settings.FETCH_MAX_TEXT_BYTES, checked_at)
        finally:
            if io.renderer is not None:
                io.renderer.close()
    return rendered(runtime, io, lambda page_io: read(prepared, page_io, runtime.settings.FETCH_MAX_TEXT_BYTES,
                                                      checked_at))
