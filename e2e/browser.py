"""What the browser tests share: signing in, opening a conversation, and proving a page was not reloaded."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

LIVE = 15_000


def mark_event_stream_open(page: Page) -> None:
    """Every document of this page records when htmx's SSE extension has its EventSource open."""
    page.add_init_script("document.addEventListener('htmx:sseOpen', () => { window.__sseOpen = true; });")


def open_conversation(page: Page, stack, name: str) -> str:
    """Sign in, open the conversation from the sidebar; returns its page id."""
    log_in(page, stack)
    expect(page).to_have_url(f"{stack.base}/settings/monitors")
    link = page.locator("aside.sidebar li a", has_text=re.compile(rf"^\s*{re.escape(name)}\s*$"))
    href = link.get_attribute("href")
    assert re.fullmatch(r"/conversations/\d+", href), href
    link.click()
    expect(page).to_have_url(f"{stack.base}{href}")
    expect(page.locator("h1")).to_have_text(name)
    return href.rsplit("/", 1)[1]


def log_in(page: Page, stack, password: str | None = None) -> None:
    page.goto(f"{stack.base}/login")
    page.locator('input[name="email"]').fill(stack.email)
    page.locator('input[name="password"]').fill(password or stack.password)
    page.get_by_role("button", name="Sign in").click()


def watch_for_reloads(page: Page) -> list[str]:
    """Marks the loaded document and records every later document request; both show a reload."""
    documents: list[str] = []
    page.on("request", lambda request: documents.append(request.url)
            if request.resource_type == "document" and request.frame == page.main_frame else None)
    page.evaluate("window.__marker = 1")
    return documents


def assert_not_reloaded(page: Page, documents: list[str]) -> None:
    assert page.evaluate("window.__marker") == 1, "the page was reloaded"
    assert documents == [], f"the page navigated: {documents}"


#: the widths the pictures are taken at: a phone and a desktop
WIDTHS = (375, 1280)


def shoot(page: Page, folder, name: str, end_width: int = 1280, no_sideways: bool = False) -> None:
    """Full-page screenshots NAME-375.png and NAME-1280.png (with `no_sideways`, the page must not scroll
    sideways at either width). The viewport is left at `end_width`."""
    height = page.viewport_size["height"] if page.viewport_size else 900
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": height})
        if no_sideways:
            assert page.evaluate("document.documentElement.scrollWidth") <= width, f"{name} scrolls sideways at {width}"
        page.screenshot(path=str(folder / f"{name}-{width}.png"), full_page=True)
    page.set_viewport_size({"width": end_width, "height": height})


def console_errors(page: Page, responses: bool = False) -> list[str]:
    """Every console error and uncaught exception of the page as they come (a refused inline script or style is
    one; nothing is excused, the favicon included), and with `responses` every answer of 400 or more."""
    seen: list[str] = []
    page.on("console", lambda message: seen.append(f"{message.text} at {message.location.get('url')}")
            if message.type == "error" else None)
    page.on("pageerror", lambda error: seen.append(str(error)))
    if responses:
        page.on("response", lambda response: seen.append(f"{response.status} {response.url}")
                if response.status >= 400 else None)
    return seen
