"""Two schedulers and two workers on one database: every due monitor is claimed by one of them, and checked once.

The page server logs every fetch. Over the run, each claim (check_count) matches exactly one fetch, and no monitor
is fetched twice within one interval: a monitor claimed by both schedulers would be fetched twice at once.
"""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

pytestmark = pytest.mark.reliability

MONITORS = 60
INTERVAL = 4                #: seconds; each claim makes the next one due 0.9 to 1.1 intervals later
RUN_SECONDS = 25
DRAIN_SECONDS = 60          #: bound for the workers to finish what the schedulers queued


def test_two_schedulers_and_two_workers_check_each_due_monitor_once(stack_factory, pages):
    stack = stack_factory()
    stack.start_web()
    stack.start_worker("worker-a", threads=4)
    stack.start_worker("worker-b", threads=4)
    paths = {}
    for i in range(MONITORS):
        url = pages.set(f"/two/{i}", f"<p>page {i} stays the same</p>")
        result = stack.tool(f"two-{i}", description=f"page {i}", source={"type": "page", "url": url},
                            check={"type": "change"}, interval=f"{INTERVAL}s")
        paths[result["monitor_id"]] = f"/two/{i}"
    before = dict(stack.query("SELECT id, check_count FROM monitors"))
    first = len(pages.log)                      # fetches from here on are the schedulers' (baselines are before)

    stack.start_scheduler("scheduler-a")
    stack.start_scheduler("scheduler-b")
    time.sleep(RUN_SECONDS)
    assert stack.alive() == {"web": True, "worker-a": True, "worker-b": True, "scheduler-a": True,
                             "scheduler-b": True}, stack.log_tails()
    assert stack.stop("scheduler-a") == 0 and stack.stop("scheduler-b") == 0
    claims = _claims(stack, before)
    deadline = time.monotonic() + DRAIN_SECONDS
    while time.monotonic() < deadline and len(pages.log) - first < sum(claims.values()):
        time.sleep(0.5)
    time.sleep(1)  # a duplicate check would show up just after the last expected one

    fetched = defaultdict(list)
    for path, at in pages.log[first:]:
        fetched[path].append(at)
    mismatched = {paths[m]: (claims[m], len(fetched[paths[m]])) for m in paths if claims[m] != len(fetched[paths[m]])}
    assert not mismatched, f"monitors whose claims and fetches differ (claims, fetches): {mismatched}"
    # Consecutive claims are >= 0.9 interval apart, so their fetches are too, give or take how long a fetch waits
    # in its batch; two claims of one due period would be fetched within that wait of each other.
    shortest = {path: min((b - a for a, b in zip(sorted(fetched[path]), sorted(fetched[path])[1:])), default=INTERVAL)
                for path in paths.values()}
    too_close = {path: round(gap, 3) for path, gap in shortest.items() if gap < INTERVAL * 0.5}
    print(f"{sum(claims.values())} checks; shortest gap between two fetches of a monitor: {min(shortest.values()):.2f}s")
    assert not too_close, f"monitors fetched twice within one due period (shortest gap, s): {too_close}"
    total = sum(claims.values())
    assert total >= MONITORS * (RUN_SECONDS // (INTERVAL * 2)), f"only {total} checks in {RUN_SECONDS}s"
    assert all(len(fetched[path]) <= RUN_SECONDS / (INTERVAL * 0.9) + 2 for path in paths.values())


def _claims(stack, before: dict[str, int]) -> dict[str, int]:
    return {monitor_id: count - before[monitor_id]
            for monitor_id, count in stack.query("SELECT id, check_count FROM monitors")}
