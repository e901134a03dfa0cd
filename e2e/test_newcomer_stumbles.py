"""What a newcomer tripped over in the first ten minutes (issue 30), in a real Chromium against a real Vigil: a
trigger link that ended says so (no Copy, no Reveal secret), live and after a reload; a second decision on an
approval page is a warning, not the thank-you box; a 300-character word never makes a page scroll sideways."""

from __future__ import annotations

import time

import pytest
import requests
from playwright.sync_api import Page, expect

from e2e.api import created
from e2e.browser import LIVE, WIDTHS, log_in, mark_event_stream_open, open_conversation
from engine.signatures import sign

pytestmark = pytest.mark.e2e

LONG_WORD = "unbroken" * 37 + "word"  # 300 characters, no place to break


def create(stack, conversation_id: str, description: str, source: dict, **arguments) -> dict:
    return created(stack, conversation_id, {"description": description, "source": source, **arguments})


def test_trigger_card_shows_the_link_ended_after_its_one_wake(page: Page, vigil_stack, screenshots):
    stack = vigil_stack
    result = create(stack, "e2e-ended-link", "the nightly backup reports (e2e ended link)",
                    {"type": "webhook", "signature": "standard_webhooks"})
    assert result["max_wakes"] == 1
    monitor_id = result["monitor_id"]
    mark_event_stream_open(page)
    open_conversation(page, stack, "e2e-ended-link")
    page.wait_for_function("() => window.__sseOpen === true", timeout=LIVE)
    card = page.locator(f"section#trigger-{monitor_id}")
    expect(card.locator(".trigger-ends")).to_have_text("ends after 1 wake")
    expect(card.get_by_role("button", name="Copy")).to_be_visible()
    expect(card.get_by_role("button", name="Reveal secret")).to_be_visible()

    secret = page.context.request.get(f"{stack.base}/api/monitors/{monitor_id}/secret").json()["secret"]
    body = b'{"status": "done"}'
    sent = requests.post(result["url"], data=body, headers={"Content-Type": "application/json",
                                                             **sign("standard_webhooks", secret, body, time.time())},
                         timeout=10)
    assert sent.status_code == 202, sent.text
    # live: the card says it ended, and Copy and Reveal secret go away without a reload
    expect(card.locator(".trigger-ended")).to_have_text("ended: a POST now gets 404", timeout=LIVE)
    expect(card.get_by_role("button", name="Copy")).to_be_hidden()
    expect(card.get_by_role("button", name="Reveal secret")).to_be_hidden()
    assert requests.post(result["url"], data=body, timeout=10).status_code == 404

    page.reload()
    card = page.locator(f"section#trigger-{monitor_id}")
    expect(card).to_have_class("trigger-card ended")
    expect(card.locator(".trigger-ended")).to_be_visible()
    assert card.get_by_role("button").count() == 0, "an ended link offers nothing to copy or reveal"
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        card.screenshot(path=str(screenshots / f"trigger-card-ended-{width}.png"))


def test_second_decision_on_an_approval_page_is_a_warning(page: Page, vigil_stack, screenshots):
    stack = vigil_stack
    result = create(stack, "e2e-second-decision", "Dana decides on the rollout (e2e second decision)",
                    {"type": "approval", "question": "Roll out to everyone?"}, expires_in="1d")
    link = result["approval_url"]
    first, second = page, page.context.new_page()
    for tab in (first, second):
        tab.goto(link)
        expect(tab.get_by_role("button", name="Approve")).to_be_visible()

    first.get_by_role("button", name="Approve").click()
    thanks = first.locator("p.notice")
    expect(thanks).to_have_text("Thank you: your decision was sent.")
    expect(thanks).not_to_have_class("notice refused")

    second.get_by_role("button", name="Reject").click()
    refused = second.locator("p.notice")
    expect(refused).to_have_text("A decision was already made.")
    expect(refused).to_have_class("notice refused")
    expect(refused).to_have_attribute("role", "alert")
    colours = [tab.locator("p.notice").evaluate("e => getComputedStyle(e).backgroundColor") for tab in (first, second)]
    assert colours[0] != colours[1], "the refusal looks like the thank-you"
    expect(second.locator(".decision")).to_contain_text("Approve")
    second.set_viewport_size({"width": 375, "height": 700})
    second.screenshot(path=str(screenshots / "approve-second-decision-375.png"))
    second.close()


def test_a_300_character_word_never_scrolls_a_page_sideways(page: Page, vigil_stack):
    stack = vigil_stack
    result = create(stack, "e2e-long-word", LONG_WORD, {"type": "webhook"}, max_wakes=3)
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    log_in(page, stack)
    expect(page.locator(f"tr#monitor-{result['monitor_id']}")).to_be_visible()
    conversation = page.locator("aside.sidebar li a", has_text="e2e-long-word").get_attribute("href")
    for path in ("/settings/monitors", f"/monitors/{result['monitor_id']}", conversation):
        page.goto(f"{stack.base}{path}")
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            scroll = page.evaluate("document.documentElement.scrollWidth")
            assert scroll <= width, f"{path} is {scroll} px wide at {width} px"
    assert errors == []


def test_a_page_that_is_not_there_is_an_html_page_in_the_browser(page: Page, vigil_stack, screenshots):
    stack = vigil_stack
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    log_in(page, stack)
    for path in ("/monitors/doesnotexist", "/conversations/999999", "/setup"):
        answer = page.goto(f"{stack.base}{path}")
        assert answer.status == 404 and answer.headers["content-type"].startswith("text/html"), path
        expect(page.locator("#error-page h1")).to_have_text("Not found")
        expect(page.locator("body")).not_to_contain_text('"status_code"')
    page.set_viewport_size({"width": 375, "height": 700})
    page.screenshot(path=str(screenshots / "error-page-375.png"))
    assert errors == [] or all("404" in error for error in errors), errors
