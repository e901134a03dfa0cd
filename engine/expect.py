"""A trigger link's expected deliveries: silence that wakes (issue 18).

healthchecks.io's model. The next delivery is expected `every` after the last one, or at the first `cron` time
(in the link's own time zone) strictly after it; the deadline is that expected time plus `grace`. Before the first
delivery the monitor's creation counts as the last one. A deadline passed with no delivery is one missed window;
the next is the window after it. Pure: every function takes its times (naive UTC, as the tables store them, or
aware) and returns naive UTC.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

from engine.durations import describe_duration, parse_duration
from engine.errors import SpecError

FIELDS = frozenset({"every", "cron", "grace", "tz"})
#: the shortest period between two expected deliveries
MIN_PERIOD = 60
#: grace when none is given: a tenth of the period, within these bounds
DEFAULT_GRACE_FRACTION, MIN_DEFAULT_GRACE, MAX_DEFAULT_GRACE = 0.1, 60, 3600
#: the cron times read to find a schedule's shortest gap
GAP_SAMPLES = 20
#: windows counted at most when the scheduler comes back after a long stop (the rest are skipped)
MAX_CATCH_UP = 10_000
_ZERO = re.compile(r"0+(?:\.0+)?\s*[smhdw]?")
_ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_EXAMPLE = 'e.g. {"every": "24h"} or {"cron": "30 2 * * *", "grace": "30m", "tz": "Europe/Paris"}'


@dataclass(frozen=True)
class Expect:
    """A parsed expect: exactly one of `every` (seconds) and `cron`; grace in seconds; an IANA zone name."""
    every: int | None
    cron: str | None
    grace: int
    tz: str

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.tz)


@dataclass(frozen=True)
class Missed:
    """What a passed deadline means: the first expected time missed, how many windows passed without a
    delivery (more than one only when the sweep ran late), and the next deadline, still ahead of `now`."""
    expected: datetime
    windows: int
    next_due: datetime


def parse_expect(raw: object) -> Expect:
    """The expect of a webhook source; raises SpecError with one sentence saying what to fix."""
    if not isinstance(raw, dict):
        raise SpecError(f"source.expect must be an object, {_EXAMPLE}.")
    extra = sorted(set(raw) - FIELDS)
    if extra:
        raise SpecError(f"source.expect has an unknown field '{extra[0]}'; it takes every or cron, grace and tz.")
    if ("every" in raw) == ("cron" in raw):
        raise SpecError(f"source.expect needs exactly one of every and cron, {_EXAMPLE}.")
    tz = _zone_name(raw.get("tz", "UTC"))
    if "every" in raw:
        every, cron = _every(raw["every"]), None
        period = every
    else:
        every, cron = None, _cron(raw["cron"])
        period = _period(cron)
    return Expect(every=every, cron=cron, grace=_grace(raw.get("grace"), period), tz=tz)


def _every(value: object) -> int:
    seconds = parse_duration(value)
    if seconds is None or seconds < MIN_PERIOD:
        raise SpecError(f"source.expect.every must be a duration of at least 1m, like '1h' or '24h' (got {value!r}).")
    return seconds


def _cron(value: object) -> str:
    text = value.strip() if isinstance(value, str) else ""
    fields_ok = len(text.split()) == 5 or text.lower() in _ALIASES
    if not (fields_ok and croniter.is_valid(text)):
        raise SpecError(f"source.expect.cron must be a 5-field cron expression (minute hour day month weekday), "
                        f"like '30 2 * * *' for 02:30 every day (got {value!r}).")
    return text


def _period(cron: str) -> int:
    try:
        return shortest_gap(cron)
    except CroniterBadDateError:
        raise SpecError(f"source.expect.cron {cron!r} never comes round (no such date); give a schedule that "
                        "does, like '30 2 * * *'.") from None


def _zone_name(value: object) -> str:
    try:
        if isinstance(value, str) and value.strip():
            ZoneInfo(value.strip())
            return value.strip()
    except (ZoneInfoNotFoundError, ValueError):
        pass
    raise SpecError(f"source.expect.tz {value!r} is not a known IANA time zone; give a name like 'Europe/Paris' "
                    "or 'America/New_York', or leave it out for UTC.")


def _grace(value: object, period: int) -> int:
    if value is None:
        return min(max(round(period * DEFAULT_GRACE_FRACTION), MIN_DEFAULT_GRACE), MAX_DEFAULT_GRACE, period)
    seconds = 0 if _is_zero(value) else parse_duration(value)
    if seconds is None:
        raise SpecError(f"source.expect.grace must look like '30m', '2h' or a number of seconds (got {value!r}).")
    if seconds > period:
        raise SpecError(f"source.expect.grace ({describe_duration(seconds)}) is longer than the time between two "
                        f"expected deliveries ({describe_duration(period)}); give a grace of at most that.")
    return seconds


def _is_zero(value: object) -> bool:
    """No grace at all: 0, "0", "0s", "0m" (parse_duration reads only durations of a second or more)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return value == 0
    return isinstance(value, str) and bool(_ZERO.fullmatch(value.strip().lower()))


@functools.lru_cache(maxsize=1024)
def shortest_gap(cron: str) -> int:
    """The shortest time, in seconds, between consecutive times of the schedule over its next occurrences (read
    on the wall clock, so a DST change does not shorten it). Kept per schedule: every delivery of a link reads it
    again, for its default grace."""
    times = croniter(cron, datetime(2000, 1, 1))
    previous = times.get_next(datetime)
    gaps = []
    for _ in range(GAP_SAMPLES):
        current = times.get_next(datetime)
        gaps.append(int((current - previous).total_seconds()))
        previous = current
    return min(gaps)


def next_expected(expect: Expect, after: datetime) -> datetime:
    """When the next delivery is expected, strictly after `after`: `every` later, or the schedule's next time.

    A cron time is read on the link's wall clock. In an hour the clocks repeat, a time happens once, on its
    first pass; a time the clocks jump over is due as far after the jump as it was into the gap (02:30 on a
    night that skips 02:00–03:00 is due at 03:30).
    """
    after = _naive_utc(after)
    if expect.every is not None:
        return after + timedelta(seconds=expect.every)
    zone = expect.zone
    times = croniter(expect.cron, after.replace(tzinfo=timezone.utc).astimezone(zone).replace(tzinfo=None))
    for _ in range(MAX_CATCH_UP):  # only the times of a repeated hour are passed over
        at = _naive_utc(times.get_next(datetime).replace(tzinfo=zone, fold=0))
        if at > after:
            return at
    raise ValueError(f"the cron schedule {expect.cron} has no time after {after}")


def deadline(expect: Expect, last: datetime) -> datetime:
    """The time by which a delivery must have arrived, after the last one came at `last`."""
    return next_expected(expect, last) + timedelta(seconds=expect.grace)


def deadline_of(raw: dict | None, last: datetime) -> datetime | None:
    """A stored source's expect (as given, already checked) -> its deadline after `last`; None without one."""
    return None if raw is None else deadline(parse_expect(raw), last)


def missed(expect: Expect, due: datetime, now: datetime) -> Missed:
    """The window whose deadline `due` passed, and the next deadline after `now` (windows between are counted)."""
    grace = timedelta(seconds=expect.grace)
    first = _naive_utc(due) - grace
    expected, windows = first, 1
    following = next_expected(expect, expected)
    while following + grace <= _naive_utc(now) and windows < MAX_CATCH_UP:
        expected, windows = following, windows + 1
        following = next_expected(expect, expected)
    return Missed(expected=first, windows=windows, next_due=following + grace)


def schedule_words(expect: Expect) -> str:
    """ "every 24h", "every day at 02:30", "on the cron schedule 30 2 * * 1-5"."""
    if expect.every is not None:
        return f"every {describe_duration(expect.every)}"
    minute, hour, *rest = expect.cron.split() if len(expect.cron.split()) == 5 else ("", "", "")
    if minute.isascii() and minute.isdigit() and hour.isascii() and hour.isdigit() and rest == ["*", "*", "*"]:
        return f"every day at {int(hour):02d}:{int(minute):02d}"
    return f"on the cron schedule {expect.cron}"


def local_time(expect: Expect, at: datetime, now: datetime | None = None) -> str:
    """`at` on the link's clock: "02:30", with its date unless it is the same day as `now` there."""
    local = _naive_utc(at).replace(tzinfo=timezone.utc).astimezone(expect.zone)
    same_day = now is not None and _naive_utc(now).replace(tzinfo=timezone.utc).astimezone(expect.zone).date() \
        == local.date()
    return local.strftime("%H:%M") if same_day else local.strftime("%Y-%m-%d %H:%M")


def terms(expect: Expect) -> str:
    """ "expected every day at 02:30, grace 30m"."""
    return f"expected {schedule_words(expect)}, grace {describe_duration(expect.grace)}"


def missed_text(description: str, expect: Expect, miss: Missed, now: datetime, *, last: bool) -> str:
    """The wake for a missed window, for the agent."""
    when = local_time(expect, miss.expected, now)
    more = (f" {miss.windows - 1} more window{'s' if miss.windows > 2 else ''} passed since then without one "
            "(Vigil's scheduler was behind)." if miss.windows > 1 else "")
    end = (" This was the monitor's last wake; it has ended." if last
           else " Tell the user; the next delivery will say it is back.")
    return (f"Expected delivery missed: the trigger link of '{description}' had no delivery by {when} "
            f"({expect.tz}); {terms(expect)}.{more}{end}")


def back_text(description: str, expect: Expect, arrived_at: datetime, since: datetime, windows: int) -> str:
    """The notice that deliveries came back after one or more missed windows."""
    missing = f"{windows} window{'' if windows == 1 else 's'}"
    return (f"The trigger link of '{description}' is back: a delivery arrived at {local_time(expect, arrived_at)} "
            f"({expect.tz}) after missing {missing} since {local_time(expect, since)}.")


def expecting_words(expect: Expect, due: datetime | None, missed_since: datetime | None, now: datetime) -> str:
    """The monitor page's line: "Next delivery expected by 02:30 (Europe/Paris), grace 30m · missed since …"."""
    if due is None:
        words = f"Deliveries {terms(expect)} ({expect.tz}); not waiting now (the monitor is not active)"
    else:
        expected = _naive_utc(due) - timedelta(seconds=expect.grace)
        words = (f"Next delivery expected by {local_time(expect, expected, now)} ({expect.tz}), grace "
                 f"{describe_duration(expect.grace)}; {schedule_words(expect)}")
    if missed_since is not None:
        words += f" · missed since {local_time(expect, missed_since, now)}"
    return words


def _naive_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        return value
    return value.astimezone(timezone.utc).replace(tzinfo=None)
