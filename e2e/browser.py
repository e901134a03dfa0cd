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
