"""check.for and check.rearm through the real scheduler, worker, PostgreSQL and a local page server: a value
flapping around a threshold wakes once per real crossing, and an unchanged page still counts toward `for`."""

from __future__ import annotations

import pytest

from models.tables import Monitor, MonitorRun
from tests.integration.helpers import db, monitor_row, tool, wakes
from tests.integration.test_check_actor import make_monitor, quote


def events(client, token: str, monitor_id: str) -> list[dict]:
    response = client.get(f"/api/monitors/{monitor_id}/events", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    return response.json()["items"]


def reasons(client, token: str, monitor_id: str) -> list[str]:
    return [(item.get("data") or {}).get("reason", "") for item in events(client, token, monitor_id)
            if item["kind"] in ("changed", "fired")]


def test_for_three_wakes_once_after_three_holds_of_an_unchanged_page(client, owner, pages, run_due_checks):
    url = pages.set("/q", quote("95.10"))
    monitor_id = make_monitor(client, owner[1], url, check={"type": "threshold", "op": "<", "value": 90, "for": 3},
                              max_wakes=3)
    pages.set("/q", quote("89.50"))
    run_due_checks()
    run_due_checks()  # the same bytes: still evaluated, since a count is under way
    assert wakes(monitor_id) == []
    assert "89.50 is below 90, holding 2 of 3 (since " in reasons(client, owner[1], monitor_id)[0]
    run_due_checks()  # the same bytes again: the third hold in a row
    [wake] = wakes(monitor_id)
    assert "89.50 is below 90, held for 3 checks (since " in wake.content
    for _ in range(3):  # nothing pending now: unchanged checks are quiet again, and write no event
        run_due_checks()
    assert len(wakes(monitor_id)) == 1
    with db():
        stored = MonitorRun.select().where(MonitorRun.monitor == monitor_id).count()
    assert stored == 4, "baseline, holding 1 of 3, holding 2 of 3, fired; the quiet checks after wrote nothing"
    assert monitor_row(monitor_id).check_count == 7
    assert pages.hits["/q"] == 7


def test_for_a_dip_shorter_than_n_checks_does_not_wake(client, owner, pages, run_due_checks):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")),
                              check={"type": "threshold", "op": "<", "value": 90, "for": 3})
    for price in ("89.50", "89.50", "91", "89", "89"):
        pages.set("/q", quote(price))
        run_due_checks()
    assert wakes(monitor_id) == []
    assert "The count of 2 of 3 in a row starts again." in reasons(client, owner[1], monitor_id)[2]


def test_rearm_over_a_flapping_page_wakes_once_per_crossing_past_rearm(client, owner, pages, run_due_checks):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95")), max_wakes=5,
                              check={"type": "threshold", "op": "below", "value": 90, "rearm": 92})
    for price in ("90.10", "89.90", "91", "89.50", "92.50", "89"):
        pages.set("/q", quote(price))
        run_due_checks()
    fired = [wake.content for wake in wakes(monitor_id)]
    assert len(fired) == 2
    assert "89.90 is below 90" in fired[0] and "89 is below 90 (was 92.50)" in fired[1]
    said = reasons(client, owner[1], monitor_id)  # newest first
    assert "89.50 is below 90 again, but not re-armed: it must go above 92 first." in said
    assert "Changed, but 91 is not below 90; it re-arms once it goes above 92." in said


@pytest.mark.parametrize("check, words", [
    ({"type": "threshold", "op": "<", "value": 90, "for": 0}, "check.for must be a whole number"),
    ({"type": "threshold", "op": "<", "value": 90, "for": 101}, "check.for must be a whole number"),
    ({"type": "threshold", "op": "<", "value": 90, "for": 2.5}, "check.for must be a whole number"),
    ({"type": "threshold", "op": "<", "value": 90, "rearm": 85}, "check.rearm must be above check.value"),
    ({"type": "threshold", "op": ">", "value": 90, "rearm": 95}, "check.rearm must be below check.value"),
    ({"type": "threshold", "op": "==", "value": 90, "rearm": 95}, "check.rearm needs a direction"),
    ({"type": "regex", "pattern": "x", "rearm": 95}, "works on threshold checks only"),
    ({"type": "change", "for": 2}, "check.for counts checks in a row on which a condition holds"),
])
def test_bad_for_or_rearm_says_what_to_fix_and_creates_nothing(client, owner, pages, check, words):
    url = pages.set("/q", quote("95"))
    body = tool(client, owner[1], "monitor_create", {"description": "x", "source": {"type": "page", "url": url},
                                                     "check": check}).json()
    assert body["ok"] is False and words in body["error"] and body["error"].endswith("."), body
    with db():
        assert Monitor.select().count() == 0
    assert pages.hits.get("/q", 0) == 0
