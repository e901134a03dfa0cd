"""engine/forecast.py: a dry run's forecast arithmetic, and what it says of a reading evaluated as a new one."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from engine.checks import CheckSpec
from engine.forecast import (
    ARMED_FIRES, ARMED_HOLDING, FIRST_READING, MIN_OBSERVED_SECONDS, NO_CONDITION, NO_HISTORY, PER_DELIVERY, History,
    Watched, checks_per_day, dry_reading, forecast, history, judge_calls, observed_seconds, wakes_left,
)
from engine.pipeline import ERROR, Outcome, Prior, check_body
from engine.spec import Limits, parse_create

NOW = datetime(2026, 12, 1, 12, 0, 0)
LIMITS = Limits(min_interval=60)
PAGE = {"type": "page", "url": "https://shop.example.com/item"}
JSON = {"type": "json", "url": "https://ci.example.com/run.json"}


def spec_of(**arguments):
    return parse_create({"description": "watch it", "source": PAGE, **arguments}, LIMITS)[0]


def read_as_new(check: CheckSpec, body: str, source=None) -> Outcome:
    """The pipeline's verdict on a body with an empty prior state: what a dry run evaluates."""
    source = source or spec_of().source
    return check_body(source, check, Prior(state={}), body.encode(), 64 * 1024, NOW)


# --- the forecast -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("interval, per_day", [("15m", 96), ("1h", 24), ("7m", 205.71), ("2d", 0.5)])
def test_checks_per_day_of_a_polled_source_follows_its_interval(interval, per_day):
    assert checks_per_day(spec_of(interval=interval)) == per_day


@pytest.mark.parametrize("source", [{"type": "webhook"}, {"type": "time", "delay": "1h"},
                                    {"type": "approval", "question": "Ship it?"},
                                    {"type": "command", "device": "laptop", "command": "tail -f x", "mode": "stream"}])
def test_checks_per_day_of_an_event_source_is_zero(source):
    assert checks_per_day(spec_of(source=source)) == 0


def test_judge_calls_without_a_condition_are_zero_whatever_the_history():
    past = History(monitors=1, seconds=3 * 86400, changes=30)
    assert judge_calls(spec_of(), 96, past) == (0, NO_CONDITION)


def test_judge_calls_without_history_are_the_upper_bound_of_one_per_check():
    assert judge_calls(spec_of(condition="the price fell"), 96, None) == (96, NO_HISTORY)


def test_judge_calls_follow_the_observed_change_rate():
    past = History(monitors=2, seconds=4 * 86400, changes=10)  # 2.5 changes a monitor-day
    calls, basis = judge_calls(spec_of(condition="the price fell"), 96, past)
    assert calls == 2.5
    assert basis.startswith("2.5 changes a day, observed over 4d of checks by 2 monitors")


def test_judge_calls_never_exceed_the_checks_a_day():
    past = History(monitors=1, seconds=86400, changes=500)
    assert judge_calls(spec_of(condition="the price fell", interval="1h"), 24, past)[0] == 24


def test_judge_calls_of_a_webhook_with_a_condition_are_unknown():
    spec = spec_of(source={"type": "webhook"}, condition="the deploy failed")
    assert judge_calls(spec, 0, None) == (None, PER_DELIVERY)


def test_observed_seconds_run_from_creation_or_the_window_start_to_the_last_check():
    assert observed_seconds(NOW - timedelta(days=2), NOW - timedelta(hours=1), NOW) == (47 * 3600)
    assert observed_seconds(NOW - timedelta(days=30), NOW, NOW) == 7 * 86400  # only the window counts
    assert observed_seconds(NOW - timedelta(days=1), None, NOW) == 0


def test_history_needs_enough_observation_summed_over_the_monitors():
    short = MIN_OBSERVED_SECONDS / 2
    assert history([Watched(short, 3)]) is None
    assert history([]) is None
    assert history([Watched(short, 3), Watched(short, 1), Watched(0, 9)]) == History(2, MIN_OBSERVED_SECONDS, 4)


@pytest.mark.parametrize("max_wakes, fired, cap, left", [(5, 0, 20, 5), (5, 18, 20, 2), (5, 25, 20, 0), (1, 0, 20, 1)])
def test_wakes_left_is_max_wakes_within_the_daily_cap(max_wakes, fired, cap, left):
    assert wakes_left(max_wakes, fired, cap) == left


def test_forecast_ends_at_the_end_of_the_lifetime_unless_told():
    spec = spec_of(expires_in="2d", max_wakes=3)
    assert forecast(spec, NOW, None, 0, 20) == {
        "checks_per_day": 96, "judge_calls_per_day": 0, "judge_calls_basis": NO_CONDITION, "wakes_left": 3,
        "ends_at": "2026-12-03T12:00:00Z"}
    assert forecast(spec, NOW, None, 0, 20, NOW + timedelta(hours=1))["ends_at"] == "2026-12-01T13:00:00Z"


# --- the reading --------------------------------------------------------------------------------------------------

def test_dry_reading_of_a_threshold_that_holds_would_fire_with_the_value():
    check = CheckSpec(type="threshold", op="<", value=90.0)
    reading = dry_reading(check, read_as_new(check, "<p>Price: $85.00</p>"))
    assert reading["would_fire"] is True and reading["value"] == 85.0
    assert reading["baseline"] == "currently 85" and reading["excerpt"] == "Price: $85.00"
    assert reading["notes"] == [ARMED_HOLDING]


def test_dry_reading_of_a_threshold_that_does_not_hold_would_not_fire():
    check = CheckSpec(type="threshold", op="<", value=90.0)
    reading = dry_reading(check, read_as_new(check, "<p>Price: $95.10</p>"))
    assert (reading["would_fire"], reading["value"], reading["notes"]) == (False, 95.1, [])


def test_dry_reading_with_for_holds_but_waits_for_the_count():
    check = CheckSpec(type="threshold", op="<", value=90.0, hold_for=3)
    reading = dry_reading(check, read_as_new(check, "<p>85</p>"))
    assert reading["would_fire"] is False
    assert reading["notes"][0] == "The condition holds now; with for 3 it fires once it has held on 3 checks in a row."


@pytest.mark.parametrize("check", [CheckSpec(), CheckSpec(type="new_items", items_path="data.items")])
def test_dry_reading_of_a_check_that_compares_readings_never_fires_and_says_so(check):
    source = spec_of(source=JSON).source
    reading = dry_reading(check, read_as_new(check, json.dumps({"items": [{"id": 1}]}), source))
    assert reading["would_fire"] is False and reading["notes"] == [FIRST_READING[check.type]]


def test_dry_reading_of_a_status_in_a_state_that_matters_would_fire():
    check = CheckSpec(type="status", value_path="data.state", values=("failed", "passed"))
    outcome = read_as_new(check, json.dumps({"state": "failed"}), spec_of(source=JSON).source)
    reading = dry_reading(check, outcome)
    assert reading["would_fire"] is True and reading["value"] is None


def test_dry_reading_of_a_cel_check_gives_its_value():
    check = CheckSpec(type="cel", expr="value > 2.0", value_path="data.count")
    outcome = read_as_new(check, json.dumps({"count": 3}), spec_of(source=JSON).source)
    reading = dry_reading(check, outcome)
    assert reading["would_fire"] is True and reading["value"] == 3.0


def test_dry_reading_of_a_document_says_an_armed_watch_fires_at_once():
    check = CheckSpec(type="cel", expr="doc.status == 'done'")
    outcome = read_as_new(check, json.dumps({"status": "done"}), spec_of(source=JSON).source)
    assert dry_reading(check, outcome, fires_at_once=True)["notes"] == [ARMED_FIRES]


def test_dry_reading_without_a_read_would_not_fire():
    assert dry_reading(CheckSpec(type="every_call"), None) == {
        "would_fire": False, "value": None, "baseline": None, "excerpt": "", "notes": []}
    assert dry_reading(CheckSpec(), Outcome(ERROR, error="x"))["would_fire"] is False
