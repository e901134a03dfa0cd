"""A tool source that requires approval, against a real Vigil (web, worker, scheduler) and a real JSON API on
127.0.0.1: the runtime registers its agent's declared HTTP tool, the agent arms a watch of it, and nothing calls
the API until the owner approves the card on the conversation page; approved, the card turns active without a
reload, the first poll reads a false condition, and the poll that reads it true wakes the open page live with the
note while the monitor's row turns done. The tool's credential never reaches the page."""

from __future__ import annotations

import json
import re
import time
from contextlib import closing
from datetime import timedelta

import psycopg2
import pytest
import requests
from playwright.sync_api import Page, expect

from adapters.wakeup import make_alarm
from e2e.api import api_monitor, wake_messages
from e2e.browser import LIVE, assert_not_reloaded, mark_event_stream_open, open_conversation, watch_for_reloads
from models.db import utcnow
from tests.conftest import E2E_DATABASE_URL
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.e2e

CONVERSATION = "e2e-tool-approval"
AGENT = "e2e-shop-agent"
TOOL = "parcel_status"
ARGUMENTS = {"parcel": "P-7"}
PARCEL = "/parcels/P-7"
SECRET = "sk-e2e-SECRET"
DESCRIPTION = "parcel P-7 is delivered (e2e)"
NOTE = "Tell the user parcel P-7 arrived and thank the courier."
EXPR = "data.reached == true"


def register_tool(stack, base: str) -> dict:
    """The runtime's PUT: one GET of the parcel API with its credential; the output is the API's JSON body."""
    response = requests.put(f"{stack.base}/api/agents/{AGENT}/tools/{TOOL}", headers=stack.auth, timeout=15, json={
        "description": "Where a parcel is", "requires_approval": True,
        "parameters": {"type": "object", "properties": {"parcel": {"type": "string"}}, "required": ["parcel"]},
        "steps": [{"kind": "http", "method": "GET", "url": base + "/parcels/{{args.parcel}}",
                   "headers": {"Authorization": f"Bearer {SECRET}"}}],
        "output": {"main": "steps[0].body"}})
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["steps"][0]["headers"] == {"Authorization": "••••••••"} and body["requires_approval"], body
    return body


def arm_watch(stack) -> dict:
    response = requests.post(f"{stack.base}/api/tool/monitor", headers=stack.auth, timeout=15, json={
        "action": "monitor_create",
        "context": {"conversation_id": CONVERSATION, "channel": "chat", "agent_id": AGENT},
        "arguments": {"description": DESCRIPTION, "note": NOTE, "max_wakes": 1,  # one wake, then done
                      "source": {"type": "tool", "tool": TOOL, "arguments": ARGUMENTS},
                      "check": {"type": "cel", "expr": EXPR}}})
    response.raise_for_status()
    body = response.json()
    assert body["ok"], body
    return body["result"]


def next_check_at(monitor_id: str):
    with closing(psycopg2.connect(E2E_DATABASE_URL, connect_timeout=5)) as conn, conn, conn.cursor() as cur:
        cur.execute("SELECT next_check_at FROM monitors WHERE id = %s", (monitor_id,))
        return cur.fetchone()[0]


def make_due_now(stack, monitor_id: str) -> None:
    """The test standing in for the clock: a tool watch polls every 5+ minutes (seed 001), longer than a test may
    wait, so its next due time is moved to now in the e2e database, as if the interval had passed. The scheduler
    and worker then claim and run it exactly as they would at that time. A write outside Vigil's own code does not
    wake the sleeping scheduler, so the test rings it as Vigil's writes do (adapters/wakeup.py, through Redis)."""
    due = utcnow() - timedelta(seconds=1)
    with closing(psycopg2.connect(E2E_DATABASE_URL, connect_timeout=5)) as conn, conn, conn.cursor() as cur:
        cur.execute("UPDATE monitors SET next_check_at = %s WHERE id = %s AND status = 'active'", (due, monitor_id))
        assert cur.rowcount == 1, "the monitor was not active when its next poll was made due"
    alarm = make_alarm(stack.env["REDIS_URL"], stack.env["DATABASE_URL"])
    try:
        alarm.ring(due)
    finally:
        alarm.close()


def assert_no_secret(page: Page) -> None:
    assert SECRET not in page.content(), "the tool's credential reached the page"


def test_tool_call_approved_on_conversation_page_arms_it_and_first_fire_arrives_live(page: Page, vigil_stack, pages,
                                                                                   screenshots):
    stack = vigil_stack
    pages.set_json(PARCEL, json.dumps({"reached": False, "where": "sorting centre"}))
    register_tool(stack, pages.base)
    result = arm_watch(stack)
    monitor_id = result["monitor_id"]
    assert result["status"] == "awaiting_approval", result
    assert result["approve_url"] == f"{stack.base}/commands/{monitor_id}", result
    assert result["agent_id"] == AGENT and result["arguments"] == ARGUMENTS, result
    assert result["interval_seconds"] >= 300, result  # why the second poll below is made due by hand

    mark_event_stream_open(page)
    pk = open_conversation(page, stack, CONVERSATION)
    page.wait_for_function("() => window.__sseOpen === true", timeout=LIVE)
    try:
        # The card names the agent, the tool and the exact arguments, and asks.
        card = page.locator(f"section#command-{monitor_id}")
        expect(card).to_be_visible()
        expect(card).to_have_class(re.compile(r"\btool-card\b"))
        expect(card.locator("h3")).to_have_text("Approve this tool call?")
        expect(card.locator("dd.agent")).to_have_text(AGENT)
        expect(card.locator("code.tool")).to_have_text(TOOL)
        assert json.loads(card.locator("code.arguments").text_content()) == ARGUMENTS
        approve, deny = card.get_by_role("button", name="Approve"), card.get_by_role("button", name="Deny")
        expect(approve).to_be_visible()
        expect(deny).to_be_visible()
        status = page.locator(f"tr#monitor-{monitor_id} td.status")
        expect(status).to_have_attribute("data-status", "awaiting_approval")
        messages = page.locator(f"ol#messages-{pk}")
        expect(messages.locator("li.message")).to_have_count(0)
        assert_no_secret(page)
        page.screenshot(path=str(screenshots / "tool-awaiting.png"), full_page=True)

        # Nothing calls the API before the owner says so (the scheduler ticks every 0.2 s).
        time.sleep(1)
        assert pages.hits.get(PARCEL, 0) == 0, "the tool ran before it was approved"
        documents = watch_for_reloads(page)

        approve.click()
        expect(card.locator("p.decision")).to_have_attribute("data-status", "active", timeout=LIVE)
        expect(card.locator("h3")).to_have_text("Tool call")
        expect(card.get_by_role("button")).to_have_count(0)
        expect(status).to_have_attribute("data-status", "active", timeout=LIVE)
        assert_not_reloaded(page, documents)

        # Approved, its first poll is due at once: the API is called, the condition is false, nobody wakes.
        wait_for(lambda: pages.hits.get(PARCEL, 0) >= 1, LIVE / 1000, "the approved tool was never polled")
        last_checked = page.locator(f"tr#monitor-{monitor_id} td.last-checked")
        expect(last_checked).to_have_attribute("data-check-count", "1", timeout=LIVE)  # the quiet poll, live
        page.wait_for_timeout(1000)
        assert pages.hits[PARCEL] == 1, "the first poll ran more than once"
        expect(messages.locator("li.message")).to_have_count(0)
        assert wake_messages(stack, CONVERSATION) == []
        due = next_check_at(monitor_id)
        assert due - utcnow() > timedelta(minutes=4, seconds=30), f"the next poll is due at {due}, too soon"
        assert_no_secret(page)

        # The parcel arrives; its next poll (made due now: see make_due_now) reads the condition true.
        pages.set_json(PARCEL, json.dumps({"reached": True, "where": "front door"}))
        make_due_now(stack, monitor_id)
        wake = messages.locator("li.message.wake")
        expect(wake).to_have_count(1, timeout=LIVE)
        assert pages.hits[PARCEL] == 2, pages.hits
        expect(wake.locator(".badge")).to_have_text("Woken by monitor")
        content = wake.locator(".content")
        expect(content).to_contain_text(f"Monitor fired: {DESCRIPTION}")
        expect(content).to_contain_text(f"{TOOL}(parcel='P-7')")
        expect(content).to_contain_text('"where": "front door"')  # the output as it matched
        expect(content).to_contain_text(f"Your note, as you wrote it when you armed this monitor:\n{NOTE}")

        # One wake (max_wakes 1): the monitor is done; its row, card and the sidebar mark say so without a reload.
        expect(status).to_have_attribute("data-status", "done", timeout=LIVE)
        expect(status).to_have_text("done")
        expect(page.locator(f"tr#monitor-{monitor_id}").get_by_role("button")).to_have_text(["Delete"])  # ended
        expect(card.locator("p.decision")).to_have_attribute("data-status", "done", timeout=LIVE)
        expect(page.locator(f"li#conversation-{pk}").locator(".watching")).to_have_count(0, timeout=LIVE)
        assert_not_reloaded(page, documents)
        assert_no_secret(page)
        page.screenshot(path=str(screenshots / "tool-woken.png"), full_page=True)
    except BaseException:
        page.screenshot(path=str(screenshots / "tool-approval-failed.png"), full_page=True)
        raise

    [message] = wake_messages(stack, CONVERSATION)
    assert message["metadata"]["wake"]["ref_id"] == monitor_id and message["metadata"]["note"] == NOTE, message
    assert SECRET not in json.dumps(message), message
    expect(wake).to_have_attribute("id", f"message-{message['id']}")
    assert api_monitor(stack, monitor_id)["status"] == "done"

    # Loaded afresh, the conversation and Settings → Tools show the same, still without the credential.
    page.goto(f"{stack.base}/conversations/{pk}")
    expect(page.locator(f"tr#monitor-{monitor_id} td.status")).to_have_attribute("data-status", "done")
    expect(page.locator(f"ol#messages-{pk} li.message.wake")).to_have_count(1)
    assert_no_secret(page)
    page.goto(f"{stack.base}/settings/tools")
    expect(page.get_by_text(TOOL).first).to_be_visible()
    assert_no_secret(page)
