"""Every monitor reads right (issue 17), against a real Vigil (web, worker, scheduler): a trigger link's row and an
approval's row say what they watch and that they wait for events; the conversation shows both cards; deciding the
approval through its link turns the row and the card approved, with the comment, without a reload."""

from __future__ import annotations

import re
import time

import pytest
import requests
from playwright.sync_api import Browser, Page, expect

from e2e.api import created
from e2e.browser import LIVE, assert_not_reloaded, log_in, mark_event_stream_open, shoot, watch_for_reloads
from engine.signatures import sign

pytestmark = pytest.mark.e2e

CONVERSATION = "e2e-rows"
QUESTION = "Ship v2 to every customer?"
COMMENT = "Go ahead: the release notes are signed off."


def create(stack, description: str, source: dict, **arguments) -> dict:
    return created(stack, CONVERSATION, {"description": description, "source": source, **arguments})




def test_trigger_and_approval_rows_read_right_and_turn_approved_live(page: Page, browser: Browser, vigil_stack,
                                                                       screenshots):
    stack = vigil_stack
    hook = create(stack, "the release pipeline reports back (e2e rows)", {"type": "webhook",
                                                                         "signature": "standard_webhooks"},
                  max_wakes=5)
    approval = create(stack, "Dana decides on shipping v2 (e2e rows)", {"type": "approval", "question": QUESTION},
                      expires_in="2d")
    hook_id, approval_id = hook["monitor_id"], approval["monitor_id"]

    # Settings → Monitors: each row says what it watches, that it waits for events, and links to its page.
    mark_event_stream_open(page)
    log_in(page, stack)
    expect(page).to_have_url(f"{stack.base}/settings/monitors")
    hook_row, approval_row = page.locator(f"tr#monitor-{hook_id}"), page.locator(f"tr#monitor-{approval_id}")
    expect(hook_row.locator("td.watches .url")).to_have_text(
        f"trigger link (standard_webhooks) · 0 of {hook['max_hits']} hits")
    expect(hook_row.locator("td.watches .check")).to_have_text("every delivery · ends after 5 wakes")
    expect(hook_row.locator("td.interval")).to_have_text("on delivery")
    expect(hook_row.locator("td.last-checked")).to_have_text("last event: none yet")
    expect(approval_row.locator("td.watches .url")).to_have_text(f"approval: {QUESTION} · open")
    expect(approval_row.locator("td.watches .check")).to_have_text("the decision")
    expect(approval_row.locator("td.interval")).to_have_text("on decision")
    expect(approval_row.locator("td.last-checked")).to_have_text("last event: none yet")
    for row, monitor_id in ((hook_row, hook_id), (approval_row, approval_id)):
        expect(row.locator("td.description a")).to_have_attribute("href", f"/monitors/{monitor_id}")
        expect(row).not_to_contain_text("None")
        expect(row).not_to_contain_text("any change")
    shoot(page, screenshots, "rows-monitors", no_sideways=True)

    # The conversation: the trigger card and the approval card, with the link the agent was given.
    page.locator("aside.sidebar li a", has_text=re.compile(rf"^\s*{CONVERSATION}\s*$")).click()
    expect(page.locator("h1")).to_have_text(CONVERSATION)
    page.wait_for_function("() => window.__sseOpen === true", timeout=LIVE)
    expect(page.locator(f"section#trigger-{hook_id}")).to_be_visible()
    card = page.locator(f"section#approval-{approval_id}")
    expect(card.locator("code.approval-url")).to_have_text(approval["approval_url"])
    expect(card.get_by_role("button", name="Copy")).to_have_attribute("data-copy", approval["approval_url"])
    expect(card.locator(".approval-question")).to_have_text(QUESTION)
    expect(card.locator(".approval-options")).to_have_text("Approve · Reject")
    expect(card.locator(".approval-state")).to_have_text("open")
    expect(card).to_contain_text("expires ")
    expect(card.locator(".decision")).to_have_count(0)
    hook_row, approval_row = page.locator(f"tr#monitor-{hook_id}"), page.locator(f"tr#monitor-{approval_id}")
    shoot(page, screenshots, "rows-conversation-open", no_sideways=True)
    documents = watch_for_reloads(page)

    # A signed delivery: the webhook row counts the hit and names its last event, live.
    secret = page.context.request.get(f"{stack.base}/api/monitors/{hook_id}/secret").json()["secret"]
    body = b'{"status": "deployed"}'
    sent = requests.post(hook["url"], data=body, timeout=10,
                         headers={"Content-Type": "application/json", **sign("standard_webhooks", secret, body,
                                                                              time.time(), "msg_rows_1")})
    assert sent.status_code == 202, sent.text
    expect(hook_row.locator("td.watches .url")).to_have_text(
        f"trigger link (standard_webhooks) · 1 of {hook['max_hits']} hits", timeout=LIVE)
    expect(hook_row.locator("td.last-checked")).to_have_text(re.compile(r"^last event: (just now|\d+ min ago)$"))

    # Someone with the link decides it in their own browser; the owner's row and card turn approved, live.
    context = browser.new_context()
    try:
        stranger = context.new_page()
        assert stranger.goto(approval["approval_url"]).status == 200
        stranger.locator("textarea#comment").fill(COMMENT)
        stranger.locator("button[name=decision][value=Approve]").click()
        expect(stranger.locator("p.decision")).to_have_attribute("data-decision", "Approve")
    finally:
        context.close()
    expect(approval_row.locator("td.watches .url")).to_have_text(f"approval: {QUESTION} · approved", timeout=LIVE)
    expect(approval_row.locator("td.status")).to_have_attribute("data-status", "done")
    expect(approval_row.locator("td.last-checked")).to_have_text(re.compile(r"^last event: (just now|\d+ min ago)$"))
    expect(card.locator(".approval-state")).to_have_text("approved", timeout=LIVE)
    expect(card.locator(".decision")).to_have_attribute("data-decision", "Approve")
    expect(card.locator(".approval-comment")).to_have_text(COMMENT)
    assert_not_reloaded(page, documents)
    shoot(page, screenshots, "rows-conversation-decided", no_sideways=True)
