"""Time watches (seed 001): fire once at their moment through the real scheduler claim and check actor, say how
late when Vigil was down, and carry their note; bad times create nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest

from models import utcnow
from models.claims import claim_due
from models.tables import Monitor
from tasks.checks import check_monitors
from tests.integration.helpers import db, monitor_row, tool, wakes


def time_watch(client, token, **source) -> dict:
    body = tool(client, token, "monitor_create", {"description": "stand-up starts", "source": {"type": "time", **source},
                                                  "note": "Remind the user: bring the Q3 numbers.  (verbatim)"}).json()
    assert body["ok"] is True, body
    return body["result"]


def test_time_watch_fires_once_at_its_time_with_its_note(client, owner, run_due_checks):
    result = time_watch(client, owner[1], delay="90s")
    fire_at = monitor_row(result["monitor_id"]).next_check_at
    assert result["status"] == "active" and result["fire_at"].endswith("Z")
    assert abs((fire_at - utcnow()).total_seconds() - 90) < 5  # due at its time, not jittered
    assert run_due_checks(30) == 0  # not yet
    assert wakes(result["monitor_id"]) == []
    assert run_due_checks(70) == 1  # its moment has come
    [wake] = wakes(result["monitor_id"])
    assert wake.content.startswith("Time watch fired: stand-up starts")
    assert "Remind the user: bring the Q3 numbers.  (verbatim)" in wake.content and "late" not in wake.content
    assert wake.metadata["wake"]["source"] == "time" and wake.metadata["note"].endswith("(verbatim)")
    assert monitor_row(result["monitor_id"]).status == "done"
    assert run_due_checks(3600) == 0 and len(wakes(result["monitor_id"])) == 1


def test_time_watch_passed_while_vigil_was_down_fires_once_saying_how_late(client, owner, run_due_checks):
    result = time_watch(client, owner[1], fire_at=(utcnow() + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ"))
    with db():  # Vigil was down over its time: it is three hours past it when the scheduler runs again
        monitor = Monitor.get_by_id(result["monitor_id"])
        passed = utcnow() - timedelta(hours=3)
        Monitor.update(next_check_at=passed, source={**monitor.source, "fire_at": passed.strftime("%Y-%m-%dT%H:%M:%SZ")}) \
            .where(Monitor.id == monitor.id).execute()
    assert run_due_checks(0) == 1
    [wake] = wakes(result["monitor_id"])
    assert "hours late" in wake.content and "Vigil was not running" in wake.content
    assert wake.metadata["late_seconds"] > 3600


def test_time_watch_fires_once_when_its_claim_is_delivered_twice(client, owner):
    result = time_watch(client, owner[1], delay="2s")
    with db():
        Monitor.update(next_check_at=utcnow() - timedelta(seconds=1)).where(Monitor.id == result["monitor_id"]).execute()
        [claim] = claim_due(utcnow(), 10)
        check_monitors([list(claim)])
        check_monitors([list(claim)])  # the broker delivers the same message again
        [again] = claim_due(utcnow() + timedelta(hours=1), 10) or [None]  # done: never claimed again
    assert again is None
    assert len(wakes(result["monitor_id"])) == 1


@pytest.mark.parametrize("source, fix", [
    ({"fire_at": "2020-01-01T00:00:00Z"}, "has already passed"),
    ({"fire_at": "next tuesday"}, "not an ISO 8601 time"),
    ({"delay": "0"}, "source.delay must look like"),
    ({"delay": "-5m"}, "source.delay must look like"),
    ({"delay": "30d"}, "past the monitor's lifetime"),
    ({"fire_at": "2030-01-01T00:00:00Z", "delay": "5m"}, "not both"),
    ({}, "either fire_at"),
])
def test_time_watch_bad_time_is_one_sentence_and_nothing_is_created(client, owner, source, fix):
    body = tool(client, owner[1], "monitor_create", {"description": "x", "source": {"type": "time", **source}}).json()
    assert body["ok"] is False and fix in body["error"], body
    with db():
        assert Monitor.select().count() == 0


def test_time_watch_ignores_a_check_and_says_so(client, owner):
    body = tool(client, owner[1], "monitor_create", {"description": "x", "source": {"type": "time", "delay": "1h"},
                                                     "check": {"type": "change"}, "interval": "5m"}).json()
    assert body["ok"] is True and "takes no check or interval" in " ".join(body["result"]["notes"])


def test_note_is_replayed_in_a_page_monitors_wake(client, owner, pages, run_due_checks):
    url = pages.set("/p", "<p>v1</p>")
    body = tool(client, owner[1], "monitor_create", {"description": "the page changes", "interval": "5m",
                                                     "source": {"type": "page", "url": url},
                                                     "note": "Then open PR #12\nand re-run CI."}).json()
    pages.set("/p", "<p>v2</p>")
    run_due_checks()
    [wake] = wakes(body["result"]["monitor_id"])
    assert wake.content.endswith("Then open PR #12\nand re-run CI.")
    listed = tool(client, owner[1], "monitor_list").json()["result"]["monitors"]
    assert listed[0]["monitor_id"] == body["result"]["monitor_id"]
