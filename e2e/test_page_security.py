"""The owner's pages under their Content-Security-Policy in a real Chromium: no inline script or style is
refused on any page (so every control still works), a confirm still guards Revoke, and a page on another origin
can't frame a signed-in page to catch a click."""

from __future__ import annotations

import re

import pytest
import requests
from playwright.sync_api import Page, expect

from e2e.api import created_monitor
from e2e.browser import log_in

pytestmark = pytest.mark.e2e

OWNER_PAGES = ("/settings/monitors", "/settings/tokens", "/settings/devices", "/settings/tools",
               "/settings/connections", "/settings/wake-endpoints", "/settings/models")


def refusals(page: Page) -> list[str]:
    """Console messages where Chromium refused something under the page's policy, as they come."""
    seen: list[str] = []
    page.on("console", lambda message: seen.append(message.text)
            if "Content Security Policy" in message.text else None)
    return seen


def test_owner_pages_run_under_the_policy_with_nothing_refused(page: Page, vigil_stack):
    stack = vigil_stack
    monitor_id = created_monitor(stack, "e2e-csp", {"description": "a deploy (csp)",
                                                    "source": {"type": "webhook", "signature": "none"}})
    refused = refusals(page)
    log_in(page, stack)
    expect(page).to_have_url(f"{stack.base}/settings/monitors")
    for path in OWNER_PAGES + (f"/monitors/{monitor_id}",):
        answer = page.goto(f"{stack.base}{path}")
        assert answer.status == 200, path
        policy = answer.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
        assert answer.headers["x-content-type-options"] == "nosniff"
    page.goto(f"{stack.base}/settings/monitors")
    page.locator("aside.sidebar li a", has_text="e2e-csp").click()
    expect(page.locator(".trigger-card, [id^=trigger]").first).to_be_visible()
    assert refused == [], refused


def test_revoke_still_asks_first_and_the_new_token_is_selected_on_focus(page: Page, vigil_stack):
    stack = vigil_stack
    refused = refusals(page)
    log_in(page, stack)
    page.goto(f"{stack.base}/settings/tokens")
    page.locator('input[name="label"]').fill("csp check")
    page.get_by_role("button", name="Create a token").click()
    field = page.locator("#new-token-value")
    field.focus()
    assert page.evaluate("window.getSelection().toString() || "
                         "document.activeElement.selectionEnd - document.activeElement.selectionStart") not in (0, "")
    row = page.locator("tr", has_text="csp check")
    page.once("dialog", lambda dialog: dialog.dismiss())
    row.get_by_role("button", name="Revoke").click()
    expect(row).to_be_visible()  # dismissed: nothing revoked
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Revoke").click()
    expect(page.locator("tr", has_text="csp check")).to_have_count(0)
    assert refused == [], refused


def test_another_origin_cannot_frame_a_signed_in_page(page: Page, vigil_stack, pages):
    stack = vigil_stack
    log_in(page, stack)
    expect(page).to_have_url(f"{stack.base}/settings/monitors")
    framer = pages.set("/framer", f'<html><body><iframe id="f" src="{stack.base}/settings/tokens" width="800" '
                                  'height="600"></iframe></body></html>')
    page.goto(framer)
    page.wait_for_timeout(1500)  # the frame's load is refused, not slow: give it its chance to show anything
    framed = [frame for frame in page.frames if frame != page.main_frame]
    assert framed, "the iframe element is there"
    for frame in framed:
        try:
            content = frame.content()
        except Exception:  # noqa: BLE001 — a frame Chromium blocked may refuse to be read at all
            content = ""
        assert "Create a token" not in content and "Log out" not in content
    headers = requests.get(f"{stack.base}/login", timeout=10).headers
    assert headers["x-frame-options"] == "DENY" and re.search(r"frame-ancestors 'none'",
                                                               headers["content-security-policy"])
