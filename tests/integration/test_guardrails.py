"""Seed 001's guardrails on arming monitors: armed monitors per conversation and per account (refused at the
boundary, freed by cancel), and depth-1 chaining through context.woken_by."""

from __future__ import annotations

from models.tables import Monitor
from tests.integration.helpers import db, tool, wakes


def arm(client, token, conversation: str = "conv-1", **context) -> dict:
    """A monitor that needs no first check: a time watch an hour out."""
    return client.post("/api/tool/monitor", headers={"Authorization": f"Bearer {token}"}, json={
        "action": "monitor_create", "context": {"conversation_id": conversation, **context},
        "arguments": {"description": "later", "source": {"type": "time", "delay": "1h"}}}).json()


def count(**where) -> int:
    with db():
        query = Monitor.select()
        for name, value in where.items():
            query = query.where(getattr(Monitor, name) == value)
        return query.count()


def test_conversation_limit_refuses_at_the_boundary_and_cancel_frees_a_slot(client, owner, reconfigure):
    reconfigure(MONITOR_MAX_ARMED_PER_CONVERSATION=3)
    created = [arm(client, owner[1])["result"]["monitor_id"] for _ in range(3)]
    refused = arm(client, owner[1])
    assert refused["ok"] is False
    assert "already has 3 armed monitors" in refused["error"] and "cancel one" in refused["error"]
    assert count() == 3
    assert arm(client, owner[1], "conv-2")["ok"] is True  # another conversation has slots of its own
    assert tool(client, owner[1], "monitor_cancel", {"monitor_id": created[0]}).json()["ok"] is True
    assert arm(client, owner[1])["ok"] is True


def test_account_limit_counts_every_conversation_of_the_account(client, owner, stranger, reconfigure):
    reconfigure(MONITOR_MAX_ARMED_PER_ACCOUNT=4)
    for n in range(4):
        assert arm(client, owner[1], f"c{n}")["ok"] is True
    refused = arm(client, owner[1], "c9")
    assert refused["ok"] is False and "This account already has 4 armed monitors" in refused["error"]
    assert arm(client, stranger[1], "c9")["ok"] is True  # the limit is the account's own
    paused = tool(client, owner[1], "monitor_list", conversation="c0").json()["result"]["monitors"][0]["monitor_id"]
    client.post(f"/api/monitors/{paused}/pause", headers={"Authorization": f"Bearer {owner[1]}"})
    assert arm(client, owner[1], "c9")["ok"] is False  # a paused monitor still holds its slot
    assert count(user=owner[0].id) == 4


def test_depth_one_chaining_arms_one_more_and_refuses_the_next(client, owner, pages, run_due_checks):
    url = pages.set("/p", "<p>v1</p>")
    first = tool(client, owner[1], "monitor_create", {"description": "the page changes", "interval": "5m",
                                                      "source": {"type": "page", "url": url}}).json()["result"]
    pages.set("/p", "<p>v2</p>")
    run_due_checks()
    [wake] = wakes(first["monitor_id"])
    child = arm(client, owner[1], woken_by=wake.id)
    assert child["ok"] is True, child
    listed = client.get("/api/monitors", headers={"Authorization": f"Bearer {owner[1]}"}).json()["monitors"]
    lineage = {m["monitor_id"]: m["lineage"] for m in listed}
    assert lineage[child["result"]["monitor_id"]] == {"depth": 1, "woken_by": wake.id}
    assert lineage[first["monitor_id"]] == {"depth": 0, "woken_by": None}

    with db():  # the child's own wake, as its time comes
        Monitor.update(next_check_at=Monitor.created_at).where(Monitor.id == child["result"]["monitor_id"]).execute()
    run_due_checks(0)
    [grandchild_wake] = wakes(child["result"]["monitor_id"])
    refused = arm(client, owner[1], woken_by=grandchild_wake.id)
    assert refused["ok"] is False and "chain one level deep" in refused["error"]
    assert count() == 2


def test_woken_by_must_be_a_wake_of_this_account(client, owner, stranger, pages, run_due_checks):
    url = pages.set("/p", "<p>v1</p>")
    first = tool(client, owner[1], "monitor_create", {"description": "x", "interval": "5m",
                                                      "source": {"type": "page", "url": url}}).json()["result"]
    pages.set("/p", "<p>v2</p>")
    run_due_checks()
    [wake] = wakes(first["monitor_id"])
    theirs = arm(client, stranger[1], woken_by=wake.id)
    assert theirs["ok"] is False and "is not a wake of this account" in theirs["error"]
    bad = client.post("/api/tool/monitor", headers={"Authorization": f"Bearer {owner[1]}"}, json={
        "action": "monitor_create", "context": {"conversation_id": "c", "woken_by": "the last one"},
        "arguments": {"description": "x", "source": {"type": "time", "delay": "1h"}}})
    assert bad.status_code == 400 and "woken_by" in bad.text
    assert count(user=stranger[0].id) == 0
