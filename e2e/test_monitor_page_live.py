"""The monitor page against a real Vigil (web, worker, scheduler): the owner opens a threshold monitor's evidence,
and what its checks find arrives live, without a reload: the quiet checks counted, a change that does not cross
answering "why didn't it fire?", then the fire with before → after and its wake; the conversation's wake links
back to it ("what it saw"). A judge's "no", through a catalog model pointed at a local judge server, shows its
verdict and tokens."""

from __future__ import annotations

import re

import pytest
import requests
from playwright.sync_api import Page, expect

from e2e.api import api_monitor, created_monitor, wake_messages
from e2e.browser import LIVE, assert_not_reloaded, log_in, mark_event_stream_open, shoot, watch_for_reloads
from tests.judge_server import JudgeServer

pytestmark = pytest.mark.e2e

CONVERSATION = "e2e-monitor-page"
DESCRIPTION = "ACMEB below 90 (e2e monitor page)"
PAGE = "<html><body><p id='price'>Price: ${price}</p></body></html>"


def quote(price: str) -> str:
    return PAGE.replace("{price}", price)


def create(stack, arguments: dict, conversation: str = CONVERSATION) -> str:
    return created_monitor(stack, conversation, {"on_match": "Tell the user.", "interval": "1s", **arguments})




def test_monitor_page_shows_why_not_then_the_fire_live(page: Page, vigil_stack, pages, screenshots):
    stack = vigil_stack
    url = pages.set("/e2e-monitor-page", quote("95.10"))
    monitor_id = create(stack, {"description": DESCRIPTION, "source": {"type": "page", "url": url,
                                                                       "selector": "#price"},
                                "check": {"type": "threshold", "op": "<", "value": 90}})

    # From Settings → Monitors, the row's description opens the monitor's page.
    mark_event_stream_open(page)
    log_in(page, stack)
    expect(page).to_have_url(f"{stack.base}/settings/monitors")
    page.locator(f"tr#monitor-{monitor_id} td.description a").click()
    expect(page).to_have_url(f"{stack.base}/monitors/{monitor_id}")
    page.wait_for_function("() => window.__sseOpen === true", timeout=LIVE)
    section = page.locator(f"section#evidence-{monitor_id}")
    expect(section.locator("h1")).to_have_text(DESCRIPTION)
    expect(section.locator("li.event.baseline")).to_have_count(1)
    expect(section.locator(".why-not")).to_have_count(0)
    documents = watch_for_reloads(page)

    # Quiet checks are counted into a span as they happen (one a second), never listed one by one.
    quiet = section.locator("li.event.quiet")
    expect(quiet).to_have_text(re.compile(r"^\s*(?:[2-9]|\d{2,}) quiet checks, "), timeout=LIVE)
    expect(section.locator("ol.timeline > li.event:not(.quiet)")).to_have_count(1)

    # A change that does not cross the line: the page answers "why didn't it fire?".
    pages.set("/e2e-monitor-page", quote("91.30"))
    why_not = section.locator(".why-not")
    expect(why_not).to_have_text("Why didn't it fire? Changed, but 91.30 is not below 90.", timeout=LIVE)
    changed = section.locator("li.event.changed")
    expect(changed).to_have_count(1)
    expect(changed.locator(".reason")).to_have_text("Changed, but 91.30 is not below 90.")
    expect(changed.locator(".before")).to_have_text("95.10")
    expect(changed.locator(".after")).to_have_text("91.30")

    # The crossing fires: before → after, the reason with what it was, and the wake it wrote.
    pages.set("/e2e-monitor-page", quote("88.20"))
    fired = section.locator("li.event.fired")
    expect(fired).to_have_count(1, timeout=LIVE)
    expect(fired.locator(".reason")).to_have_text("88.20 is below 90 (was 91.30)")
    expect(fired.locator(".before")).to_have_text("91.30")
    expect(fired.locator(".after")).to_have_text("88.20")
    expect(fired.locator(".before-after")).to_have_text(re.compile(r"91\.30\s*→\s*88\.20"))
    wake = section.locator("li.event.wake")
    expect(wake).to_have_count(1, timeout=LIVE)
    expect(why_not).to_have_count(0)
    expect(section.locator(".status")).to_have_attribute("data-status", "done", timeout=LIVE)
    kinds = section.locator("ol.timeline > li.event")
    expect(kinds.first).to_have_class(re.compile(r"\bwake\b"))
    expect(kinds.nth(1)).to_have_class(re.compile(r"\bfired\b"))
    assert_not_reloaded(page, documents)
    shoot(page, screenshots, "monitor-page-fired")

    [message] = wake_messages(stack, CONVERSATION)
    assert message["metadata"]["wake"]["ref_id"] == monitor_id
    expect(wake.locator("a")).to_have_text("wake #1")  # numbered within its conversation
    expect(wake.locator("a")).to_have_attribute("href", re.compile(rf"#message-{message['id']}$"))
    assert api_monitor(stack, monitor_id)["status"] == "done"

    # From the conversation, the wake's "what it saw" opens the same evidence.
    page.locator("aside.sidebar li a", has_text=re.compile(rf"^\s*{re.escape(CONVERSATION)}\s*$")).click()
    link = page.locator(f"li#message-{message['id']} a.evidence-link")
    expect(link).to_have_text("what it saw")
    link.click()
    expect(page).to_have_url(f"{stack.base}/monitors/{monitor_id}")
    section = page.locator(f"section#evidence-{monitor_id}")
    expect(section.locator("li.event.fired .reason")).to_have_text("88.20 is below 90 (was 91.30)")
    expect(section.locator("li.event.changed .reason")).to_have_text("Changed, but 91.30 is not below 90.")


def test_monitor_page_shows_the_judges_no_live(page: Page, vigil_stack, pages, screenshots):
    """The stack has no JUDGE_* settings; a catalog model (Settings → Models) named by the monitor is the judge."""
    stack = vigil_stack
    model = "e2e-monitor-page-judge"
    with JudgeServer(mode="no_match") as judge:
        log_in(page, stack)
        expect(page).to_have_url(f"{stack.base}/settings/monitors")
        page.goto(f"{stack.base}/settings/models")
        form = page.locator("form.model-form")
        form.locator('input[name="name"]').fill(model)
        form.locator('input[name="base_url"]').fill(judge.base_url)
        form.locator('input[name="model"]').fill("gpt-test")
        form.locator('input[name="api_key"]').fill("sk-e2e-judge")
        form.get_by_role("button", name="Save").click()
        expect(page.locator(f"tr#model-{model}")).to_be_visible()
        monitor_id = None
        try:
            url = pages.set("/e2e-judged-notes", "<ul><li>1.0 first</li></ul>")
            monitor_id = create(stack, {"description": "the notes announce a security fix (e2e)",
                                        "source": {"type": "page", "url": url}, "check": {"type": "change"},
                                        "condition": "a security fix is announced", "judge_model": model,
                                        "max_wakes": 3}, conversation="e2e-monitor-page-judge")
            mark_event_stream_open(page)
            page.goto(f"{stack.base}/monitors/{monitor_id}")
            page.wait_for_function("() => window.__sseOpen === true", timeout=LIVE)
            section = page.locator(f"section#evidence-{monitor_id}")
            expect(section.locator("li.event.baseline")).to_have_count(1)
            documents = watch_for_reloads(page)

            pages.set("/e2e-judged-notes", "<ul><li>1.1 typo fixes</li><li>1.0 first</li></ul>")
            said = "The check matched, but the judge said no: The price is still $120.00."
            expect(section.locator(".why-not")).to_have_text(f"Why didn't it fire? {said}", timeout=LIVE)
            changed = section.locator("li.event.changed")
            expect(changed.locator(".reason")).to_have_text(said)
            expect(changed.locator(".judge")).to_have_text(
                f"Judge ({model}): no match — The price is still $120.00. · 110 tokens")
            expect(changed.locator("pre.diff")).to_contain_text("+ 1.1 typo fixes")
            expect(section.locator("li.event.fired")).to_have_count(0)
            assert_not_reloaded(page, documents)
            assert len(judge.requests) == 1
            assert wake_messages(stack, "e2e-monitor-page-judge") == []
            shoot(page, screenshots, "monitor-page-judged-no")
        finally:
            if monitor_id is not None:  # it would go on checking a page nobody changes, against no judge
                requests.post(f"{stack.base}/api/monitors/{monitor_id}/cancel", headers=stack.auth, timeout=10)
            page.goto(f"{stack.base}/settings/models")
            page.locator(f"tr#model-{model}").get_by_role("button", name="Delete").click()
            expect(page.locator(f"tr#model-{model}")).to_have_count(0)
