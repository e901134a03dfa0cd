"""When a sleeping scheduler wakes next (issue 32): pure arithmetic on epoch seconds, so it is tested without a
database or a clock.

The scheduler passes only on wall-clock tick boundaries (time watches are due on whole seconds, and due times
spread over a second are claimed as one batch), and only on the boundaries where something is due: at the
first boundary at or after the earliest due moment, at most `max_sleep` seconds ahead (a safety net for a
wake-up lost on the way). A ring (something due sooner, told by the process that wrote it) brings that forward.
"""

from __future__ import annotations

import math

#: how long after a wall-clock tick boundary the pass runs: a time watch due at 12:00:05 is claimed at 12:00:05.005
ALIGN_SLACK_SECONDS = 0.005


def boundary_after(tick_seconds: float, now: float) -> float:
    """Just after the next multiple of tick_seconds strictly after `now` (the next tick)."""
    return now + tick_seconds - (now % tick_seconds) + ALIGN_SLACK_SECONDS


def boundary_at_or_after(tick_seconds: float, when: float) -> float:
    """Just after the first multiple of tick_seconds at or after `when`: a moment due on a boundary is served at
    it, one due just after a boundary at the next."""
    return math.ceil(when / tick_seconds - 1e-9) * tick_seconds + ALIGN_SLACK_SECONDS


def wake_at(now: float, due: list[float | None], tick_seconds: float, max_sleep: float,
            rung: list[float] = ()) -> float:
    """The moment to pass next. `due`: the earliest moment of each kind of work (None: none of that kind), all
    after `now` (what is due at `now` has just been served); `rung`: moments told by a ring, served at once when
    they are past (a monitor resumed: due now), else at their own tick. Never later than now + max_sleep;
    never before the next tick when it comes from `due` (a kind still due after its pass, say a held window
    another scheduler holds, is looked at once a tick, not in a loop)."""
    cap = now + max_sleep
    earliest = min((when for when in due if when is not None), default=cap)
    at = max(boundary_at_or_after(tick_seconds, earliest), boundary_after(tick_seconds, now)) if earliest < cap \
        else cap
    for when in rung:
        at = min(at, now if when <= now else boundary_at_or_after(tick_seconds, when))
    return min(at, cap)


def rung_times(now: float, rung: list[float], tick_seconds: float) -> list[float]:
    """The moments to look at for the rings heard at `now`: each one, and for one already due, once more a tick
    later: the ring may come before the writer's transaction commits, and that pass would not see its row."""
    times = []
    for when in rung:
        times.append(when)
        if when <= now:
            times.append(now + tick_seconds)
    return times
