"""time: a watch that fires once at a moment (seed 001's fireAt / delayMinutes). Nothing is read; the clock is
the event. `delay` is turned into `fire_at` when the monitor is created, so a restart never moves it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from engine.durations import parse_duration
from engine.errors import SpecError
from engine.http import FetchError
from engine.sources.base import SourceIO, SourcePolicy, SourceSpec

FIELDS = frozenset({"type", "fire_at", "delay"})
#: no lifetime is longer than this: a longer delay is refused before any date is computed from it
MAX_DELAY_SECONDS = 3650 * 86400


def parse(raw: dict, policy: SourcePolicy) -> SourceSpec:
    fire_at, delay = raw.get("fire_at"), raw.get("delay")
    if (fire_at is None) == (delay is None):
        raise SpecError("A time source takes either fire_at (an ISO 8601 time, e.g. 2026-12-01T17:00:00Z) or "
                        "delay (e.g. '30m'), not both and not neither.")
    if fire_at is not None:
        return SourceSpec(type="time", fire_at=format_time(parse_time(fire_at)))
    seconds = parse_duration(delay)
    if seconds is None:
        raise SpecError(f"source.delay must look like '30m', '2h' or a number of seconds above 0 (got {delay!r}).")
    if seconds > MAX_DELAY_SECONDS:
        raise SpecError(f"source.delay ({delay!r}) is more than {MAX_DELAY_SECONDS // 86400} days; a time watch "
                        "fires within its monitor's lifetime (expires_in), so give a shorter delay.")
    return SourceSpec(type="time", delay=seconds)


def parse_time(value: object) -> datetime:
    """An ISO 8601 time as naive UTC (a time without an offset is UTC); raises SpecError."""
    if not isinstance(value, str) or not value.strip():
        raise SpecError(f"source.fire_at must be an ISO 8601 time such as 2026-12-01T17:00:00Z (got {value!r}).")
    text = value.strip()
    try:
        when = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in "Zz" else text)
    except ValueError:
        raise SpecError(f"source.fire_at is not an ISO 8601 time: {value!r}; write it like "
                        "2026-12-01T17:00:00Z or 2026-12-01T18:00:00+01:00.") from None
    try:
        if when.tzinfo is not None:
            when = when.astimezone(timezone.utc).replace(tzinfo=None)
        return whole_second_up(when)
    except OverflowError:
        raise SpecError(f"source.fire_at {value!r} is past any time a watch can wait for; give a time within its "
                        "lifetime (expires_in).") from None


def whole_second_up(when: datetime) -> datetime:
    """`when` on a whole second, rounded up: a time watch stores and fires on whole seconds, and never early."""
    return when if not when.microsecond else when.replace(microsecond=0) + timedelta(seconds=1)


def format_time(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def fire_time(spec: SourceSpec, now: datetime) -> datetime:
    """When the watch fires: its fire_at, or now plus its delay, on a whole second (rounded up)."""
    return parse_time(spec.fire_at) if spec.fire_at else whole_second_up(now + timedelta(seconds=spec.delay))


def lateness_seconds(fire_at: datetime, now: datetime) -> float:
    return max((now - fire_at).total_seconds(), 0.0)


def read(spec: SourceSpec, io: SourceIO) -> bytes:
    raise FetchError("A time watch reads nothing; the time is the event.")


def normalize(spec: SourceSpec, body: bytes, max_text_bytes: int):
    raise FetchError("A time watch reads nothing; the time is the event.")
