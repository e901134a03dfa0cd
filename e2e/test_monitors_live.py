"""The owner's pages against a real Vigil (web, worker, scheduler): live monitor rows, live wakes, login."""

from __future__ import annotations

import re
import time

import pytest
import requests
from playwright.sync_api import Page, expect

from e2e.api import api_monitor, created_monitor
from e2e.browser import LIVE, assert_not_reloaded, log_in, open_conversation, shoot, watch_for_reloads

pytestmark = pytest.mark.e2e

#: Bound for each expectation; checks run every second, so a live update normally lands within 1-2 s.


def create_monitor(stack, conversation_id: str, description: str, url: str, **arguments) -> str:
    return created_monitor(stack, conversation_id, {"description": description, "source": {"type": "page", "url": url},
                                                    "check": {"type": "change"}, "interval": "1s", **arguments})




def test_monitors_page_updates_live_and_pauses_resumes_cancels(page: Page, vigil_stack, pages, screenshots):
    stack = vigil_stack
    url = pages.set("/steady", "<h1>Status</h1><p>all quiet</p>")
    description = "the status page changes (e2e steady)"
    monitor_id = create_monitor(stack, "e2e-monitors", description, url)

    log_in(page, stack)
    expect(page).to_have_url(f"{stack.base}/settings/monitors")
    row = page.locator(f"tr#monitor-{monitor_id}")
    expect(row.locator("td.description a")).to_have_text(description)
    status = row.locator("td.status")
    expect(status).to_have_attribute("data-status", "active")
    last_checked = row.locator("td.last-checked")
    old_count = last_checked.get_attribute("data-check-count")
    documents = watch_for_reloads(page)

    # The page never changes, yet each quiet check reaches the row over SSE.
    # (its words stay "checked just now" at a 1 s interval: the count tells each check apart)
    expect(last_checked).not_to_have_attribute("data-check-count", old_count, timeout=LIVE)
    assert int(last_checked.get_attribute("data-check-count")) > int(old_count)
    expect(page.locator("li#conversation-" + _pk_of(page, "e2e-monitors")).locator(".watching")).to_be_visible()

    row.get_by_role("button", name="Pause").click()
    expect(status).to_have_attribute("data-status", "paused", timeout=LIVE)
    expect(row.get_by_role("button", name="Pause")).to_have_count(0)
    assert api_monitor(stack, monitor_id)["status"] == "paused"
    paused_count = api_monitor(stack, monitor_id)["check_count"]
    time.sleep(2.5)  # more than two intervals: a paused monitor is not checked
    assert api_monitor(stack, monitor_id)["check_count"] == paused_count
    shown_count = last_checked.get_attribute("data-check-count")

    row.get_by_role("button", name="Resume").click()
    expect(status).to_have_attribute("data-status", "active", timeout=LIVE)
    assert api_monitor(stack, monitor_id)["status"] == "active"
    expect(last_checked).not_to_have_attribute("data-check-count", shown_count, timeout=LIVE)
    shoot(page, screenshots, "monitors", end_width=375)

    # Cancel asks first: dismissing keeps the monitor, accepting ends it.
    page.once("dialog", lambda dialog: dialog.dismiss())
    row.get_by_role("button", name="Cancel").click()
    expect(status).to_have_attribute("data-status", "active")
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Cancel").click()
    expect(status).to_have_attribute("data-status", "cancelled", timeout=LIVE)
    expect(row.get_by_role("button")).to_have_text(["Delete"])  # an ended monitor can only be deleted
    assert api_monitor(stack, monitor_id)["status"] == "cancelled"
    expect(page.locator("li#conversation-" + _pk_of(page, "e2e-monitors")).locator(".watching")).to_have_count(
        0, timeout=LIVE)

    # Deleting the ended monitor takes its row away without a reload.
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Delete").click()
    expect(row).to_have_count(0, timeout=LIVE)
    assert requests.get(f"{stack.base}/api/monitors/{monitor_id}", headers=stack.auth, timeout=10).status_code == 404
    assert_not_reloaded(page, documents)


def test_conversation_page_shows_wake_live_and_watching_mark_clears(page: Page, vigil_stack, pages, screenshots):
    stack = vigil_stack
    url = pages.set("/deploy", "<h1>Deploy</h1><p>running</p>")
    description = "the deploy finishes (e2e)"
    monitor_id = create_monitor(stack, "e2e-wake", description, url, max_wakes=1)

    pk = open_conversation(page, stack, "e2e-wake")
    item = page.locator(f"li#conversation-{pk}")
    expect(item.locator(".watching")).to_be_visible()
    messages = page.locator(f"ol#messages-{pk}")
    expect(messages.locator("li.message")).to_have_count(0)

    # The conversation's own monitor row ticking proves the page's event stream is live before the change.
    last_checked = page.locator(f"tr#monitor-{monitor_id} td.last-checked")
    expect(last_checked).not_to_have_attribute("data-check-count", last_checked.get_attribute("data-check-count"),
                                               timeout=LIVE)
    documents = watch_for_reloads(page)

    pages.set("/deploy", "<h1>Deploy</h1><p>finished</p>")
    wake = messages.locator("li.message.wake")
    expect(wake).to_have_count(1, timeout=LIVE)
    expect(wake.locator(".badge")).to_have_text("Woken by monitor")
    content = wake.locator(".content")
    expect(content).to_contain_text(f"Monitor fired: {description}")
    expect(content).to_contain_text("finished")

    # max_wakes 1: the monitor is done, and the sidebar mark goes away without a reload.
    expect(item.locator(".watching")).to_have_count(0, timeout=LIVE)
    expect(page.locator(f"tr#monitor-{monitor_id} td.status")).to_have_attribute("data-status", "done",
                                                                                  timeout=LIVE)
    assert_not_reloaded(page, documents)

    api = requests.get(f"{stack.base}/api/conversations/e2e-wake/messages", headers=stack.auth, timeout=10).json()
    [message] = api["messages"]
    assert message["role"] == "wake" and message["metadata"]["wake"]["ref_id"] == monitor_id
    expect(wake).to_have_attribute("id", f"message-{message['id']}")
    assert api_monitor(stack, monitor_id)["status"] == "done"
    shoot(page, screenshots, "conversation", end_width=375)


def test_login_wrong_password_shows_error_and_stays(page: Page, vigil_stack):
    log_in(page, vigil_stack, password="not-the-password")
    expect(page).to_have_url(f"{vigil_stack.base}/login")
    expect(page.get_by_role("alert")).to_have_text("Wrong email or password.")
    expect(page.locator('input[name="password"]')).to_be_visible()
    page.goto(f"{vigil_stack.base}/settings/monitors")
    expect(page).to_have_url(f"{vigil_stack.base}/login")


def _pk_of(page: Page, conversation_id: str) -> str:
    href = page.locator("aside.sidebar li a", has_text=re.compile(rf"^\s*{re.escape(conversation_id)}\s*$")) \
        .get_attribute("href")
    return href.rsplit("/", 1)[1]
