"""engine/glance.py: a row's badge, its latest reading, and times in relative words, all from values and `now`."""

from datetime import datetime, timedelta

from engine.glance import badge, reading, relative

NOW = datetime(2026, 12, 3, 18, 0, 0)


def test_relative_says_past_and_future_in_the_largest_whole_unit():
    said = {seconds: relative(NOW + timedelta(seconds=seconds), NOW)
            for seconds in (0, -30, 20, -50, -120, 180, -3 * 3600 - 59, 2 * 86400, -40 * 86400, -400 * 86400)}
    assert said == {0: "just now", -30: "just now", 20: "in a moment", -50: "1 min ago", -120: "2 min ago",
                    180: "in 3 min", -3 * 3600 - 59: "3 h ago", 2 * 86400: "in 2 d", -40 * 86400: "1 mo ago",
                    -400 * 86400: "1 y ago"}


def test_reading_is_the_number_as_the_check_shows_it_or_the_start_of_the_text():
    assert reading({"value": 85.5}) == "85.50" and reading({"value": 90.0}) == "90"
    assert reading({"text": "  Status:\n all   quiet "}) == "Status: all quiet"
    long = reading({"text": "x" * 500})
    assert len(long) == 80 and long.endswith("…")
    assert reading(None) is None and reading({"holds": True}) is None and reading({"value": True}) is None


def test_badge_is_holding_only_for_an_active_monitor_whose_condition_is_held():
    assert badge("active", {"pending": True}) == "holding"
    assert badge("paused", {"pending": True}) == "paused"
    assert badge("active", {"pending": False}) == "active" and badge("awaiting_approval", None) == "awaiting_approval"
