"""Seed 001's guardrails on arming monitors: armed monitors per conversation and per account (refused at the
boundary, freed by cancel), and depth-1 chaining through context.woken_by."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from models.guardrails import ONE_MORE
from models.tables import Monitor
from tests.httpd import Handler, serve
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


def woken(client, token, run_due_checks) -> int:
    """The id of a wake message: a time watch a minute out, fired."""
    first = arm(client, token)["result"]["monitor_id"]
    with db():
        Monitor.update(next_check_at=Monitor.created_at).where(Monitor.id == first).execute()
    run_due_checks(120)
    [wake] = wakes(first)
    return wake.id


def test_a_woken_run_arms_one_monitor_per_wake_and_a_second_from_the_same_wake_is_refused(client, owner,
                                                                                           run_due_checks):
    wake = woken(client, owner[1], run_due_checks)
    child = arm(client, owner[1], woken_by=wake)
    assert child["ok"] is True, child
    again = arm(client, owner[1], woken_by=wake)
    assert again["ok"] is False and ONE_MORE in again["error"] and f"context.woken_by {wake}" in again["error"]
    assert count(parent_message_id=wake) == 1
    assert tool(client, owner[1], "monitor_cancel", {"monitor_id": child["result"]["monitor_id"]}).json()["ok"]
    assert arm(client, owner[1], woken_by=wake)["ok"] is False  # counted per wake: the run armed its one already
    other = woken(client, owner[1], run_due_checks)
    assert arm(client, owner[1], woken_by=other)["ok"] is True  # another wake's run has its own one more
    assert count() == 4


class BothWaiting(Handler):
    """A page whose answer waits until two first checks are asking at once."""

    barrier: threading.Barrier

    def route_p(self, _: str) -> None:
        self.barrier.wait()
        self.send(200, b"<p>v1</p>", (("Content-Type", "text/html"),))


def test_two_creates_racing_from_the_same_wake_store_one_monitor(client, owner, run_due_checks):
    """Both creates pass the lineage check before either is stored (their first checks wait for each other): the
    database lets one in and the other is refused with the same sentence."""
    wake = woken(client, owner[1], run_due_checks)
    handler = type("Waiting", (BothWaiting,), {"barrier": threading.Barrier(2, timeout=20)})
    with serve(handler) as base, ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda path: client.post(
            "/api/tool/monitor", headers={"Authorization": f"Bearer {owner[1]}"},
            json={"action": "monitor_create", "context": {"conversation_id": "conv-1", "woken_by": wake},
                  "arguments": {"description": "the page changes", "interval": "5m",
                                "source": {"type": "page", "url": f"{base}/p/{path}"}}}).json(), ("a", "b")))
    assert sorted(answer["ok"] for answer in answers) == [False, True], answers
    [refused] = [answer for answer in answers if not answer["ok"]]
    assert ONE_MORE in refused["error"]
    assert count(parent_message_id=wake) == 1
