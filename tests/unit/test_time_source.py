"""Time watches: parsing fire_at and delay, when they fire, and how a late wake says so (`now` passed in)."""

from __future__ import annotations

from datetime import datetime

import pytest

from engine.errors import SpecError
from engine.sources.time_source import fire_time, format_time, lateness_seconds, parse_time
from engine.spec import Limits, parse_create
from engine.wake import time_text

NOW = datetime(2026, 12, 1, 9, 0, 0)


@pytest.mark.parametrize("text, expected", [
    ("2026-12-01T17:00:00Z", datetime(2026, 12, 1, 17, 0, 0)),
    ("2026-12-01T18:00:00+01:00", datetime(2026, 12, 1, 17, 0, 0)),
    ("2026-12-01T17:00:00.750Z", datetime(2026, 12, 1, 17, 0, 1)),  # a fraction: the next whole second
    ("2026-12-01T17:00:00.000Z", datetime(2026, 12, 1, 17, 0, 0)),
    ("2026-12-01T17:00", datetime(2026, 12, 1, 17, 0, 0)),  # no offset: UTC
    ("2026-12-02T01:30:00+08:30", datetime(2026, 12, 1, 17, 0, 0)),
])
def test_time_parses_iso_8601_as_utc(text, expected):
    assert parse_time(text) == expected


@pytest.mark.parametrize("text", ["tomorrow", "", "17:00", "2026-13-01T00:00:00Z", 1764608400])
def test_time_refuses_what_is_not_iso_8601(text):
    with pytest.raises(SpecError, match="ISO 8601"):
        parse_time(text)


def test_time_delay_is_fixed_from_now_and_fire_at_stays():
    delayed = parse_create({"description": "x", "source": {"type": "time", "delay": "90m"}}, Limits())[0].source
    assert fire_time(delayed, NOW) == datetime(2026, 12, 1, 10, 30, 0)
    fixed = parse_create({"description": "x", "source": {"type": "time", "fire_at": "2026-12-01T12:00:00Z"}},
                         Limits())[0].source
    assert fire_time(fixed, NOW) == fire_time(fixed, datetime(2030, 1, 1)) == datetime(2026, 12, 1, 12, 0, 0)
    assert format_time(fire_time(fixed, NOW)) == "2026-12-01T12:00:00Z"


def test_time_fractional_fire_at_rounds_up_so_the_watch_never_fires_early():
    asked = datetime(2026, 12, 3, 10, 0, 5, 620000)
    fixed = parse_create({"description": "x", "source": {"type": "time", "fire_at": "2026-12-03T10:00:05.62Z"}},
                         Limits())[0].source
    assert fixed.fire_at == "2026-12-03T10:00:06Z"
    assert fire_time(fixed, NOW) == datetime(2026, 12, 3, 10, 0, 6) >= asked
    just_after = parse_time("2026-12-03T10:00:05.000001Z")
    assert just_after == datetime(2026, 12, 3, 10, 0, 6)
    assert parse_time("2026-12-03T11:00:05.62+01:00") == datetime(2026, 12, 3, 10, 0, 6)


def test_time_delay_from_a_fractional_now_fires_on_the_next_whole_second():
    delayed = parse_create({"description": "x", "source": {"type": "time", "delay": "90m"}}, Limits())[0].source
    now = datetime(2026, 12, 1, 9, 0, 0, 250000)
    assert fire_time(delayed, now) == datetime(2026, 12, 1, 10, 30, 1)
    assert format_time(fire_time(delayed, now)) == "2026-12-01T10:30:01Z"


def test_time_wake_says_how_late_only_when_it_is():
    fire_at = datetime(2026, 12, 1, 9, 0, 0)
    on_time = time_text("stand-up", "2026-12-01T09:00:00Z", lateness_seconds(fire_at, datetime(2026, 12, 1, 9, 0, 1)), "")
    assert "late" not in on_time and on_time.startswith("Time watch fired: stand-up")
    assert "40 seconds late" in time_text("s", "t", lateness_seconds(fire_at, datetime(2026, 12, 1, 9, 0, 40)), "")
    assert "15 minutes late" in time_text("s", "t", lateness_seconds(fire_at, datetime(2026, 12, 1, 9, 15)), "")
    assert "3.0 hours late" in time_text("s", "t", lateness_seconds(fire_at, datetime(2026, 12, 1, 12, 0)), "")
    assert lateness_seconds(fire_at, datetime(2026, 12, 1, 8, 59)) == 0
