"""Approval links against a real Vigil (web, worker, scheduler): a stranger's browser reads the request and
decides it, the owner's open conversation is woken live, later visitors only see the decision, and the open
page fits a phone."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
import requests
from playwright.sync_api import Browser, BrowserContext, Page, expect

from e2e.api import wake_messages
from e2e.browser import (LIVE, assert_not_reloaded, mark_event_stream_open, open_conversation,
                         watch_for_reloads)

pytestmark = pytest.mark.e2e

CONVERSATION = "e2e-approval"
DESCRIPTION = "Dana approves the launch email"
QUESTION = "Send the launch email to all customers?"
SCRIPT_LINE = "<script>alert(1)</script>"
DRAFT = "\n".join([
    "Subject: Vigil 2.0 is here",
    "",
    "Hi {first_name},",
    "",
    "Today we are launching Vigil 2.0: monitors that wake your assistant the moment something changes, "
    "approval links anyone can answer from their phone, and signed trigger links for your own pipelines.",
    "",
    "Everything you set up keeps working; there is nothing to migrate. Pricing stays the same for every "
    "existing plan until the end of the year, and the new Team plan starts at $12 per seat.",
    SCRIPT_LINE,
    "",
    "Reply to this email if anything looks off - a person reads every answer.",
    "",
    "Thanks for watching with us,",
    "The Vigil team",
])
COMMENT = "Not yet: legal has to sign off on the pricing paragraph first."


def create_approval(stack, conversation_id: str, **source) -> dict:
    response = requests.post(f"{stack.base}/api/tool/monitor", headers=stack.auth, timeout=15, json={
        "action": "monitor_create", "context": {"conversation_id": conversation_id, "channel": "chat"},
        "arguments": {"description": DESCRIPTION, "expires_in": "2d",
                      "source": {"type": "approval", "question": QUESTION, "details": DRAFT, **source}}})
    response.raise_for_status()
    body = response.json()
    assert body["ok"], body
    return body["result"]


def approval_link(stack, result: dict) -> str:
    """The link the agent hands out, on this stack's web process.

    The link is built from PUBLIC_API_BASE_URL (else http://127.0.0.1:8000); when the stack does not point it at
    its own web process, only the path is kept and put on the stack's base.
    """
    url = result["approval_url"]
    path = urlsplit(url).path
    assert re.fullmatch(r"/approve/apr_[A-Za-z0-9_-]+", path), url
    if stack.env.get("PUBLIC_API_BASE_URL", "").rstrip("/") == stack.base:
        assert url == f"{stack.base}{path}", url
    return f"{stack.base}{path}"


def fail_on_dialogs(page: Page) -> list[str]:
    """Any alert/confirm/prompt on a public page means injected script ran; each one is recorded and dismissed."""
    dialogs: list[str] = []

    def record(dialog):
        dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    page.on("dialog", record)
    return dialogs


@pytest.fixture(scope="module")
def launch_approval(vigil_stack) -> dict:
    """The launch-email approval in "e2e-approval", shared by the decide test and the later-visitor test; with a
    second visitor who opened the page before anyone decided (its cookie and the nonce its page carried)."""
    result = create_approval(vigil_stack, CONVERSATION)
    assert result["options"] == ["Approve", "Reject"], result
    link = approval_link(vigil_stack, result)
    early = requests.Session()
    page = early.get(link, timeout=10)
    nonce = re.search(r'name="nonce" value="([0-9a-f]{32})"', page.text).group(1)
    return {**result, "link": link, "early": early, "early_nonce": nonce}


@pytest.fixture()
def public_context(browser: Browser):
    """Fresh browser contexts with no session, as a stranger's browser opening the link."""
    contexts: list[BrowserContext] = []

    def new(**options) -> BrowserContext:
        contexts.append(browser.new_context(**options))
        return contexts[-1]

    yield new
    for context in contexts:
        context.close()


def test_approval_link_decision_wakes_owner_conversation_live(page: Page, public_context, vigil_stack,
                                                              launch_approval):
    stack, link, monitor_id = vigil_stack, launch_approval["link"], launch_approval["monitor_id"]

    # Context A: the owner has the conversation open, its event stream connected.
    mark_event_stream_open(page)
    pk = open_conversation(page, stack, CONVERSATION)
    page.wait_for_function("() => window.__sseOpen === true", timeout=LIVE)
    messages = page.locator(f"ol#messages-{pk}")
    expect(messages.locator("li.message")).to_have_count(0)
    status = page.locator(f"tr#monitor-{monitor_id} td.status")
    expect(status).to_have_attribute("data-status", "active")
    documents = watch_for_reloads(page)

    # Context B: no session; the stranger reads the question and the whole draft, the script line as text.
    stranger = public_context().new_page()
    dialogs = fail_on_dialogs(stranger)
    opened = stranger.goto(link)
    assert opened.status == 200
    assert opened.headers["cache-control"] == "no-store"
    expect(stranger.locator("h1.question")).to_have_text(QUESTION)
    details = stranger.locator("pre.details")
    expect(details).to_contain_text(SCRIPT_LINE)
    assert details.text_content() == DRAFT
    assert stranger.locator("main script").count() == 0
    assert DESCRIPTION not in stranger.content(), "the description is written for the owner's chat"
    stranger.locator("textarea#comment").fill(COMMENT)
    buttons = stranger.locator("button[name=decision]")
    expect(buttons).to_have_text(["Approve", "Reject"])
    stranger.locator("button[name=decision][value=Reject]").click()

    expect(stranger.locator("p.decision")).to_have_attribute("data-decision", "Reject")
    expect(stranger.locator("p.decision")).to_contain_text("Decided: Reject")
    expect(stranger.get_by_role("status")).to_have_text("Thank you: your decision was sent.")
    expect(stranger.locator("pre.details.comment")).to_have_text(COMMENT)
    expect(buttons).to_have_count(0)
    assert dialogs == [], f"a dialog opened on the approval page: {dialogs}"

    # Context A: the wake arrives over SSE; no reload.
    wake = messages.locator("li.message.wake.wake-approval")
    expect(wake).to_have_count(1, timeout=LIVE)
    expect(wake.locator(".badge")).to_have_text("Woken by approval")
    content = wake.locator(".content")
    expect(content).to_contain_text(f"Approval decided: {DESCRIPTION}")
    expect(content).to_contain_text("Decision: Reject")
    expect(content).to_contain_text(COMMENT)
    expect(status).to_have_attribute("data-status", "done", timeout=LIVE)
    assert_not_reloaded(page, documents)

    [message] = wake_messages(stack, CONVERSATION)
    assert message["metadata"]["wake"]["source"] == "approval"
    assert message["metadata"]["decision"] == "Reject" and message["metadata"]["comment"] == COMMENT
    expect(wake).to_have_attribute("id", f"message-{message['id']}")


def test_approval_link_after_decision_shows_it_and_refuses_another(public_context, vigil_stack, launch_approval):
    stack, link = vigil_stack, launch_approval["link"]
    api = link.replace("/approve/", "/api/approvals/")
    early, nonce = launch_approval["early"], launch_approval["early_nonce"]
    if requests.get(api, timeout=10).json()["state"] == "open":  # run on its own: decide it as the first test does
        early.post(link, data={"decision": "Reject", "comment": COMMENT, "nonce": nonce},
                   timeout=10).raise_for_status()

    # Context C: no session, opened after the decision.
    context = public_context()
    later = context.new_page()
    dialogs = fail_on_dialogs(later)
    assert later.goto(link).status == 200
    expect(later.locator("h1.question")).to_have_text(QUESTION)
    expect(later.locator("p.decision")).to_have_attribute("data-decision", "Reject")
    expect(later.locator("pre.details.comment")).to_have_text(COMMENT)
    expect(later.locator("button")).to_have_count(0)
    expect(later.locator("form")).to_have_count(0)
    expect(later.locator("textarea")).to_have_count(0)

    # The decided page carries no form, and the JSON twin never gives the nonce. A visitor who opened the page
    # before the decision (its cookie, its page's nonce) and chooses now is told it was decided already.
    state = context.request.get(api)
    assert state.status == 200 and state.json()["state"] == "decided", state.text()
    assert "nonce" not in state.json()
    again = early.post(link, data={"decision": "Approve", "comment": "overruled", "nonce": nonce}, timeout=10)
    assert again.status_code == 409, again.text
    assert 'data-decision="Reject"' in again.text and "A decision was already made." in again.text
    again_json = early.post(api, json={"decision": "Approve", "nonce": nonce}, timeout=10)
    assert again_json.status_code == 409, again_json.text
    without_page = requests.post(api, json={"decision": "Approve", "nonce": nonce}, timeout=10)
    assert without_page.status_code == 403, "a client that never opened the page can't decide"

    later.reload()
    expect(later.locator("p.decision")).to_have_attribute("data-decision", "Reject")
    assert dialogs == [], f"a dialog opened on the approval page: {dialogs}"
    [message] = wake_messages(stack, CONVERSATION)
    assert message["metadata"]["decision"] == "Reject", "the first decision stays the only one"


def test_approval_page_open_fits_phone_and_desktop(public_context, vigil_stack, screenshots):
    stack = vigil_stack
    link = approval_link(stack, create_approval(stack, "e2e-approval-layout"))
    page = public_context(viewport={"width": 375, "height": 812}).new_page()
    dialogs = fail_on_dialogs(page)
    assert page.goto(link).status == 200
    expect(page.locator("h1.question")).to_have_text(QUESTION)
    expect(page.locator("pre.details")).to_contain_text(SCRIPT_LINE)
    buttons = page.locator("button[name=decision]")
    expect(buttons).to_have_text(["Approve", "Reject"])

    # Phone: nothing scrolls sideways, and each option is a comfortable tap target inside the screen.
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    for i in range(buttons.count()):
        box = buttons.nth(i).bounding_box()
        assert box["height"] >= 44, (buttons.nth(i).text_content(), box)
        assert box["x"] >= 0 and box["x"] + box["width"] <= 375, (buttons.nth(i).text_content(), box)
    page.screenshot(path=str(screenshots / "approve-375.png"), full_page=True)

    page.set_viewport_size({"width": 1280, "height": 800})
    expect(buttons.first).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    page.screenshot(path=str(screenshots / "approve-1280.png"), full_page=True)

    assert dialogs == [], f"a dialog opened on the approval page: {dialogs}"
    state = requests.get(link.replace("/approve/", "/api/approvals/"), timeout=10).json()
    assert state["state"] == "open" and state["decision"] is None, "opening the page decides nothing"
