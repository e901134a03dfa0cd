"""check.for (debounce) and check.rearm (hysteresis): counted across held and not-held readings, unchanged content
included, with the words the wake and the monitor page show."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from engine.checks import CheckSpec, baseline, evaluate, parse_check
from engine.content import Content, json_content
from engine.describe import check_words
from engine.errors import SpecError
from engine.explain import change_data, reason
from engine.pipeline import BASELINE, CHANGED, FIRED, QUIET, Prior, check_body
from engine.spec import Limits, SourceSpec, check_from_record, parse_create, spec_to_record

PAGE = SourceSpec(type="page", url="https://shop.example.com/item")
MAX = 64 * 1024
T0 = datetime(2026, 3, 1, 9, 12, tzinfo=timezone.utc)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def text(value: str) -> Content:
    return Content(text=value)


def run(check: CheckSpec, readings: list, make=text) -> list:
    """Each reading evaluated against the state the one before left (the first is the baseline): the verdicts."""
    verdicts, state = [], None
    for minutes, reading in enumerate(readings):
        content = make(reading)
        now = at(minutes)
        verdict = baseline(check, content, now) if state is None else evaluate(check, content, state, now)
        verdicts.append(verdict)
        state = verdict.state
    return verdicts


def fires(verdicts: list) -> list[int]:
    return [index for index, verdict in enumerate(verdicts) if verdict.fired]


def threshold(**more) -> CheckSpec:
    return parse_check({"type": "threshold", "op": "below", "value": 90, **more})


# --- for: counting ------------------------------------------------------------------------------------------------

def test_for_threshold_fires_on_the_third_holding_check_in_a_row():
    verdicts = run(threshold(**{"for": 3}), ["95", "89", "88", "87", "86", "85"])
    assert fires(verdicts) == [3]
    assert verdicts[3].found == "87 is below 90 (was 88), held for 3 checks (since 09:13 UTC)"
    assert [v.state["held"] for v in verdicts] == [0, 1, 2, 3, 3, 3]


def test_for_a_break_in_the_run_starts_the_count_again():
    verdicts = run(threshold(**{"for": 3}), ["95", "89", "88", "91", "89", "88", "87"])
    assert fires(verdicts) == [6]
    assert verdicts[6].found.endswith("held for 3 checks (since 09:16 UTC)")


def test_for_fires_again_only_after_it_stopped_holding_and_held_n_times_again():
    verdicts = run(threshold(**{"for": 2}), ["95", "89", "88", "87", "91", "89", "89.5", "80"])
    assert fires(verdicts) == [2, 6]


def test_for_one_is_todays_edge_and_keeps_the_state_as_it_was():
    check = threshold()
    assert check.hold_for == 1
    verdicts = run(check, ["95", "89", "88", "91", "89"])
    assert fires(verdicts) == [1, 4]
    assert verdicts[1].state == {"value": 89.0, "holds": True}
    assert verdicts[1].found == "89 is below 90 (was 95)"


def test_for_a_baseline_that_already_holds_does_not_start_a_count_that_fires():
    verdicts = run(threshold(**{"for": 2}), ["80", "80.5", "81", "95", "85", "84"])
    assert fires(verdicts) == [5]


def test_for_regex_cel_and_status_count_consecutive_holds():
    regex = run(parse_check({"type": "regex", "pattern": "In stock", "for": 2}),
                ["Sold out", "In stock", "Sold out", "In stock", "In stock", "In stock"])
    assert fires(regex) == [4]
    assert regex[4].found == "the pattern matches 'In stock', held for 2 checks (since 09:15 UTC)"
    as_json = lambda value: json_content(f'{{"status": "{value}"}}'.encode())  # noqa: E731
    cel = run(parse_check({"type": "cel", "expr": "data.status == 'down'", "for": 3}),
              ["up", "down", "down", "up", "down", "down", "down"], as_json)
    assert fires(cel) == [6]
    status = run(parse_check({"type": "status", "value_path": "status", "values": ["down", "degraded"], "for": 2}),
                 ["up", "down", "degraded", "degraded", "degraded", "up", "down", "down"], as_json)
    # a move from one state that matters to another counts afresh
    assert fires(status) == [3, 7]
    assert status[3].found == "status is now 'degraded', held for 2 checks (since 09:14 UTC)"


def test_for_status_of_one_is_todays_behaviour():
    as_json = lambda value: json_content(f'{{"status": "{value}"}}'.encode())  # noqa: E731
    status = run(parse_check({"type": "status", "value_path": "status", "values": ["down", "degraded"]}),
                 ["up", "down", "down", "degraded", "up", "down"], as_json)
    assert fires(status) == [1, 3, 5]
    assert status[1].state == {"state": "down"}


# --- for: unchanged content through the pipeline ------------------------------------------------------------------

def pipeline(check: CheckSpec, bodies: list[bytes]) -> list:
    """Each body through check_body against what the outcome before it stored, as the monitor row keeps it."""
    outcomes, prior = [], Prior()
    for minutes, body in enumerate(bodies):
        outcome = check_body(PAGE, check, prior, body, MAX, at(minutes))
        outcomes.append(outcome)
        if outcome.kind != QUIET:
            prior = Prior(outcome.raw_hash, outcome.content_hash, outcome.verdict.state)
    return outcomes


def test_for_counts_unchanged_content_while_a_count_is_pending():
    low = b"<p>Price: 89</p>"
    kinds = [outcome.kind for outcome in pipeline(threshold(**{"for": 3}), [b"<p>Price: 95</p>", low, low, low, low])]
    assert kinds == [BASELINE, CHANGED, CHANGED, FIRED, QUIET]


def test_for_unchanged_content_that_does_not_hold_stays_quiet():
    high = b"<p>Price: 95</p>"
    kinds = [outcome.kind for outcome in pipeline(threshold(**{"for": 3}), [high, high, high])]
    assert kinds == [BASELINE, QUIET, QUIET]


def test_without_for_an_unchanged_source_never_loads_its_state():
    body = b"<p>Price: 89</p>"
    first = check_body(PAGE, threshold(), Prior(), body, MAX, at(0))

    def state():
        raise AssertionError("a quiet check of a monitor without a pending count must not load its state")

    again = check_body(PAGE, threshold(), Prior(first.raw_hash, first.content_hash, state), body, MAX, at(1))
    assert again.kind == QUIET


# --- rearm --------------------------------------------------------------------------------------------------------

def test_rearm_wobbling_around_the_line_fires_once_per_crossing_past_rearm():
    verdicts = run(threshold(rearm=92), ["95", "90.1", "89.9", "91", "89.5", "92.5", "89"])
    assert fires(verdicts) == [2, 6]


def test_rearm_without_it_the_same_wobble_fires_three_times():
    assert fires(run(threshold(), ["95", "90.1", "89.9", "91", "89.5", "92.5", "89"])) == [2, 4, 6]


def test_rearm_above_works_the_other_way():
    check = parse_check({"type": "threshold", "op": ">", "value": 100, "rearm": 95})
    assert fires(run(check, ["90", "101", "97", "102", "94", "100.5"])) == [1, 5]


def test_rearm_and_for_together():
    verdicts = run(threshold(rearm=92, **{"for": 2}), ["95", "89", "89", "91", "89", "89", "93", "89", "88"])
    assert fires(verdicts) == [2, 8]


# --- the words ----------------------------------------------------------------------------------------------------

CHECK_3 = {"type": "threshold", "op": "<", "value": 90, "hold_for": 3, "rearm": None}
CHECK_REARM = {"type": "threshold", "op": "<", "value": 90, "hold_for": 1, "rearm": 92}


def test_words_a_pending_count_says_holding_n_of_m_since_when():
    verdicts = run(threshold(**{"for": 3}), ["95", "89", "89"])
    data = change_data(CHECK_3, verdicts[2].summary, "", verdicts[1].state, verdicts[2].state)
    assert data["reason"] == ("89 is below 90, holding 2 of 3 (since 09:13 UTC): it fires once it has held for 3 "
                              "checks in a row.")


def test_words_a_count_that_broke_says_it_starts_again():
    verdicts = run(threshold(**{"for": 3}), ["95", "89", "89", "91"])
    assert reason(CHECK_3, "", verdicts[2].state, verdicts[3].state) == \
        "Changed, but 91 is not below 90. The count of 2 of 3 in a row starts again."


def test_words_below_again_but_not_rearmed():
    verdicts = run(threshold(rearm=92), ["95", "89.9", "91", "89.5"])
    assert reason(CHECK_REARM, "", verdicts[2].state, verdicts[3].state) == \
        "89.50 is below 90 again, but not re-armed: it must go above 92 first."
    assert reason(CHECK_REARM, "", verdicts[1].state, verdicts[2].state) == \
        "Changed, but 91 is not below 90; it re-arms once it goes above 92."


def test_words_cel_pending_count():
    after = {"holds": True, "held": 1, "since": "2026-03-01T09:12:00Z", "armed": True, "pending": True}
    assert reason({"type": "cel", "expr": "x", "hold_for": 2}, "", {"holds": False}, after) == \
        "The cel check holds, holding 1 of 2 (since 09:12 UTC): it fires once it has held for 2 checks in a row."


def test_words_describe_names_for_and_rearm():
    check = {"type": "threshold", "op": "<", "value": 90, "hold_for": 3, "rearm": 92}
    assert check_words({"type": "page"}, check) == "the first number below 90 for 3 checks in a row (re-arms above 92)"


# --- bad input ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [0, -1, 101, 2.5, "3", True, None])
def test_bad_for_is_one_sentence(value):
    with pytest.raises(SpecError, match=r"^check\.for must be a whole number of checks in a row from 1 to 100"):
        threshold(**{"for": value})


@pytest.mark.parametrize("kind", ["change", "new_items"])
def test_for_on_an_event_check_is_refused_with_why(kind):
    with pytest.raises(SpecError, match="check.for counts checks in a row on which a condition holds, but"):
        parse_check({"type": kind, "for": 2})


@pytest.mark.parametrize("raw, words", [
    ({"op": "below", "rearm": 88}, "check.rearm must be above check.value for a check that fires below 90"),
    ({"op": "below", "rearm": 90}, "check.rearm must be above check.value"),
    ({"op": "above", "rearm": 95}, "check.rearm must be below check.value for a check that fires above 90"),
    ({"op": "==", "rearm": 92}, "check.rearm needs a direction"),
    ({"op": "!=", "rearm": 92}, "check.rearm needs a direction"),
    ({"op": "below", "rearm": "92"}, "check.rearm must be a number"),
])
def test_bad_rearm_is_one_sentence(raw, words):
    with pytest.raises(SpecError, match=words):
        parse_check({"type": "threshold", "value": 90, **raw})


def test_rearm_on_a_non_threshold_check_is_refused():
    with pytest.raises(SpecError, match="works on threshold checks only"):
        parse_check({"type": "regex", "pattern": "x", "rearm": 3})


@pytest.mark.parametrize("source, check, words", [
    ({"type": "command", "device": "laptop", "command": "tail -F log", "mode": "stream"},
     {"type": "regex", "pattern": "x", "for": 2}, "each line of a stream"),
    ({"type": "document", "item_type": "ct:jobs", "item_id": "7"}, {"type": "cel", "expr": "doc.done", "for": 2},
     "a document watch is checked on each write"),
])
def test_for_is_refused_where_it_cannot_count(source, check, words):
    arguments = {"description": "d", "source": source, "check": check}
    with pytest.raises(SpecError, match=words):
        parse_create(arguments, Limits())


def test_record_keeps_the_options_only_when_set():
    page = {"type": "page", "url": "https://shop.example.com/item"}
    below = {"type": "threshold", "op": "<", "value": 90}
    plain, _ = parse_create({"description": "d", "source": page, "check": below}, Limits())
    assert "hold_for" not in spec_to_record(plain)["check"] and "rearm" not in spec_to_record(plain)["check"]
    both, _ = parse_create({"description": "d", "source": page, "check": {**below, "for": 3, "rearm": 92}}, Limits())
    record = spec_to_record(both)["check"]
    assert (record["hold_for"], record["rearm"]) == (3, 92.0)
    assert check_from_record(record) == both.check
