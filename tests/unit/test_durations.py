import pytest

from engine.durations import describe_duration, parse_duration


@pytest.mark.parametrize("text, seconds", [
    ("15m", 900),
    ("2h", 7200),
    ("1h30m", 5400),
    ("7d", 604800),
    ("1w", 604800),
    ("45s", 45),
    ("90", 90),
    (900, 900),
    ("1.5h", 5400),
    (" 2H ", 7200),
    ("1h 30m", 5400),
])
def test_parse_duration_reads_written_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("garbage", [
    "soon", "", "   ", "-5", "0", "0m", "0.5", True, False, None, "5 parsecs", "15 minutes", "h", "m15",
    "1h-30m", -5, 0, 0.5, float("nan"), float("inf"), [900], {"m": 15},
])
def test_parse_duration_refuses_what_is_not_a_duration(garbage):
    assert parse_duration(garbage) is None


@pytest.mark.parametrize("seconds, text", [
    (300, "5m"), (5400, "1h30m"), (86400, "1d"), (90061, "1d1h1m1s"), (45, "45s"), (0, "0s"),
])
def test_describe_duration_spells_seconds_shortest(seconds, text):
    assert describe_duration(seconds) == text


@pytest.mark.parametrize("seconds", [1, 59, 60, 61, 300, 900, 3599, 3600, 5400, 86399, 86400, 604800, 2592000, 90061])
def test_describe_duration_round_trips_through_parse_duration(seconds):
    assert parse_duration(describe_duration(seconds)) == seconds


@pytest.mark.parametrize("text", ["15m", "2h", "1h30m", "7d", "1d1h1m1s"])
def test_describe_duration_reproduces_canonical_spellings(text):
    assert describe_duration(parse_duration(text)) == text
