"""Settings → Monitors and the monitor page at a glance (issue 30), in a real Chromium against a real Vigil: status
badges, relative times with the UTC time on hover (refreshed by vigil.js), filters, and Check now updating the
monitor page live; no console errors."""

from __future__ import annotations

import re

import pytest
import requests
from playwright.sync_api import Page, expect

from e2e.api import api_monitor, created_monitor, wait_for
from e2e.browser import (LIVE, assert_not_reloaded, console_errors, log_in, mark_event_stream_open, shoot,
                         watch_for_reloads)

pytestmark = pytest.mark.e2e

PRICE = "<html><body><p id='price'>Price: ${price}</p></body></html>"
LONG = ("ACME Corp's quarterly investor-relations page, the price of its B shares on the secondary market, which "
        "should fall below ninety before the board meets on Thursday (a deliberately long description)")




def price_monitor(stack, pages, path: str, price: str, description: str, conversation: str = "e2e-glance",
                  **check) -> str:
    url = pages.set(path, PRICE.replace("{price}", price))
    return created_monitor(stack, conversation, {
        "description": description, "source": {"type": "page", "url": url, "selector": "#price"},
        "check": {"type": "threshold", "op": "<", "value": 90, **check}, "on_match": "Tell the user.",
        "interval": "1h", "max_wakes": 3})


def act(stack, monitor_id: str, action: str) -> None:
    requests.post(f"{stack.base}/api/monitors/{monitor_id}/{action}", headers=stack.auth, timeout=10).raise_for_status()


def test_monitor_list_shows_badges_relative_times_and_filters(page: Page, vigil_stack, pages, screenshots):
    stack = vigil_stack
    active = price_monitor(stack, pages, "/glance-active", "95.10", LONG)
    holding = price_monitor(stack, pages, "/glance-holding", "95.10", "ACME holds below 90 for a while",
                            conversation="e2e-glance-2", **{"for": 50})
    paused = price_monitor(stack, pages, "/glance-paused", "95.10", "Paused: the other price")
    cancelled = price_monitor(stack, pages, "/glance-cancelled", "95.10", "Cancelled: an old watch")
    act(stack, paused, "pause")
    act(stack, cancelled, "cancel")
    pages.set("/glance-holding", PRICE.replace("{price}", "80.00"))
    assert requests.post(f"{stack.base}/api/monitors/{holding}/check", headers=stack.auth,
                         timeout=10).status_code == 202
    wait_for("the holding monitor to hold", lambda: api_monitor(stack, holding)["check_count"] >= 2)

    errors = console_errors(page)
    log_in(page, stack)
    expect(page).to_have_url(f"{stack.base}/settings/monitors")
    badges = {monitor_id: page.locator(f"tr#monitor-{monitor_id} .badge-status")
              for monitor_id in (active, holding, paused, cancelled)}
    for monitor_id, word in ((active, "active"), (holding, "holding"), (paused, "paused"), (cancelled, "cancelled")):
        expect(badges[monitor_id]).to_have_text(word)
        expect(badges[monitor_id]).to_have_class(re.compile(rf"\bbadge-{word}\b"))
    row = page.locator(f"tr#monitor-{active}")
    checked = row.locator("td.last-checked time").first
    expect(row.locator("td.last-checked")).to_have_text(re.compile(r"^checked (just now|\d+ min ago)\s*next in (\d+ min|1 h)$"))
    expect(checked).to_have_attribute("title", re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$"))
    expect(row.locator(".latest .reading")).to_have_text("95.10")
    shoot(page, screenshots, "monitors-glance", no_sideways=True)

    # vigil.js rewrites the words from the datetime every 30 s
    page.evaluate("""id => { const t = document.querySelector(`tr#monitor-${id} td.last-checked time`);
                             t.setAttribute('datetime', new Date(Date.now() - 5 * 60000).toISOString()); }""", active)
    expect(checked).to_have_text("5 min ago", timeout=40_000)

    # filters are GET parameters; a select applies at once
    page.locator("form.monitor-filters select[name=status]").select_option("paused")
    expect(page).to_have_url(re.compile(r"status=paused"))
    expect(page.locator("table.monitors tbody tr.monitor")).to_have_count(1)
    expect(page.locator(f"tr#monitor-{paused}")).to_be_visible()
    page.locator("form.monitor-filters input[name=q]").fill("acme")
    page.locator("form.monitor-filters select[name=status]").select_option("")
    expect(page.locator(f"tr#monitor-{active}")).to_be_visible()
    expect(page.locator(f"tr#monitor-{paused}")).to_have_count(0)
    assert errors == [], errors


def test_check_now_on_the_monitor_page_fires_and_the_page_updates_live(page: Page, vigil_stack, pages):
    stack = vigil_stack
    monitor_id = price_monitor(stack, pages, "/glance-check-now", "95.10", "ACME below 90 (e2e check now)")
    errors = console_errors(page)
    mark_event_stream_open(page)
    log_in(page, stack)
    page.goto(f"{stack.base}/monitors/{monitor_id}")
    page.wait_for_function("() => window.__sseOpen === true", timeout=LIVE)
    section = page.locator(f"section#evidence-{monitor_id}")
    expect(section.locator("dd.baseline")).to_contain_text("95.10")
    expect(section.locator("dd.next-check time")).to_have_text(re.compile(r"^in (\d+ min|1 h)$"))
    expect(section.locator("a.watched-url")).to_have_attribute("rel", "noopener noreferrer")
    documents = watch_for_reloads(page)

    pages.set("/glance-check-now", PRICE.replace("{price}", "85.50"))
    section.get_by_role("button", name="Check now").click()
    expect(section.locator("li.event.fired")).to_have_count(1, timeout=LIVE)
    expect(section.locator("dd.latest-reading strong")).to_have_text("85.50")
    expect(section.locator("dd.baseline")).to_contain_text("95.10")
    expect(section.locator("li.event.wake a")).to_have_text("wake #1")
    assert api_monitor(stack, monitor_id)["fire_count"] == 1
    assert_not_reloaded(page, documents)
    assert errors == [], errors
