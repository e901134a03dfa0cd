"""status, new_items, regex and cel checks through the tool endpoint and the worker: one wake per fact."""

from __future__ import annotations

import json

import pytest

from models.tables import Message, Monitor, Wake
from tests.integration.helpers import db, tool


def create(client, token, url, check, source_type="json", **extra) -> str:
    args = {"description": "watch it", "source": {"type": source_type, "url": url}, "check": check,
            "on_match": "Tell the user.", "interval": "5m", "max_wakes": 10, **extra}
    body = tool(client, token, "monitor_create", args).json()
    assert body["ok"], body
    return body["result"]["monitor_id"]


def wakes(monitor_id: str) -> list[tuple[str, str]]:
    """(dedupe_key, text) of each wake, oldest first."""
    with db():
        rows = (Wake.select(Wake.dedupe_key, Message.content).join(Message, on=(Wake.message == Message.id))
                .where(Wake.monitor == monitor_id).order_by(Wake.id).tuples())
        return list(rows)


def monitor(monitor_id: str) -> Monitor:
    with db():
        return Monitor.get_by_id(monitor_id)


def test_status_wakes_on_entering_a_state_that_matters(client, owner, pages, run_due_checks):
    def publish(state, **more):
        return pages.set_json("/ci.json", json.dumps({"run": {"status": state, **more}}))

    check = {"type": "status", "value_path": "data.run.status", "values": ["success", "failure"]}
    monitor_id = create(client, owner[1], publish("queued"), check)
    publish("running")
    run_due_checks()
    assert wakes(monitor_id) == [], "a state that does not matter never wakes"
    publish("success")
    run_due_checks()
    [(key, text)] = wakes(monitor_id)
    assert key == "status:1:success" and "status is now 'success' (was 'running')" in text
    publish("success", attempt=2)
    run_due_checks()
    assert len(wakes(monitor_id)) == 1, "staying in the state is not a new fact"
    publish("running")
    run_due_checks()
    publish("success")
    run_due_checks()
    assert [key for key, _ in wakes(monitor_id)] == ["status:1:success", "status:2:success"]


def test_status_path_gone_is_an_error_not_a_wake(client, owner, pages, run_due_checks):
    url = pages.set_json("/ci.json", json.dumps({"status": "running"}))
    monitor_id = create(client, owner[1], url, {"type": "status", "value_path": "status", "values": ["done"]})
    pages.set_json("/ci.json", json.dumps({"state": "done"}))
    run_due_checks()
    watched = monitor(monitor_id)
    assert "value_path 'status' is gone" in watched.last_error.lower() and watched.failure_count == 1
    assert wakes(monitor_id) == []


def test_new_items_wake_once_per_new_item(client, owner, pages, run_due_checks):
    def publish(*ids):
        issues = [{"id": i, "title": f"Issue {i}", "html_url": f"https://example.com/{i}"} for i in ids]
        return pages.set_json("/issues.json", json.dumps({"issues": issues}))

    monitor_id = create(client, owner[1], publish(1, 2), {"type": "new_items", "items_path": "issues"})
    publish(3, 1, 2)
    run_due_checks()
    [(key, text)] = wakes(monitor_id)
    assert key.startswith("new_items:1:") and "Issue 3 — https://example.com/3" in text and "Issue 1" not in text
    publish(3, 2)
    run_due_checks()
    publish(3, 1, 2)
    run_due_checks()
    assert len(wakes(monitor_id)) == 1, "an item that dropped off and came back is not new"
    publish(4, 3, 1, 2)
    run_due_checks()
    assert len(wakes(monitor_id)) == 2 and "Issue 4" in wakes(monitor_id)[1][1]


def test_regex_wakes_when_the_pattern_starts_matching(client, owner, pages, run_due_checks):
    def publish(stock, noise=""):
        return pages.set("/item.html", f"<html><body><p>{stock}</p><footer>{noise}</footer></body></html>")

    check = {"type": "regex", "pattern": r"(?i)in stock: \d+"}
    monitor_id = create(client, owner[1], publish("Sold out"), check, source_type="page")
    publish("Sold out", "updated")
    run_due_checks()
    assert wakes(monitor_id) == []
    publish("In stock: 4")
    run_due_checks()
    [(key, text)] = wakes(monitor_id)
    assert key == "regex:1:In stock: 4" and "the pattern matches 'In stock: 4'" in text
    publish("In stock: 4", "updated")
    run_due_checks()
    assert len(wakes(monitor_id)) == 1, "still matching is not a new fact"
    publish("Sold out")
    run_due_checks()
    publish("In stock: 4")
    run_due_checks()
    assert [key for key, _ in wakes(monitor_id)] == ["regex:1:In stock: 4", "regex:2:In stock: 4"]


def test_cel_wakes_when_the_condition_becomes_true(client, owner, pages, run_due_checks):
    def publish(**data):
        return pages.set_json("/deploy.json", json.dumps(data))

    check = {"type": "cel", "expr": "has(data.state) && data.state == 'done' && data.ok > previous.ok"}
    monitor_id = create(client, owner[1], publish(state="pending", ok=1), check)
    publish(state="pending", ok=2)
    run_due_checks()
    assert wakes(monitor_id) == []
    publish(state="done", ok=3)
    run_due_checks()
    [(key, text)] = wakes(monitor_id)
    assert key.startswith("cel:1:") and "the condition is now true" in text
    publish(state="done", ok=4)
    run_due_checks()
    assert len(wakes(monitor_id)) == 1, "staying true is not a new fact"
    publish(state="done", ok=4, note="same count")
    run_due_checks()
    publish(state="done", ok=5)
    run_due_checks()
    assert len(wakes(monitor_id)) == 2, "false, then true again, is a new fact"


def test_cel_missing_field_is_an_error_not_a_wake(client, owner, pages, run_due_checks):
    url = pages.set_json("/deploy.json", json.dumps({"state": "pending"}))
    monitor_id = create(client, owner[1], url, {"type": "cel", "expr": "data.state == 'done'"})
    pages.set_json("/deploy.json", json.dumps({"phase": "done"}))
    run_due_checks()
    watched = monitor(monitor_id)
    assert "guard it with has(data.state)" in watched.last_error.lower() and watched.failure_count == 1
    assert wakes(monitor_id) == []


@pytest.mark.parametrize("check, fix", [
    ({"type": "regex", "pattern": "(unclosed"}, "check.pattern is not a valid regular expression"),
    ({"type": "cel", "expr": "data.state =="}, "check.expr is not valid CEL"),
    ({"type": "status", "value_path": "state", "values": []}, "check.values must be a non-empty list"),
    ({"type": "new_items", "items_path": "a..b"}, "check.items_path is not usable"),
])
def test_bad_checks_are_refused_with_what_to_fix(client, owner, pages, check, fix):
    url = pages.set_json("/x.json", json.dumps({"state": "x"}))
    args = {"description": "watch it", "source": {"type": "json", "url": url}, "check": check}
    body = tool(client, owner[1], "monitor_create", args).json()
    assert body["ok"] is False and fix in body["error"], body


def test_content_that_does_not_fit_the_check_refuses_at_create(client, owner, pages):
    url = pages.set_json("/x.json", json.dumps({"state": "x"}))
    args = {"description": "watch it", "source": {"type": "json", "url": url},
            "check": {"type": "cel", "expr": "data.state"}}
    body = tool(client, owner[1], "monitor_create", args).json()
    assert body["ok"] is False and "the condition must be true or false" in body["error"].lower(), body
