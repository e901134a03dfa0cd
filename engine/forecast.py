"""A dry run of monitor_create (issue 18): what the check makes of the content there now, and the cost forecast —
how often the monitor would check, how often its judge would likely be asked, how many wakes it could still have,
and when it would end.

Pure arithmetic on values the caller read (the source's history, the conversation's fires today); `now` is passed
in. The judge is asked only on a match, and a match needs a change, so the change rate the account's earlier
monitors of the same source observed is the expected rate of judge calls, capped at one per check.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from engine.checks import CheckSpec, Verdict
from engine.checks.cel import read_value
from engine.checks.hold import stamp
from engine.checks.status import canonical
from engine.content import Content, excerpt
from engine.durations import describe_duration
from engine.pipeline import Outcome
from engine.spec import MonitorSpec

DAY = 86400
#: how far back a source's history is read for its change rate
HISTORY_DAYS = 7
#: less observation than this, summed over the monitors that watched the source, is no history
MIN_OBSERVED_SECONDS = DAY
#: sources that are never checked on a schedule: an event (a delivery, a decision, a moment) is the check
UNSCHEDULED = ("webhook", "approval", "time")
NO_HISTORY = "no history for this source; at most one call per change, at most checks_per_day"
NO_CONDITION = "no condition, so no judge is asked"
PER_DELIVERY = ("one call per delivery that passes the check; how often senders will POST can't be known before "
                "the link exists")
EXCERPT_CHARS = 300
#: what a create notes when its baseline already holds (models/tool_actions.store_create)
ALREADY_HOLDS = ("The check already holds now; it fires only after that stops and then starts again, so tell the "
                 "user what it is now.")
ARMED_HOLDING = ("would_fire says what the check makes of the content now; armed now, this reading would be its "
                 "baseline, which never wakes, so it fires only after the check stops holding and then holds again.")
ARMED_FIRES = "Armed now, it would fire at once: a document watch's first check fires when its condition holds."
#: why the checks that compare readings can't fire on a first one
FIRST_READING = {
    "change": "A change check compares each reading with the one before, so nothing fires on what is there now; "
              "armed, it fires on the next change.",
    "new_items": "A new_items check fires on items not listed before, so nothing fires on what is there now; "
                 "armed, it fires on the next new item.",
}


@dataclass(frozen=True)
class Watched:
    """One earlier monitor of the same source: how long it was checked within the window, and the changes it saw."""
    seconds: float
    changes: int


@dataclass(frozen=True)
class History:
    """What the account's monitors of one source saw, summed over them."""
    monitors: int
    seconds: float
    changes: int

    @property
    def per_day(self) -> float:
        return self.changes * DAY / self.seconds


def observed_seconds(created_at: datetime, last_checked_at: datetime | None, now: datetime,
                     days: int = HISTORY_DAYS) -> float:
    """How long a monitor was checked within the last `days`: from its creation (or the window's start) to its
    last check."""
    if last_checked_at is None:
        return 0.0
    start = max(created_at, now - timedelta(days=days))
    return max((min(last_checked_at, now) - start).total_seconds(), 0.0)


def history(watched: list[Watched]) -> History | None:
    """The source's history, or None when it was watched too briefly to tell a rate."""
    seen = [w for w in watched if w.seconds > 0]
    seconds = sum(w.seconds for w in seen)
    if seconds < MIN_OBSERVED_SECONDS:
        return None
    return History(len(seen), seconds, sum(w.changes for w in seen))


def checks_per_day(spec: MonitorSpec) -> float:
    """Scheduled checks a day: none for an event source or a stream (each event is its own check)."""
    source = spec.source
    if source.type in UNSCHEDULED or (source.type == "command" and source.mode == "stream"):
        return 0
    return rounded(DAY / spec.interval_seconds)


def judge_calls(spec: MonitorSpec, checks: float, past: History | None) -> tuple[float | None, str]:
    """Expected judge calls a day and what the figure rests on; None when it can't be known (a webhook's)."""
    if not spec.condition:
        return 0, NO_CONDITION
    if spec.source.type == "webhook":
        return None, PER_DELIVERY
    if past is None:
        return checks, NO_HISTORY
    span = describe_duration(int(past.seconds // 3600 * 3600))  # hours are enough: "3d4h"
    watchers = f"{past.monitors} monitor{'s' if past.monitors != 1 else ''}"
    return (rounded(min(past.per_day, checks)),
            f"{rounded(past.per_day)} changes a day, observed over {span} of checks by {watchers} of this account "
            "on the same source; at most one call per change, at most checks_per_day")


def wakes_left(max_wakes: int, fires_in_last_day: int, daily_cap: int) -> int:
    """The wakes it could still have: its own max_wakes, within what the conversation's daily cap leaves."""
    return max(min(max_wakes, daily_cap - fires_in_last_day), 0)


def forecast(spec: MonitorSpec, now: datetime, past: History | None, fires_in_last_day: int, daily_cap: int,
             ends_at: datetime | None = None) -> dict:
    """The forecast a dry run answers with; `ends_at` defaults to the end of the monitor's lifetime."""
    checks = checks_per_day(spec)
    calls, basis = judge_calls(spec, checks, past)
    end = ends_at or now + timedelta(seconds=spec.ttl_seconds)
    return {"checks_per_day": checks, "judge_calls_per_day": calls, "judge_calls_basis": basis,
            "wakes_left": wakes_left(spec.max_wakes, fires_in_last_day, daily_cap), "ends_at": stamp(end)}


def dry_reading(check: CheckSpec, outcome: Outcome | None, fires_at_once: bool = False) -> dict:
    """What a dry run says of its read, evaluated as a new reading (an empty prior state): would_fire, the value
    read, the summary a create calls its baseline, an excerpt, and why it would or would not fire. No read (an
    event source): would_fire false. `fires_at_once`: an armed monitor's first check may fire (a document watch)."""
    verdict = outcome.verdict if outcome is not None else None
    if verdict is None:
        return {"would_fire": False, "value": None, "baseline": None, "excerpt": "", "notes": []}
    return {"would_fire": verdict.fired, "value": value_read(check, outcome), "baseline": verdict.summary,
            "excerpt": excerpt(outcome.text, EXCERPT_CHARS), "notes": reading_notes(check, verdict, fires_at_once)}


def reading_notes(check: CheckSpec, verdict: Verdict, fires_at_once: bool = False) -> list[str]:
    if check.type in FIRST_READING:
        return [FIRST_READING[check.type]]
    if not already_holds(check, verdict.state):
        return []
    need = check.hold_for
    counting = [] if verdict.fired else [f"The condition holds now; with for {need} it fires once it has held on "
                                         f"{need} checks in a row."]
    return counting + [ARMED_FIRES if fires_at_once else ARMED_HOLDING]


def already_holds(check: CheckSpec, state: dict) -> bool:
    """Whether the check's condition holds in this reading's state."""
    if check.type == "status":
        return state.get("state") in {canonical(value) for value in check.values or ()}
    return bool(state.get("holds"))


def value_read(check: CheckSpec, outcome: Outcome) -> float | None:
    """The number a threshold compared, or a cel check's `value` (at value_path, else the first number)."""
    state = outcome.verdict.state
    if check.type == "threshold":
        return state.get("value")
    if check.type == "cel":
        data = state.get("data")
        return read_value(check, Content(text=outcome.text, data=data, is_json=data is not None))
    return None


def rounded(value: float) -> float:
    """Two decimals; a whole number as an int (96, not 96.0)."""
    value = round(float(value), 2)
    return int(value) if value.is_integer() else value
