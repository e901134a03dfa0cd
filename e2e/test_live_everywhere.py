"""Live everywhere (issue 30): with a page open, what an agent, another tab or the CLI creates appears on it
without a reload — a new monitor's row at the top of Settings → Monitors (from "No monitors yet" too), the new
conversation in the sidebar, a token made elsewhere (never its secret), a device just paired. Each test signs in
as an account of its own, so the empty states are really empty."""

from __future__ import annotations

import re
import subprocess
import uuid

import pytest
import requests
from playwright.sync_api import Page, expect

from e2e.browser import (LIVE, assert_not_reloaded, console_errors, mark_event_stream_open, shoot,
                         watch_for_reloads)
from tests.processes import VIGIL, vigil

pytestmark = pytest.mark.e2e

PASSWORD = "a-good-live-password"


def new_account(stack) -> tuple[str, str]:
    """A fresh account (nothing in it yet) and a runtime token of its own: (email, token)."""
    email = f"live-{uuid.uuid4().hex[:8]}@example.com"
    vigil("user", "create", email, "--password", PASSWORD, env=stack.env)
    return email, vigil("token", "create", "--user", email, env=stack.env).strip().splitlines()[-1]


def signed_in(page: Page, stack, email: str, path: str) -> None:
    """Signed in as `email`, on `path`, its event stream open."""
    mark_event_stream_open(page)
    page.goto(f"{stack.base}/login?next={path}")
    page.locator('input[name="email"]').fill(email)
    page.locator('input[name="password"]').fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{stack.base}{path}")
    page.wait_for_function("() => window.__sseOpen === true", timeout=LIVE)




def create_monitor(stack, token: str, conversation: str, description: str, url: str) -> str:
    answer = requests.post(f"{stack.base}/api/tool/monitor", headers={"Authorization": f"Bearer {token}"},
                           timeout=15, json={
                               "action": "monitor_create", "context": {"conversation_id": conversation},
                               "arguments": {"description": description, "source": {"type": "page", "url": url},
                                             "check": {"type": "change"}, "interval": "1s"}}).json()
    assert answer["ok"], answer
    return answer["result"]["monitor_id"]


def test_live_monitors_page_shows_new_monitor_and_conversation_from_the_empty_state(page: Page, vigil_stack, pages,
                                                                                  screenshots):
    stack = vigil_stack
    email, token = new_account(stack)
    url = pages.set("/live-first", "<h1>Build</h1><p>running</p>")
    errors = console_errors(page)
    signed_in(page, stack, email, "/settings/monitors")
    empty = page.get_by_text("No monitors yet.")
    expect(empty).to_be_visible()
    expect(page.locator("aside.sidebar li.empty")).to_have_text("No conversations yet.")
    shoot(page, screenshots, "live-monitors-empty")
    documents = watch_for_reloads(page)

    # An agent creates the first monitor, in a conversation that is new too.
    first = create_monitor(stack, token, "live-first-conversation", "the build finishes (live)", url)
    row = page.locator(f"table.monitors tbody#monitors tr#monitor-{first}")
    expect(row).to_be_visible(timeout=LIVE)
    expect(row.locator("td.description a")).to_have_text("the build finishes (live)")
    expect(empty).to_have_count(0)
    sidebar = page.locator("aside.sidebar ul.conversations li")
    expect(sidebar).to_have_count(1, timeout=LIVE)
    expect(sidebar.first.locator("a")).to_have_text("live-first-conversation")
    expect(sidebar.first.locator(".watching")).to_be_visible(timeout=LIVE)

    # The row that arrived live keeps updating live: its quiet checks count up.
    checked = row.locator("td.last-checked")
    count = checked.get_attribute("data-check-count")
    expect(checked).not_to_have_attribute("data-check-count", count, timeout=LIVE)

    # A second one, in another new conversation, goes to the top of the table and of the sidebar.
    second = create_monitor(stack, token, "live-second-conversation", "the release is tagged (live)", url)
    rows = page.locator("tbody#monitors tr.monitor")
    expect(rows).to_have_count(2, timeout=LIVE)
    expect(rows.first).to_have_attribute("id", f"monitor-{second}")
    expect(sidebar).to_have_count(2, timeout=LIVE)
    expect(sidebar.first.locator("a")).to_have_text("live-second-conversation")
    assert_not_reloaded(page, documents)
    assert errors == [], errors
    shoot(page, screenshots, "live-monitors", no_sideways=False)

    # Loaded afresh, the page shows what arrived live, in the same order.
    page.reload()
    expect(page.locator("tbody#monitors tr.monitor").first).to_have_attribute("id", f"monitor-{second}")
    expect(page.locator("aside.sidebar ul.conversations li")).to_have_count(2)


def test_live_tokens_page_lists_tokens_made_in_another_tab_and_by_the_cli(page: Page, vigil_stack, screenshots):
    stack = vigil_stack
    email, _ = new_account(stack)
    errors = console_errors(page)
    signed_in(page, stack, email, "/settings/tokens")
    rows = page.locator("tbody#tokens tr[id^=token-]")
    expect(rows).to_have_count(1)
    documents = watch_for_reloads(page)

    other = page.context.new_page()  # another tab of the same browser
    other.goto(f"{stack.base}/settings/tokens")
    other.locator('input[name="label"]').fill("made in the other tab")
    other.get_by_role("button", name="Create a token").click()
    secret = other.locator("#new-token-value").input_value()
    assert secret
    other.close()
    expect(rows).to_have_count(2, timeout=LIVE)
    expect(rows.last).to_contain_text("made in the other tab")

    printed = vigil("token", "create", "--user", email, "--label", "made by the CLI", env=stack.env)
    expect(rows).to_have_count(3, timeout=LIVE)
    expect(rows.last).to_contain_text("made by the CLI")
    html = page.content()
    assert secret not in html and printed.strip().splitlines()[-1] not in html
    assert_not_reloaded(page, documents)
    assert errors == [], errors
    shoot(page, screenshots, "live-tokens")

    # The live row's Revoke works like any other (a form post, which loads the page as it always has).
    page.once("dialog", lambda dialog: dialog.accept())
    rows.last.get_by_role("button", name="Revoke").click()
    expect(page.locator("tbody#tokens tr", has_text="made by the CLI")).to_have_count(0)
    expect(rows).to_have_count(2)


def test_live_devices_page_shows_a_device_paired_from_the_empty_state(page: Page, vigil_stack, tmp_path):
    stack = vigil_stack
    email, _ = new_account(stack)
    signed_in(page, stack, email, "/settings/devices")
    expect(page.locator("tbody#devices tr.empty")).to_have_text("No device paired yet.")
    documents = watch_for_reloads(page)

    code = vigil("device", "pair-code", "--user", email, "--name", "live-box", env=stack.env).split()[-1]
    paired = subprocess.run([VIGIL, "runner", "pair", "--server", stack.base, "--code", code, "--state-dir",
                             str(tmp_path / "runner")], capture_output=True, text=True, timeout=30)
    assert paired.returncode == 0, paired.stdout + paired.stderr
    row = page.locator("tbody#devices tr.device")
    expect(row).to_have_count(1, timeout=LIVE)
    expect(row.locator("td.name")).to_contain_text("live-box")
    expect(page.locator("tbody#devices tr.empty")).to_have_count(0)
    assert re.fullmatch(r"device-\d+", row.get_attribute("id"))
    assert_not_reloaded(page, documents)


def tool_call(stack, token: str, conversation: str, action: str, arguments: dict | None = None) -> dict:
    answer = requests.post(f"{stack.base}/api/tool/monitor", headers={"Authorization": f"Bearer {token}"},
                           timeout=15, json={"action": action, "context": {"conversation_id": conversation},
                                             **({"arguments": arguments} if arguments else {})}).json()
    assert answer["ok"], answer
    return answer["result"]


def test_live_conversation_page_takes_its_first_monitor_and_its_link_cards(page: Page, vigil_stack, pages,
                                                                         screenshots):
    stack = vigil_stack
    email, token = new_account(stack)
    url = pages.set("/live-conversation", "<h1>Build</h1><p>running</p>")
    tool_call(stack, token, "live-cards", "monitor_list")  # the agent names it: a conversation with no monitor
    tool_call(stack, token, "live-cards-other", "monitor_list")
    errors = console_errors(page)
    signed_in(page, stack, email, "/settings/monitors")
    other = page.context.new_page()  # another conversation's page, open in another tab
    mark_event_stream_open(other)
    other.goto(f"{stack.base}/settings/monitors")
    other.get_by_role("link", name="live-cards-other").click()
    other.wait_for_function("() => window.__sseOpen === true", timeout=LIVE)
    page.get_by_role("link", name="live-cards", exact=True).click()
    page.wait_for_function("() => window.__sseOpen === true", timeout=LIVE)
    none = page.locator("main p.empty", has_text="None.")
    expect(none).to_be_visible()
    documents = watch_for_reloads(page)

    first = create_monitor(stack, token, "live-cards", "the build finishes (conversation)", url)
    row = page.locator(f"main table.monitors tbody tr#monitor-{first}")
    expect(row).to_be_visible(timeout=LIVE)
    expect(none).to_have_count(0)
    hook = tool_call(stack, token, "live-cards", "monitor_create", {
        "description": "the deploy posts back (conversation)", "source": {"type": "webhook"}})["monitor_id"]
    expect(page.locator(f"section.trigger-card#trigger-{hook} .trigger-url")).to_contain_text("/api/triggers/",
                                                                                            timeout=LIVE)
    asked = tool_call(stack, token, "live-cards", "monitor_create", {
        "description": "ship it? (conversation)", "source": {"type": "approval", "question": "Ship the release?"}})
    card = page.locator(f"section.approval-card#approval-{asked['monitor_id']}")
    expect(card.locator(".approval-url")).to_have_text(asked["approval_url"], timeout=LIVE)
    expect(card.locator(".approval-question")).to_have_text("Ship the release?")
    rows = page.locator("main table.monitors tbody tr.monitor")
    expect(rows).to_have_count(3, timeout=LIVE)
    expect(rows.first).to_have_attribute("id", f"monitor-{asked['monitor_id']}")  # the newest at the top

    # The other conversation's page took none of it.
    expect(other.locator("main p.empty", has_text="None.")).to_be_visible()
    assert other.locator("main section.trigger-card, main section.approval-card, main tr.monitor").count() == 0
    other.close()
    assert_not_reloaded(page, documents)
    assert errors == [], errors
    shoot(page, screenshots, "live-conversation-cards", no_sideways=True)

    # Loaded afresh, the page shows the same cards and rows.
    page.reload()
    expect(page.locator("main table.monitors tbody tr.monitor")).to_have_count(3)
    expect(page.locator(f"#trigger-{hook}, #approval-{asked['monitor_id']}")).to_have_count(2)


def test_live_tokens_page_drops_a_token_revoked_in_another_tab(page: Page, vigil_stack):
    stack = vigil_stack
    email, _ = new_account(stack)
    vigil("token", "create", "--user", email, "--label", "revoked elsewhere", env=stack.env)
    errors = console_errors(page)
    signed_in(page, stack, email, "/settings/tokens")
    rows = page.locator("tbody#tokens tr[id^=token-]")
    expect(rows).to_have_count(2)
    documents = watch_for_reloads(page)

    other = page.context.new_page()
    other.goto(f"{stack.base}/settings/tokens")
    other.once("dialog", lambda dialog: dialog.accept())
    other.locator("tbody#tokens tr", has_text="revoked elsewhere").get_by_role("button", name="Revoke").click()
    expect(other.locator("tbody#tokens tr", has_text="revoked elsewhere")).to_have_count(0)
    other.close()
    expect(page.locator("tbody#tokens tr", has_text="revoked elsewhere")).to_have_count(0, timeout=LIVE)
    expect(rows).to_have_count(1)
    assert_not_reloaded(page, documents)
    assert errors == [], errors
