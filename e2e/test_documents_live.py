"""A document watch against a real Vigil (web, worker, scheduler): the platform PUTs a document, an agent arms a
watch on it, the owner has the conversation open, and the PUT that makes the CEL condition true wakes the page
live, quoting the note and the document as it matched, while the monitor's row turns done."""

from __future__ import annotations

import pytest
import requests
from playwright.sync_api import Page, expect

from e2e.api import api_monitor, wake_messages
from e2e.browser import LIVE, assert_not_reloaded, mark_event_stream_open, open_conversation, watch_for_reloads

pytestmark = pytest.mark.e2e

CONVERSATION = "e2e-document-render"
DOCUMENT = "/api/documents/ct:render/r-1"
NOTE = "Post the render link"
DESCRIPTION = "the render r-1 finishes (e2e)"
EXPR = "doc.status == 'done'"
DONE = {"status": "done", "url": "https://example.com/r-1.mp4"}


def put_document(stack, body: dict) -> requests.Response:
    response = requests.put(f"{stack.base}{DOCUMENT}", headers=stack.auth, json=body, timeout=15)
    assert response.status_code in (200, 201), response.text
    return response


def arm_watch(stack) -> str:
    response = requests.post(f"{stack.base}/api/tool/monitor", headers=stack.auth, timeout=15, json={
        "action": "monitor_create", "context": {"conversation_id": CONVERSATION, "channel": "chat"},
        "arguments": {"description": DESCRIPTION, "note": NOTE,
                      "source": {"type": "document", "item_type": "ct:render", "item_id": "r-1"},
                      "check": {"type": "cel", "expr": EXPR}}})
    response.raise_for_status()
    body = response.json()
    assert body["ok"], body
    return body["result"]["monitor_id"]


def test_document_watch_wake_arrives_live_on_the_conversation_page_after_a_put(page: Page, vigil_stack,
                                                                               screenshots):
    stack = vigil_stack
    created = put_document(stack, {"status": "rendering"})
    assert created.status_code == 201 and created.headers["ETag"] == '"1"', created.text
    monitor_id = arm_watch(stack)

    mark_event_stream_open(page)
    pk = open_conversation(page, stack, CONVERSATION)
    page.wait_for_function("() => window.__sseOpen === true", timeout=LIVE)
    item = page.locator(f"li#conversation-{pk}")
    expect(item.locator(".watching")).to_be_visible()
    messages = page.locator(f"ol#messages-{pk}")
    expect(messages.locator("li.message")).to_have_count(0)
    status = page.locator(f"tr#monitor-{monitor_id} td.status")
    expect(status).to_have_attribute("data-status", "active")
    # The watch's first check read version 1 ('rendering'): false, so nothing woke.
    assert wake_messages(stack, CONVERSATION) == []
    documents = watch_for_reloads(page)

    written = put_document(stack, DONE)
    assert written.status_code == 200 and written.headers["ETag"] == '"2"', written.text
    assert written.json()["watches_checked"] == 1, written.json()

    wake = messages.locator("li.message.wake")
    expect(wake).to_have_count(1, timeout=LIVE)
    expect(wake.locator(".badge")).to_have_text("Woken by monitor")
    content = wake.locator(".content")
    expect(content).to_contain_text(f"Monitor fired: {DESCRIPTION}")
    expect(content).to_contain_text(f"ct:render/r-1 (version 2) now matches: {EXPR}")
    expect(content).to_contain_text('"url": "https://example.com/r-1.mp4"')  # the snapshot as it matched
    expect(content).to_contain_text('"status": "done"')
    expect(content).to_contain_text(f"Your note, as you wrote it when you armed this monitor:\n{NOTE}")

    # One wake (max_wakes 1): the monitor is done, and its row and the sidebar mark say so without a reload.
    expect(status).to_have_attribute("data-status", "done", timeout=LIVE)
    expect(status).to_have_text("done")
    expect(page.locator(f"tr#monitor-{monitor_id}").get_by_role("button")).to_have_text(["Delete"])  # ended
    expect(item.locator(".watching")).to_have_count(0, timeout=LIVE)
    assert_not_reloaded(page, documents)
    page.screenshot(path=str(screenshots / "document-woken.png"), full_page=True)

    [message] = wake_messages(stack, CONVERSATION)
    assert message["metadata"]["wake"]["ref_id"] == monitor_id, message
    assert message["metadata"]["note"] == NOTE, message
    assert message["metadata"]["document"] == {"item_type": "ct:render", "item_id": "r-1", "version": 2,
                                               "doc": DONE, "truncated": False}, message
    expect(wake).to_have_attribute("id", f"message-{message['id']}")
    assert api_monitor(stack, monitor_id)["status"] == "done"

    # A later write that keeps the condition true wakes no one: the watch has ended.
    again = put_document(stack, {**DONE, "note": "re-uploaded"})
    assert again.json()["watches_checked"] == 0, again.json()
    page.wait_for_timeout(1500)
    expect(wake).to_have_count(1)
    assert len(wake_messages(stack, CONVERSATION)) == 1
