"""Watches of an MCP connection's tools, against a real MCP server built with the official SDK (tests/mcp_server.py):
only the owner's session adds a connection; a read-only tool arms at once and fires through the real scheduler and
worker; one without readOnlyHint waits for the owner's approval; a destructive one is refused; a changed inputSchema
or a removed connection ends the watch and says so, and a name listed twice ends every watch of it as soon as Vigil
sees the listing; the bearer token never comes back."""

from __future__ import annotations

import pytest

from engine.schedule import JITTER_FRACTION, MAX_JITTER_SECONDS
from models.tables import McpConnection, Monitor
from tasks import mcp
from tests.integration.helpers import db, login, monitor_row, tool, wakes
from tests.mcp_server import serve_mcp

TOKEN = "mcp-test-token-SECRET-42"


@pytest.fixture()
def server():
    with serve_mcp(token=TOKEN) as running:
        yield running


def connect(client, csrf: str, url: str, name: str = "tickets", token: str | None = TOKEN):
    return client.post("/api/connections", headers={"X-CSRF-Token": csrf},
                       json={"name": name, "url": url, **({"bearer_token": token} if token else {})})


def watch(client, token: str, tool_name: str, arguments: dict, expr: str = "data.status == 'closed'", **extra):
    return tool(client, token, "monitor_create", {
        "description": f"{tool_name} says closed", "note": "Tell the user the ticket closed.",
        "source": {"type": "tool", "connection": "tickets", "tool": tool_name, "arguments": arguments},
        "check": {"type": "cel", "expr": expr}, **extra}).json()


def past_next_poll(monitor_id: str) -> int:
    """Seconds ahead that pass a watch's next poll however it was jittered: its interval, the most jitter, and the
    minute a poll that would land on minute :00 or :30 is moved by (engine/schedule.off_busy_minutes). 1,000 s
    fell short of that when the poll fell in such a minute: the test then failed ~15 minutes before one."""
    interval = monitor_row(monitor_id).interval_seconds
    return interval + int(min(interval * JITTER_FRACTION, MAX_JITTER_SECONDS)) + 61


def forget_listings() -> None:
    """The worker caches a connection's listing for up to one interval of real time; the scheduler here runs on
    a clock of the test's own, so the test lets that interval pass for the cache too."""
    with db():
        for row in McpConnection.select():
            mcp.forget(row.id)


def test_only_the_owners_session_adds_a_connection_and_its_token_never_comes_back(client, owner, server):
    refused = client.post("/api/connections", headers={"Authorization": f"Bearer {owner[1]}"},
                          json={"name": "tickets", "url": server.url})
    assert refused.status_code == 403
    csrf = login(client)
    added = connect(client, csrf, server.url)
    assert added.status_code == 201, added.text
    assert added.json()["has_token"] is True and set(added.json()["tools"]) >= {"get_status", "bump", "wipe"}
    listed = client.get("/api/connections")
    assert listed.status_code == 200 and [c["name"] for c in listed.json()["connections"]] == ["tickets"]
    assert client.get("/api/connections", headers={"Authorization": f"Bearer {owner[1]}"}).status_code == 403
    page = client.get("/settings/connections")
    for answer in (added, listed, page):
        assert TOKEN not in answer.text
    with db():
        assert TOKEN not in McpConnection.get().token_encrypted


def test_a_server_that_cant_be_reached_or_refuses_the_token_is_not_added(client, owner, server):
    csrf = login(client)
    wrong = connect(client, csrf, server.url, token="not-the-token")
    assert wrong.status_code == 400 and "not-the-token" not in wrong.text, wrong.text
    closed = connect(client, csrf, "http://127.0.0.1:9/mcp", name="gone")
    assert closed.status_code == 400 and "could not be added" in closed.json()["detail"]
    with db():
        assert McpConnection.select().count() == 0


def test_a_read_only_tool_arms_at_once_and_fires_once_through_the_scheduler(client, owner, server, run_due_checks):
    connect(client, login(client), server.url)
    server.status = "open"
    body = watch(client, owner[1], "get_status", {"ticket": "T-7"})
    assert body["ok"] is True and body["result"]["status"] == "active", body
    assert run_due_checks(1) == 1 and server.calls["get_status"] == 1  # the first poll: open, quiet
    assert wakes() == []
    server.status = "closed"
    run_due_checks(past_next_poll(body["result"]["monitor_id"]))
    [wake] = wakes(body["result"]["monitor_id"])
    assert "closed" in wake.content and wake.content.endswith("Tell the user the ticket closed.")
    assert monitor_row(body["result"]["monitor_id"]).status == "done"
    assert TOKEN not in wake.content


def test_a_tool_without_read_only_hint_waits_for_the_owners_approval(client, owner, server, run_due_checks):
    csrf = login(client)
    connect(client, csrf, server.url)
    body = watch(client, owner[1], "bump", {"n": 1}, expr="outputText != ''")
    assert body["ok"] is True and body["result"]["status"] == "awaiting_approval", body
    monitor_id = body["result"]["monitor_id"]
    assert body["result"]["approve_url"].endswith(f"/commands/{monitor_id}")
    run_due_checks(1)
    assert server.calls["bump"] == 0, "nothing runs before the owner approves"
    by_token = client.post(f"/api/monitors/{monitor_id}/approve", headers={"Authorization": f"Bearer {owner[1]}"})
    assert by_token.status_code == 403
    assert client.get(f"/commands/{monitor_id}").status_code == 200
    approved = client.post(f"/api/monitors/{monitor_id}/approve", headers={"X-CSRF-Token": csrf})
    assert approved.status_code == 200 and approved.json()["status"] == "active", approved.text
    run_due_checks(1)
    assert server.calls["bump"] == 1


def test_a_destructive_tool_an_unknown_one_and_bad_arguments_are_refused(client, owner, server):
    connect(client, login(client), server.url)
    cases = [("wipe", {}, "destructive"), ("nope", {}, "has no tool 'nope'"),
             ("get_status", {"ticket": ["T-1"]}, "must be a scalar"), ("get_status", {"other": 1}, "no parameter")]
    for name, arguments, said in cases:
        body = watch(client, owner[1], name, arguments)
        assert body["ok"] is False and said in body["error"], (name, body)
    missing = tool(client, owner[1], "monitor_create", {
        "description": "x", "source": {"type": "tool", "connection": "elsewhere", "tool": "get_status"}}).json()
    assert missing["ok"] is False and "no MCP connection 'elsewhere'" in missing["error"]
    with db():
        assert Monitor.select().count() == 0


def test_a_changed_input_schema_ends_the_watch_and_tells_once(client, owner, server, run_due_checks):
    connect(client, login(client), server.url)
    body = watch(client, owner[1], "get_status", {"ticket": "T-7"})
    monitor_id = body["result"]["monitor_id"]
    run_due_checks(1)
    server.reshape_get_status()
    forget_listings()
    run_due_checks(past_next_poll(monitor_id))
    monitor = monitor_row(monitor_id)
    assert monitor.status == "error" and "changed since it was armed" in monitor.last_error
    [told] = wakes(monitor_id)
    assert told.metadata["wake"]["source"] == "monitor_error"
    calls = server.calls["get_status"]
    run_due_checks(past_next_poll(monitor_id))
    assert server.calls["get_status"] == calls and len(wakes(monitor_id)) == 1


def test_a_name_listed_twice_ends_every_watch_of_it_at_the_poll_that_sees_it(client, owner, server, run_due_checks):
    connect(client, login(client), server.url)
    often = watch(client, owner[1], "get_status", {"ticket": "T-7"}, interval="5m")["result"]["monitor_id"]
    rarely = watch(client, owner[1], "get_status", {"ticket": "T-8"}, interval="6h")["result"]["monitor_id"]
    assert run_due_checks(1) == 2  # their first polls
    server.list_twice("get_status")
    forget_listings()
    assert run_due_checks(past_next_poll(often)) == 1  # only the frequent watch polls, and sees the listing
    ended = [monitor_row(often), monitor_row(rarely)]
    assert [m.status for m in ended] == ["error", "error"]
    assert ended[0].last_error == ended[1].last_error
    assert "lists two tools named 'get_status'" in ended[1].last_error and "stopped rather than guess" in \
        ended[1].last_error
    for monitor_id in (often, rarely):
        [told] = wakes(monitor_id)
        assert told.metadata["wake"]["source"] == "monitor_error" and "two tools named" in told.content
    assert server.calls["get_status"] == 2, "no tool runs once its name is listed twice"


def test_a_create_that_lists_a_name_twice_ends_the_watches_of_it_at_once(client, owner, server):
    connect(client, login(client), server.url)
    armed = watch(client, owner[1], "get_status", {"ticket": "T-7"}, interval="6h")["result"]["monitor_id"]
    server.list_twice("get_status")
    refused = watch(client, owner[1], "get_status", {"ticket": "T-9"})
    assert refused["ok"] is False and "lists two tools named 'get_status'" in refused["error"]
    monitor = monitor_row(armed)
    assert monitor.status == "error" and "stopped rather than guess" in monitor.last_error
    assert len(wakes(armed)) == 1
    assert watch(client, owner[1], "bump", {"n": 1}, expr="outputText != ''")["ok"] is True  # others stay watchable


def test_removing_the_connection_ends_its_watches(client, owner, server):
    csrf = login(client)
    connect(client, csrf, server.url)
    body = watch(client, owner[1], "get_status", {"ticket": "T-7"})
    assert client.delete("/api/connections/tickets", headers={"Authorization": f"Bearer {owner[1]}"}).status_code == 403
    assert client.delete("/api/connections/tickets", headers={"X-CSRF-Token": csrf}).status_code == 204
    monitor = monitor_row(body["result"]["monitor_id"])
    assert monitor.status == "error" and "was removed" in monitor.last_error
    assert len(wakes(body["result"]["monitor_id"])) == 1


def test_a_dry_run_calls_a_read_only_tool_once_and_stores_nothing(client, owner, server):
    """dry_run on an MCP connection's tool: one tools/call, what the condition makes of its answer now, and no
    monitor or wake; a tool that waits for the owner's approval is not called; the bearer token never shows."""
    from tests.integration.test_dry_run import rows

    connect(client, login(client), server.url)
    before = rows()
    server.status = "closed"
    closed = watch(client, owner[1], "get_status", {"ticket": "T-7"}, dry_run=True)
    server.status = "open"
    still_open = watch(client, owner[1], "get_status", {"ticket": "T-7"}, dry_run=True)
    unapproved = watch(client, owner[1], "bump", {"n": 1}, expr="outputText != ''", dry_run=True)
    assert closed["ok"] and still_open["ok"] and unapproved["ok"], (closed, still_open, unapproved)
    assert closed["result"]["would_fire"] is True and still_open["result"]["would_fire"] is False
    assert server.calls["get_status"] == 2 and server.calls["bump"] == 0
    assert any("approve" in note for note in unapproved["result"]["notes"])
    assert rows() == before
    for answer in (closed, still_open, unapproved):
        assert TOKEN not in str(answer)
