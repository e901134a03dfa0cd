"""What e2e tests read back through Vigil's REST API, beside what the browser shows."""

from __future__ import annotations

import time

import requests


def created(stack, conversation: str, arguments: dict) -> dict:
    """monitor_create through the tool endpoint, as an agent calls it; the tool's result."""
    response = requests.post(f"{stack.base}/api/tool/monitor", headers=stack.auth, timeout=15, json={
        "action": "monitor_create", "context": {"conversation_id": conversation, "channel": "chat"},
        "arguments": arguments})
    response.raise_for_status()
    body = response.json()
    assert body["ok"], body
    return body["result"]


def created_monitor(stack, conversation: str, arguments: dict) -> str:
    """created(); the new monitor's id."""
    return created(stack, conversation, arguments)["monitor_id"]


def api_monitor(stack, monitor_id: str) -> dict:
    """One monitor as GET /api/monitors lists it (every status)."""
    response = requests.get(f"{stack.base}/api/monitors", headers=stack.auth, params={"status": "all"}, timeout=10)
    response.raise_for_status()
    [monitor] = [m for m in response.json()["monitors"] if m["monitor_id"] == monitor_id]
    return monitor


def wake_messages(stack, conversation: str) -> list[dict]:
    """The conversation's wake messages, oldest first; none while the conversation does not exist yet."""
    response = requests.get(f"{stack.base}/api/conversations/{conversation}/messages", headers=stack.auth,
                            timeout=10)
    if response.status_code == 404:
        return []
    response.raise_for_status()
    return [m for m in response.json()["messages"] if m["role"] == "wake"]


def wait_for(what: str, predicate, timeout: float = 30, interval: float = 0.2):
    """Polls until `predicate()` is truthy and returns it; fails naming `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
