"""A signed trigger link against a real Vigil (web, worker, scheduler): the owner's link card, revealing its
secret (the owner's session only), and the card's own example curl waking the open conversation live."""

from __future__ import annotations

import os
import re
import subprocess
import uuid

import pytest
import requests
from playwright.sync_api import Browser, Page, expect

from e2e.browser import (LIVE, assert_not_reloaded, mark_event_stream_open, open_conversation,
                         watch_for_reloads)
from tests.processes import vigil

pytestmark = pytest.mark.e2e

HIDDEN = "hidden from you; the user reveals it on the link card in this chat"
CONVERSATION = "e2e-trigger"


def create_webhook_monitor(stack, conversation_id: str, description: str, scheme: str) -> dict:
    response = requests.post(f"{stack.base}/api/tool/monitor", headers=stack.auth, timeout=15, json={
        "action": "monitor_create", "context": {"conversation_id": conversation_id, "channel": "chat"},
        "arguments": {"description": description, "source": {"type": "webhook", "signature": scheme},
                      "max_wakes": 5}})
    response.raise_for_status()
    body = response.json()
    assert body["ok"], body
    return body["result"]


def run_example_curl(script: str, secret: str, home) -> subprocess.CompletedProcess:
    """The card's curl exactly as shown, in bash, signed from $VIGIL_WEBHOOK_SECRET.

    A .curlrc in CURL_HOME adds the status code to the output, so the command itself stays untouched.
    """
    (home / ".curlrc").write_text('write-out = "\\nHTTP %{http_code}\\n"\n')
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "CURL_HOME": str(home),
           "VIGIL_WEBHOOK_SECRET": secret}
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30)


def test_signed_link_card_reveal_and_example_curl_wake_live(page: Page, browser: Browser, vigil_stack, screenshots,
                                                            tmp_path):
    stack = vigil_stack
    description = "the release pipeline calls back (e2e trigger)"
    result = create_webhook_monitor(stack, CONVERSATION, description, "standard_webhooks")
    monitor_id, url = result["monitor_id"], result["url"]
    assert re.fullmatch(re.escape(f"{stack.base}/api/triggers/") + r"trg_[A-Za-z0-9_-]+", url), url
    assert result["signature"] == "standard_webhooks" and result["secret"] == HIDDEN
    assert "${VIGIL_WEBHOOK_SECRET" in result["example_curl"] and url in result["example_curl"]

    # The owner opens the conversation from the sidebar and finds the link card.
    mark_event_stream_open(page)
    pk = open_conversation(page, stack, CONVERSATION)
    page.wait_for_function("() => window.__sseOpen === true", timeout=LIVE)
    documents = watch_for_reloads(page)

    card = page.locator(f"section#trigger-{monitor_id}")
    expect(card).to_be_visible()
    expect(card.locator("h3")).to_contain_text(description)
    expect(card.locator("code.trigger-url")).to_have_text(url)
    expect(card.locator(".trigger-signature")).to_have_text("standard_webhooks")
    hits = card.locator(".trigger-hits")
    expect(hits).to_have_text(re.compile(r"^0 of \d+ hits$"))
    card.locator("summary", has_text="Example curl").click()
    curl = card.locator("pre.example-curl")
    expect(curl).to_be_visible()
    card_curl = curl.text_content()
    assert card_curl == result["example_curl"]
    messages = page.locator(f"ol#messages-{pk}")
    expect(messages.locator("li.message")).to_have_count(0)

    # Reveal: the secret is swapped into the card, and the same session reads the same secret from the API.
    reveal = card.get_by_role("button", name="Reveal secret")
    expect(reveal).to_be_visible()
    assert card.locator("code.secret").count() == 0
    reveal.click()
    shown = card.locator(f"#secret-{monitor_id} code.secret#secret-value")
    expect(shown).to_have_text(re.compile(r"^whsec_[A-Za-z0-9+/]{43}=$"))
    secret = shown.text_content()
    expect(reveal).to_have_count(0)
    secret_path = f"{stack.base}/api/monitors/{monitor_id}/secret"
    again = page.context.request.get(secret_path)
    assert again.status == 200, again.text()
    assert again.json() == {"secret": secret}
    assert again.headers["cache-control"].startswith("no-store")
    # A runtime token is never enough, even the owner's own.
    assert requests.get(secret_path, headers=stack.auth, timeout=10).status_code == 404

    # Another account, signed in in its own browser context, gets a 404 like any unknown monitor.
    other_email, other_password = f"other-{uuid.uuid4().hex[:8]}@example.com", "another-good-e2e-password"
    vigil("user", "create", other_email, "--password", other_password, env=stack.env)
    other_context = browser.new_context()
    try:
        other = other_context.new_page()
        other.goto(f"{stack.base}/login")
        other.locator('input[name="email"]').fill(other_email)
        other.locator('input[name="password"]').fill(other_password)
        other.get_by_role("button", name="Sign in").click()
        expect(other).to_have_url(f"{stack.base}/settings/monitors")
        expect(other.locator(".who")).to_have_text(other_email)
        refused = other_context.request.get(secret_path)
        assert refused.status == 404, refused.text()
        assert secret not in refused.text()
        assert other_context.request.get(f"{stack.base}/conversations/{pk}").status == 404
    finally:
        other_context.close()

    # The card's example curl, run for real with the revealed secret, wakes the open page without a reload.
    sent = run_example_curl(card_curl, secret, tmp_path)
    assert sent.returncode == 0, f"{sent.stdout}\n{sent.stderr}"
    assert sent.stdout.strip().endswith("HTTP 202"), sent.stdout + sent.stderr
    assert '"accepted":true' in sent.stdout.replace(" ", "")
    wake = messages.locator("li.message.wake")
    expect(wake).to_have_count(1, timeout=LIVE)
    expect(wake.locator(".badge")).to_have_text("Woken by trigger")
    expect(wake.locator(".content")).to_contain_text(description)
    expect(wake.locator(".content")).to_contain_text("sent_at")
    assert secret not in wake.inner_text()
    # the card counts the hit live, and the secret the owner revealed stays revealed
    expect(hits).to_have_text(re.compile(r"^1 of \d+ hits$"), timeout=LIVE)
    expect(shown).to_have_text(secret)
    assert_not_reloaded(page, documents)

    api = requests.get(f"{stack.base}/api/conversations/{CONVERSATION}/messages", headers=stack.auth,
                       timeout=10).json()
    [message] = api["messages"]
    assert message["role"] == "wake" and message["metadata"]["wake"]["source"] == "trigger"
    assert message["metadata"]["wake"]["ref_id"] == monitor_id
    expect(wake).to_have_attribute("id", f"message-{message['id']}")

    # The revealed card at phone width: nothing runs off the side.
    page.set_viewport_size({"width": 375, "height": page.viewport_size["height"]})
    card.scroll_into_view_if_needed()
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    box = card.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 375, box
    card.screenshot(path=str(screenshots / "trigger-card-375.png"))
