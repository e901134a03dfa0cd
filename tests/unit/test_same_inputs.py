"""Which checks of a batch may take a quiet outcome instead of running the pipeline (tasks/checks): an outcome
serves the checks whose previous claim is no later than that of the check that found it, so each source's
monitors run latest previous claim first."""

from __future__ import annotations

from datetime import datetime, timedelta

from models.claims import Claimed
from tasks.checks import latest_first, read_after

T = datetime(2026, 12, 3, 6, 0)


def claimed(monitor_id: str, source: str, previous: datetime | None) -> Claimed:
    return Claimed(monitor_id, 2, 1, "conv", "active", source, '{"type": "change"}', "r", "c", None, "", 0, 2,
                   T + timedelta(minutes=5), 1, None, previous, None)


def test_an_outcome_serves_previous_claims_no_later_than_its_own():
    assert read_after(T, T) and read_after(T - timedelta(seconds=1), T)
    assert not read_after(T + timedelta(seconds=1), T), "fetched perhaps before this one's previous claim"
    assert read_after(None, T) and read_after(None, None), "no previous claim: any answer of the window serves"
    assert not read_after(T, None)


def test_each_sources_monitors_run_latest_previous_claim_first_sources_in_claim_order():
    x, y = '{"url": "https://x.example"}', '{"url": "https://y.example"}'
    batch = [claimed("x-early", x, T), claimed("y-none", y, None), claimed("x-none", x, None),
             claimed("y-late", y, T + timedelta(seconds=40)), claimed("x-late", x, T + timedelta(seconds=40)),
             claimed("x-late-too", x, T + timedelta(seconds=40))]
    ordered = [monitor.id for monitor in latest_first(batch)]
    assert ordered == ["x-late", "x-late-too", "x-early", "x-none", "y-late", "y-none"]
    # so the first of each source decides for all the others of its source
    for group in (ordered[:4], ordered[4:]):
        by_id = {monitor.id: monitor for monitor in batch}
        leader = by_id[group[0]]
        assert all(read_after(by_id[other].prev_checked_at, leader.prev_checked_at) for other in group[1:])


def test_a_batch_of_distinct_sources_is_left_as_claimed():
    batch = [claimed(f"m{i}", f'{{"url": "https://{i}.example"}}', T - timedelta(seconds=i)) for i in range(5)]
    assert latest_first(batch) == batch
