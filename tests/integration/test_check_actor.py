"""The check actor through the real scheduler claim: quiet checks, changes, wakes once per fact."""

from __future__ import annotations

import json
from datetime import timedelta

from adapters.events import decoded
from models import utcnow
from models.claims import claim_due
from models.tables import MonitorRun
from tasks.checks import check_monitors
from tests.integration.helpers import db, monitor_row, tool, wakes

PAGE = "<html><body><p id='price'>Price: ${price}</p><footer>{noise}</footer></body></html>"


def quote(price: str, noise: str = "") -> str:
    return PAGE.replace("{price}", price).replace("{noise}", noise)


def make_monitor(client, token, url, **arguments) -> str:
    args = {"description": "ACMEB below 90", "source": {"type": "page", "url": url, "selector": "#price"},
            "check": {"type": "threshold", "op": "<", "value": 90}, "on_match": "Tell the user.",
            "interval": "5m", **arguments}
    body = tool(client, token, "monitor_create", args).json()
    assert body["ok"], body
    return body["result"]["monitor_id"]


def runs(monitor_id: str) -> int:
    """The events the checks after the first wrote (the first check's baseline is an event of its own)."""
    with db():
        return MonitorRun.select().where((MonitorRun.monitor == monitor_id)
                                         & MonitorRun.kind.not_in(["baseline", "armed"])).count()


def test_unchanged_page_is_a_quiet_check(client, owner, pages, run_due_checks):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    for _ in range(3):
        assert run_due_checks() == 1
    monitor = monitor_row(monitor_id)
    assert monitor.check_count == 4 and monitor.last_error == ""
    assert runs(monitor_id) == 0 and wakes(monitor_id) == []
    assert pages.hits["/q"] == 4


def test_same_text_in_different_markup_is_quiet(client, owner, pages, run_due_checks):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")), source={
        "type": "page", "url": pages.url("/q")}, check={"type": "change"})
    pages.set("/q", quote("95.10").replace("<p id='price'>", "<p id='price' class='x'>"))
    run_due_checks()
    assert runs(monitor_id) == 0 and wakes(monitor_id) == []
    assert monitor_row(monitor_id).check_count == 2


def test_crossing_wakes_once_with_what_was_found(client, owner, pages, run_due_checks):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")), max_wakes=3)
    pages.set("/q", quote("89.50"))
    run_due_checks()
    [wake] = wakes(monitor_id)
    assert "89.50 is below 90 (was 95.10)" in wake.content and "Tell the user." in wake.content
    assert wake.role == "wake"
    assert wake.metadata["wake"] == {"source": "monitor", "ref_id": monitor_id, "description": "ACMEB below 90",
                                     "dedupe_key": wake.metadata["wake"]["dedupe_key"]}
    pages.set("/q", quote("88.00"))
    run_due_checks()
    assert len(wakes(monitor_id)) == 1, "staying below must not fire again"
    pages.set("/q", quote("91.00"))
    run_due_checks()
    pages.set("/q", quote("89.00"))
    run_due_checks()
    assert len(wakes(monitor_id)) == 2, "back over and down again is a new fact"
    assert monitor_row(monitor_id).wakes_left == 1


def test_last_wake_ends_the_monitor_and_says_so(client, owner, pages, run_due_checks):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    pages.set("/q", quote("80"))
    run_due_checks()
    [wake] = wakes(monitor_id)
    assert "last wake" in wake.content
    monitor = monitor_row(monitor_id)
    assert monitor.status == "done" and monitor.wakes_left == 0
    pages.set("/q", quote("99"))
    assert run_due_checks() == 0


def test_page_change_wakes_exactly_once(client, owner, pages, run_due_checks):
    url = pages.set("/notes", "<h1>Release notes</h1><ul><li>1.0 first</li></ul>")
    monitor_id = make_monitor(client, owner[1], url, source={"type": "page", "url": url},
                              check={"type": "change"}, max_wakes=5)
    pages.set("/notes", "<h1>Release notes</h1><ul><li>1.1 second</li><li>1.0 first</li></ul>")
    run_due_checks()
    run_due_checks()
    [wake] = wakes(monitor_id)
    assert "+ 1.1 second" in wake.content
    assert runs(monitor_id) == 1


def test_same_message_processed_twice_wakes_once(client, owner, pages, run_due_checks, broker):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    pages.set("/q", quote("70"))
    with db():
        [(claimed_id, claim_seq)] = claim_due(utcnow() + timedelta(hours=1), 10)
    check_monitors.send([[claimed_id, claim_seq]])
    check_monitors.send([[claimed_id, claim_seq]])
    run_due_checks.drain()
    assert len(wakes(monitor_id)) == 1
    assert monitor_row(monitor_id).check_count == 2, "the duplicate must not count as a second check"


def test_concurrent_duplicates_of_one_claim_wake_once(client, owner, pages, run_due_checks):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    pages.set("/q", quote("70"))
    with db():
        [(claimed_id, claim_seq)] = claim_due(utcnow() + timedelta(hours=1), 10)
    for _ in range(6):
        check_monitors.send([[claimed_id, claim_seq]])
    run_due_checks.drain()
    assert len(wakes(monitor_id)) == 1 and monitor_row(monitor_id).check_count == 2


def test_lost_message_only_delays_the_check(client, owner, pages, run_due_checks):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    pages.set("/q", quote("70"))
    later = utcnow() + timedelta(hours=1)
    with db():
        assert len(claim_due(later, 10)) == 1  # claimed, but the message never reaches a worker
        assert claim_due(later, 10) == [], "a claimed monitor is leased until its next due time"
    assert wakes(monitor_id) == []
    assert run_due_checks(seconds_ahead=3600 + 600) == 1
    assert len(wakes(monitor_id)) == 1


def test_paused_monitor_is_not_checked_and_stale_claim_is_dropped(client, owner, pages, run_due_checks):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    pages.set("/q", quote("70"))
    with db():
        [(claimed_id, claim_seq)] = claim_due(utcnow() + timedelta(hours=1), 10)
    response = client.post(f"/api/monitors/{monitor_id}/pause", headers={"Authorization": f"Bearer {owner[1]}"})
    assert response.status_code == 200
    check_monitors.send([[claimed_id, claim_seq]])
    run_due_checks.drain()
    assert wakes(monitor_id) == [] and monitor_row(monitor_id).status == "paused"
    assert run_due_checks() == 0


def test_source_error_is_recorded_without_a_wake(client, owner, pages, run_due_checks):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    pages.set("/q", "<p>gone</p>", status=404)
    run_due_checks()
    monitor = monitor_row(monitor_id)
    assert "404" in monitor.last_error and monitor.failure_count == 1 and monitor.status == "active"
    assert wakes(monitor_id) == []
    pages.set("/q", quote("95.10"))
    run_due_checks()
    monitor = monitor_row(monitor_id)
    assert monitor.last_error == "" and monitor.failure_count == 0


def test_json_source_threshold_at_path(client, owner, pages, run_due_checks):
    url = pages.set_json("/run.json", json.dumps({"jobs": [{"remaining": 2}], "z": 1}))
    monitor_id = make_monitor(client, owner[1], url, source={"type": "json", "url": url},
                              check={"type": "threshold", "value_path": "jobs[0].remaining", "op": "==", "value": 0})
    pages.set_json("/run.json", json.dumps({"z": 1, "jobs": [{"remaining": 2}]}))
    run_due_checks()
    assert runs(monitor_id) == 0, "reordered keys are not a change"
    pages.set_json("/run.json", json.dumps({"jobs": [{"remaining": 0}], "z": 1}))
    run_due_checks()
    assert len(wakes(monitor_id)) == 1


def test_the_owners_pages_hear_each_recorded_check_as_the_row_now_stands(client, owner, pages, run_due_checks):
    """A change, an error, a quiet check that clears it and the last wake each publish monitor.updated built from
    the monitor as written (not read back): it must say what the row says; conversation.updated comes only when
    the status moves."""
    import hashlib

    import redis

    from models.monitors import event_payload, load_for_check
    from tests.conftest import TEST_DATABASE_URL, TEST_REDIS_URL

    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")), max_wakes=2)
    listener = redis.Redis.from_url(TEST_REDIS_URL).pubsub(ignore_subscribe_messages=True)
    # this Vigil's channels only: pub/sub is server-wide, and other Vigils (an e2e run, a bench) may share it
    listener.psubscribe(f"vigil:{hashlib.sha256(TEST_DATABASE_URL.encode()).hexdigest()[:12]}:*")
    listener.get_message(timeout=1)  # the subscription's confirmation

    def one_check(page: str, status: int = 200) -> tuple[list[tuple[str, dict]], dict]:
        pages.set("/q", page, status=status)
        assert run_due_checks() == 1
        seen = []
        while (message := listener.get_message(timeout=0.5)) is not None:
            seen.extend(decoded(message["data"]))
        with db():
            return seen, event_payload(load_for_check(monitor_id))

    fired, fired_row = one_check(quote("89.50"))
    failed, failed_row = one_check("<p>gone</p>", status=404)
    recovered, recovered_row = one_check(quote("89.50"))  # the bytes from before the error: a quiet check
    last, last_row = one_check(quote("95.10"))  # back above 90: the next crossing is the last wake
    final, final_row = one_check(quote("88.00"))
    listener.close()
    assert [name for name, _ in fired] == ["monitor.updated", "message.created"]
    assert fired[0][1] == fired_row and fired_row["wakes_left"] == 1 and fired_row["check_count"] == 2
    assert [name for name, _ in failed] == ["monitor.updated"]
    assert failed[0][1] == failed_row and "404" in failed_row["last_error"]
    assert [name for name, _ in recovered] == ["monitor.updated"] and recovered[0][1] == recovered_row
    assert recovered_row["last_error"] is None and recovered_row["wakes_left"] == 1
    assert [name for name, _ in last] == ["monitor.updated"] and last[0][1] == last_row
    assert last_row["last_error"] is None and last_row["status"] == "active"
    assert [name for name, _ in final] == ["monitor.updated", "conversation.updated", "message.created"]
    assert final[0][1] == final_row and final_row["status"] == "done" and final_row["wakes_left"] == 0
    assert final[1][1] == {"conversation_id": final_row["conversation_id"], "watching": False}


def test_a_change_of_a_long_page_is_told_against_its_stored_text(client, owner, pages, run_due_checks):
    """A state this long stays out of the claim read (models/claims.STATE_INLINE_CHARS) and is read when the check
    needs it: the wake still lists what came and went."""
    items = "".join(f"<li>entry {i}: nothing new here, the same as yesterday</li>" for i in range(60))
    url = pages.set("/long", f"<h1>Changelog</h1><ul>{items}</ul>")
    monitor_id = make_monitor(client, owner[1], url, source={"type": "page", "url": url},
                              check={"type": "change"}, max_wakes=5)
    assert len(monitor_row(monitor_id).check_state["text"]) > 2000
    run_due_checks()
    changed = items.replace("entry 7:", "entry 7b:")
    pages.set("/long", f"<h1>Changelog</h1><ul><li>entry 60: a new release</li>{changed}</ul>")
    run_due_checks()
    [wake] = wakes(monitor_id)
    assert "+ entry 60: a new release" in wake.content
    assert "- entry 7: nothing new here, the same as yesterday" in wake.content
