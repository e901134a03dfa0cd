"""Each seed's guard for its own sources (issue 27): seed 001's daily fire cap ends only its watches (document,
time, tool) and counts only their fires; seed 000's sources keep the hourly cap alone, which pauses and can be
resumed. (Seed 002's streams have neither: tests/integration/test_runner_api.py.)"""

from __future__ import annotations

from tests.integration.helpers import monitor_row, tool, wakes
from tests.integration.test_documents import DONE, put, watch
from tests.integration.test_time_watches import time_watch
from tests.integration.test_triggers import create as trigger_link, path_of


def deliver(client, link: dict, n: int) -> int:
    return client.post(path_of(link["url"]), json={"status": "running", "step": n},
                       headers={"Idempotency-Key": f"step-{n}"}).status_code


def sources(monitor_id: str) -> list[str]:
    return [w.metadata["wake"]["source"] for w in wakes(monitor_id)]


def test_trigger_link_with_25_deliveries_in_a_day_is_not_ended_and_pauses_past_the_hourly_cap(client, owner, drain,
                                                                                              reconfigure):
    reconfigure(MONITOR_MAX_WAKES=100, MONITOR_MAX_WAKES_PER_HOUR=26)  # the daily cap stays at its 20
    link = trigger_link(client, owner[1], description="CI reports its progress", max_wakes=100)
    for n in range(25):
        assert deliver(client, link, n) == 202
    drain()
    assert sources(link["monitor_id"]) == ["trigger"] * 25
    assert monitor_row(link["monitor_id"]).status == "active"

    assert deliver(client, link, 25) == 202 and deliver(client, link, 26) == 202  # not a 404: the link lives
    drain()
    assert sources(link["monitor_id"]) == ["trigger"] * 26 + ["monitor_paused"]
    row = monitor_row(link["monitor_id"])
    assert row.status == "paused" and "more than 26 times in an hour" in row.last_error
    response = client.post(f"/api/monitors/{link['monitor_id']}/resume",
                           headers={"Authorization": f"Bearer {owner[1]}"})
    assert response.json()["status"] == "active"  # seed 000's guard: a pause the owner can lift


def test_document_and_time_watches_still_end_in_error_past_the_daily_cap_and_count_only_their_fires(
        client, owner, drain, run_due_checks, reconfigure):
    reconfigure(MONITOR_MAX_FIRES_PER_CONVERSATION_DAY=2, MONITOR_MAX_WAKES=100, MONITOR_MAX_WAKES_PER_HOUR=100)
    link = trigger_link(client, owner[1], max_wakes=100)
    for n in range(5):  # the trigger link's fires are not seed 001's: they don't use up the conversation's two
        assert deliver(client, link, n) == 202
    drain()
    assert len(wakes(link["monitor_id"])) == 5
    watches = [watch(client, owner[1], DONE, item_id=f"job-{n}")["monitor_id"] for n in range(3)]
    for n in range(2):
        put(client, owner[1], f"transcription_jobs/job-{n}", {"status": "done"})
        drain()
    assert [sources(m) for m in watches[:2]] == [["monitor"], ["monitor"]]

    put(client, owner[1], "transcription_jobs/job-2", {"status": "done"})
    drain()
    over = monitor_row(watches[2])
    assert over.status == "error" and "woken 2 times in the last 24 hours" in over.last_error
    assert sources(watches[2]) == ["monitor_error"]

    timer = time_watch(client, owner[1], delay="90s")
    assert run_due_checks(120) == 1
    assert monitor_row(timer["monitor_id"]).status == "error" and sources(timer["monitor_id"]) == ["monitor_error"]

    assert deliver(client, link, 5) == 202  # the trigger link is not ended by the conversation's cap either
    drain()
    assert sources(link["monitor_id"]) == ["trigger"] * 6 and monitor_row(link["monitor_id"]).status == "active"


def test_page_monitor_fires_past_the_daily_cap_and_pauses_past_the_hourly_cap(client, owner, pages, run_due_checks,
                                                                             reconfigure):
    reconfigure(MONITOR_MAX_FIRES_PER_CONVERSATION_DAY=2, MONITOR_MAX_WAKES_PER_HOUR=3)
    url = pages.set("/flap", "<p>0</p>")
    body = tool(client, owner[1], "monitor_create", {"description": "the page changes", "interval": "5m",
                                                     "source": {"type": "page", "url": url}, "max_wakes": 10}).json()
    assert body["ok"], body
    monitor_id = body["result"]["monitor_id"]
    for n in range(1, 5):
        pages.set("/flap", f"<p>{n}</p>")
        run_due_checks()
    assert sources(monitor_id) == ["monitor"] * 3 + ["monitor_paused"]
    row = monitor_row(monitor_id)
    assert row.status == "paused" and "more than 3 times in an hour" in row.last_error

