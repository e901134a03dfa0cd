"""Paired devices against a real Vigil (web, worker, scheduler) and a real `vigil runner` subprocess, the
"device" being this machine: Settings → Devices shows a device paired from it appear, go offline (SIGKILL) and
come back online, all without a reload; and the owner approves a command on the conversation page, after which
a line printed on the device wakes the open conversation live."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
from playwright.sync_api import Page, expect

from e2e.browser import (LIVE, assert_not_reloaded, log_in, mark_event_stream_open, open_conversation, shoot,
                         watch_for_reloads)
from tests.integration.helpers import wait_for
from tests.processes import VIGIL, processes_with, start, stop, vigil

pytestmark = pytest.mark.e2e

CONVERSATION = "e2e-device-approval"
PAIR_LINE = re.compile(r"^vigil runner pair --server (\S+) --code ([A-Z0-9]{4}(?:-[A-Z0-9]{4}){3})$")


def _seconds(stack, name: str) -> float:
    return float(stack.env[name])


def api_devices(stack) -> list[dict]:
    response = requests.get(f"{stack.base}/api/devices", headers=stack.auth, timeout=10)
    response.raise_for_status()
    return response.json()["devices"]


def api_device(stack, name: str) -> dict | None:
    return next((d for d in api_devices(stack) if d["name"] == name), None)


def wait(predicate, message: str, seconds: float = 30):
    return wait_for(predicate, seconds, message)


class Runner:
    """One paired device: its state directory and its `vigil runner` process, started and killed at will."""

    def __init__(self, state: Path) -> None:
        self.state, self.log = state, state.with_suffix(".log")
        self.process: subprocess.Popen | None = None

    def pair(self, server: str, code: str) -> None:
        paired = subprocess.run([VIGIL, "runner", "pair", "--server", server, "--code", code,
                                 "--state-dir", str(self.state)], capture_output=True, text=True, timeout=30)
        assert paired.returncode == 0, f"vigil runner pair failed: {paired.stdout}{paired.stderr}"
        assert "Paired as device" in paired.stdout, paired.stdout

    def start(self) -> None:
        assert self.process is None or self.process.poll() is not None, "the runner is already running"
        self.process = start([VIGIL, "runner", "--state-dir", str(self.state)], {}, self.log)

    def kill(self) -> None:
        """SIGKILL, as when the machine loses power: no goodbye to the server."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, chars: int = 2000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else "(no log)"


@pytest.fixture()
def runners(tmp_path):
    """Makes Runners; each is stopped (SIGTERM, which stops its commands) after the test, and any command
    left running under the test's directory is killed."""
    made: list[Runner] = []

    def new(name: str) -> Runner:
        made.append(Runner(tmp_path / f"runner-{name}"))
        return made[-1]

    yield new
    for runner in made:
        if runner.running():
            stop(runner.process)
        print(f"--- {runner.log} ---\n{runner.log_tail()}")  # shown when the test failed
    for _, pgid in processes_with(str(tmp_path)):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@contextmanager
def screenshot_on_failure(page: Page, folder: Path, name: str):
    """A failing block leaves a full-page screenshot of where the browser stood, e2e/screenshots/NAME-failed.png."""
    try:
        yield
    except BaseException:
        try:
            page.screenshot(path=str(folder / f"{name}-failed.png"), full_page=True)
        except Exception:  # noqa: BLE001 - the original failure matters more than the screenshot
            pass
        raise




def pair_from_page(page: Page, stack, name: str) -> tuple[str, str]:
    """Settings → Devices → "Pair a device": the page's own `vigil runner pair` line, as (server, code)."""
    page.locator('form.pair input[name="name"]').fill(name)
    page.get_by_role("button", name="Pair a device").click()
    card = page.locator("#pairing-code")
    expect(card).to_be_visible()
    first_line = card.locator("pre code").text_content().strip().splitlines()[0]
    found = PAIR_LINE.match(first_line)
    assert found, f"the pairing card shows no `vigil runner pair` line: {first_line!r}"
    server, code = found.groups()
    assert server == stack.base, f"the card points the runner at {server}, not at this Vigil ({stack.base})"
    return server, code


def open_devices_page(page: Page, stack) -> None:
    mark_event_stream_open(page)
    log_in(page, stack)
    expect(page).to_have_url(f"{stack.base}/settings/monitors")
    page.get_by_role("link", name="Devices").click()
    expect(page).to_have_url(f"{stack.base}/settings/devices")
    expect(page.locator("h1")).to_have_text("Devices")
    page.wait_for_function("() => window.__sseOpen === true", timeout=LIVE)


def device_row(page: Page, device_id: int):
    return page.locator(f"tbody#devices tr#device-{device_id}")


def test_devices_page_shows_paired_device_appear_go_offline_and_online_live(page: Page, vigil_stack, runners,
                                                                           screenshots):
    stack = vigil_stack
    online_seconds = _seconds(stack, "DEVICE_ONLINE_SECONDS")
    offline_seconds = _seconds(stack, "DEVICE_OFFLINE_SECONDS")
    open_devices_page(page, stack)
    with screenshot_on_failure(page, screenshots, "devices-presence"):
        server, code = pair_from_page(page, stack, "e2e-laptop")
        page.wait_for_function("() => window.__sseOpen === true", timeout=LIVE)  # the pairing form's answer reconnects
        rows = page.locator("tbody#devices tr.device")
        shown_before = rows.count()
        assert shown_before == len(api_devices(stack)), "the page does not list the owner's devices"
        documents = watch_for_reloads(page)

        # On the device: the card's own `vigil runner pair` line, then `vigil runner`; the owner waits here.
        runner = runners("laptop")
        runner.pair(server, code)
        runner.start()
        device = wait(lambda: (d := api_device(stack, "e2e-laptop")) and d["online"] and d,
                      f"the runner never came online:\n{runner.log_tail()}", seconds=LIVE / 1000)
        row = device_row(page, device["id"])  # a locator: found again after each live swap
        presence = row.locator(".presence")
        expect(row).to_have_count(1, timeout=LIVE)
        expect(presence).to_have_attribute("data-online", "yes", timeout=LIVE)
        expect(presence).to_have_text("online")
        expect(row.locator("td.name")).to_contain_text("e2e-laptop")
        expect(row.locator(".version")).to_have_text(device["runner_version"])
        expect(row.locator("select[name=approval_mode]")).to_have_value("ask")
        expect(rows).to_have_count(shown_before + 1)
        expect(page.locator("tbody#devices tr.empty")).to_have_count(0)
        assert_not_reloaded(page, documents)
        shoot(page, screenshots, "devices-online", end_width=375)

        # The machine dies (SIGKILL: no goodbye). Within the offline window the row turns offline by itself.
        runner.kill()
        killed = time.monotonic()
        expect(presence).to_have_attribute("data-online", "no", timeout=(offline_seconds + 6) * 1000)
        took = time.monotonic() - killed
        expect(presence).to_have_text("offline")
        assert took >= online_seconds - 2.5, f"offline {took:.1f}s after the kill: before its poll could lapse"
        assert not api_device(stack, "e2e-laptop")["online"]
        expect(rows).to_have_count(shown_before + 1)
        shoot(page, screenshots, "devices-offline", end_width=375)

        # The runner starts again: its first poll turns the same row online, still without a reload.
        runner.start()
        expect(presence).to_have_attribute("data-online", "yes", timeout=LIVE)
        expect(presence).to_have_text("online")
        expect(rows).to_have_count(shown_before + 1)
        assert api_device(stack, "e2e-laptop")["online"]
        assert runner.running(), runner.log_tail()
        assert_not_reloaded(page, documents)

        # Loaded afresh, the page says what the live updates said.
        page.goto(f"{stack.base}/settings/devices")
        expect(device_row(page, device["id"]).locator(".presence")).to_have_attribute("data-online", "yes")


def create_command_monitor(stack, description: str, device: str, command: str, cwd: str) -> dict:
    response = requests.post(f"{stack.base}/api/tool/monitor", headers=stack.auth, timeout=15, json={
        "action": "monitor_create", "context": {"conversation_id": CONVERSATION, "channel": "chat"},
        "arguments": {"description": description, "source": {
            "type": "command", "device": device, "mode": "stream", "command": command, "cwd": cwd}}})
    response.raise_for_status()
    body = response.json()
    assert body["ok"], body
    return body["result"]


def conversation_messages(stack) -> list[dict]:
    response = requests.get(f"{stack.base}/api/conversations/{CONVERSATION}/messages", headers=stack.auth,
                            timeout=10)
    if response.status_code == 404:
        return []
    response.raise_for_status()
    return response.json()["messages"]


def test_approving_command_on_conversation_page_arms_it_and_device_line_wakes_live(
        page: Page, vigil_stack, runners, screenshots, tmp_path):
    stack = vigil_stack
    name = "e2e-asks"
    code = vigil("device", "pair-code", "--user", stack.email, "--name", name, env=stack.env).split()[-1]
    runner = runners("asks")
    runner.pair(stack.base, code)
    runner.start()
    device = wait(lambda: (d := api_device(stack, name)) and d["online"] and d,
                  f"the runner never came online:\n{runner.log_tail()}", seconds=LIVE / 1000)
    assert device["approval_mode"] == "ask", device  # a new device asks before each command

    watched = tmp_path / "device-events.log"
    watched.write_text("")
    command = f"tail -n +1 -F {shlex.quote(str(watched))}"
    description = "the device prints an event (e2e)"
    result = create_command_monitor(stack, description, name, command, str(tmp_path))
    monitor_id = result["monitor_id"]
    assert result["status"] == "awaiting_approval", result
    assert result["approve_url"] == f"{stack.base}/commands/{monitor_id}", result

    mark_event_stream_open(page)
    pk = open_conversation(page, stack, CONVERSATION)
    page.wait_for_function("() => window.__sseOpen === true", timeout=LIVE)
    with screenshot_on_failure(page, screenshots, "command-approval"):
        # The card names the device and the exact command, and asks.
        card = page.locator(f"section#command-{monitor_id}")
        expect(card).to_be_visible()
        expect(card.locator("h3")).to_have_text("Approve this command?")
        expect(card.locator("dd.device")).to_have_text(name)
        assert card.locator("code.command").text_content() == command
        expect(card.locator("dd.cwd")).to_have_text(str(tmp_path))
        expect(card.locator("dd.mode")).to_contain_text("stream")
        approve, deny = card.get_by_role("button", name="Approve"), card.get_by_role("button", name="Deny")
        expect(approve).to_be_visible()
        expect(deny).to_be_visible()
        expect(page.locator(f"tr#monitor-{monitor_id} td.status")).to_have_attribute("data-status",
                                                                                   "awaiting_approval")
        messages = page.locator(f"ol#messages-{pk}")
        expect(messages.locator("li.message")).to_have_count(0)
        shoot(page, screenshots, "command-awaiting", end_width=375)

        # Nothing runs on the device before the owner says so.
        time.sleep(1)
        assert processes_with(str(watched)) == [], "the command ran before it was approved"
        assert conversation_messages(stack) == []
        documents = watch_for_reloads(page)

        approve.click()
        expect(card.locator("p.decision")).to_have_attribute("data-status", "active", timeout=LIVE)
        expect(card.locator("h3")).to_have_text("Command")
        expect(card.get_by_role("button")).to_have_count(0)
        expect(page.locator(f"tr#monitor-{monitor_id} td.status")).to_have_attribute("data-status", "active",
                                                                                   timeout=LIVE)
        wait(lambda: processes_with(str(watched)), f"the approved watcher never ran on the device:\n"
             f"{runner.log_tail()}", seconds=LIVE / 1000)

        # A line printed on the device arrives in the open conversation as a wake.
        line = f"hello-from-device {uuid.uuid4().hex[:8]}"
        with watched.open("a") as fh:
            fh.write(line + "\n")
        wake = messages.locator("li.message.wake")
        expect(wake).to_have_count(1, timeout=LIVE)
        expect(wake.locator(".badge")).to_have_text("Woken by command")
        content = wake.locator(".content")
        expect(content).to_contain_text(line)
        expect(content).to_contain_text(f'Watcher "{description}" printed')
        expect(card.locator("p.decision")).to_have_attribute("data-status", "active")
        assert_not_reloaded(page, documents)
        shoot(page, screenshots, "command-woken", end_width=375)

        [message] = [m for m in conversation_messages(stack) if m["role"] == "wake"]
        assert message["metadata"]["wake"]["source"] == "command" and line in message["content"], message
        expect(wake).to_have_attribute("id", f"message-{message['id']}")

    # Cancelled, the watcher's process group goes away on the device.
    cancelled = requests.post(f"{stack.base}/api/tool/monitor", headers=stack.auth, timeout=15, json={
        "action": "monitor_cancel", "context": {"conversation_id": CONVERSATION, "channel": "chat"},
        "arguments": {"monitor_id": monitor_id}}).json()
    assert cancelled["ok"] is True, cancelled
    wait(lambda: not processes_with(str(watched)), "the watcher outlived its monitor's cancel", seconds=LIVE / 1000)
