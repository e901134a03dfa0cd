"""engine/explain: the monitor page's evidence in words (why it fired, or why not), before → after, and the quiet
checks folded into counted spans from each stored event's check counter."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from engine.checks.change import describe_change
from engine.explain import MAX_SIDE_CHARS, change_data, fold, reason, why_not

BELOW_90 = {"type": "threshold", "op": "<", "value": 90}
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def event(kind: str, check_count: int, minutes: int, **more) -> dict:
    return {"id": check_count * 10 + minutes, "kind": kind, "check_count": check_count, "at": at(minutes), **more}


def quiet_spans(items: list[dict]) -> list[tuple[int, datetime, datetime]]:
    return [(item["count"], item["from"], item["to"]) for item in items if item["kind"] == "quiet"]


# --- reasons: threshold -------------------------------------------------------------------------------------------

def test_change_data_threshold_fire_gives_the_crossing_with_was_and_before_after():
    data = change_data(BELOW_90, "currently 88.20", "88.20 is below 90 (was 91.30)",
                       {"value": 91.3, "holds": False}, {"value": 88.2, "holds": True})
    assert data == {"summary": "currently 88.20", "found": "88.20 is below 90 (was 91.30)",
                    "before": "91.30", "after": "88.20", "reason": "88.20 is below 90 (was 91.30)"}


def test_change_data_threshold_change_that_does_not_cross_says_it_is_not_below():
    data = change_data(BELOW_90, "currently 91.30", "", {"value": 95.1, "holds": False},
                       {"value": 91.3, "holds": False})
    assert data["reason"] == "Changed, but 91.30 is not below 90."
    assert (data["before"], data["after"]) == ("95.10", "91.30")
    assert "found" not in data and "judge" not in data and "diff" not in data


def test_change_data_threshold_already_below_says_it_fires_on_the_crossing_only():
    data = change_data(BELOW_90, "currently 87", "", {"value": 88.2, "holds": True}, {"value": 87, "holds": True})
    assert data["reason"] == ("Changed, but 87 was below 90 already: it fires when it crosses, not while it "
                              "stays.")
    assert (data["before"], data["after"]) == ("88.20", "87")


def test_reason_threshold_back_over_the_line_is_not_below():
    assert reason(BELOW_90, "", {"value": 88.2, "holds": True}, {"value": 91, "holds": False}) == \
        "Changed, but 91 is not below 90."


def test_reason_threshold_names_each_operator_in_words():
    check = {"type": "threshold", "op": ">=", "value": 100.5}
    assert reason(check, "", {"value": 90, "holds": False}, {"value": 99, "holds": False}) == \
        "Changed, but 99 is not at or above 100.50."
    assert reason({"type": "threshold", "op": "==", "value": 0}, "", {"value": 3, "holds": False},
                  {"value": 2, "holds": False}) == "Changed, but 2 is not equal to 0."


def test_reason_threshold_fire_takes_the_first_line_of_what_was_found():
    assert reason(BELOW_90, "88.20 is below 90 (was 91.30)\nmore detail", {}, {"value": 88.2}) == \
        "88.20 is below 90 (was 91.30)"


def test_change_data_threshold_without_an_earlier_value_shows_a_dash_before():
    data = change_data(BELOW_90, "currently 91", "", None, {"value": 91, "holds": False})
    assert (data["before"], data["after"]) == ("—", "91")
    assert data["reason"] == "Changed, but 91 is not below 90."


# --- reasons: the judge -------------------------------------------------------------------------------------------

def test_change_data_judge_no_says_the_check_matched_but_the_judge_said_no():
    judged = {"match": False, "summary": "The price is still $120.00.", "model": "default", "tokens": 110}
    data = change_data({"type": "change"}, "currently: 1.1 typo fixes", "", {"text": "1.0"},
                       {"text": "1.1 typo fixes"}, judged)
    assert data["reason"] == "The check matched, but the judge said no: The price is still $120.00."
    assert data["judge"] == judged


def test_change_data_judge_yes_says_the_judge_agreed():
    judged = {"match": True, "summary": "A security fix is announced.", "model": "judge-mini", "tokens": 42}
    data = change_data(BELOW_90, "currently 88", "A security fix is announced.\n88 is below 90 (was 95)",
                       {"value": 95, "holds": False}, {"value": 88, "holds": True}, judged)
    assert data["reason"] == "The check matched and the judge agreed: A security fix is announced."
    assert data["judge"] == judged and (data["before"], data["after"]) == ("95", "88")


def test_reason_judge_without_a_summary_says_no_reason_given():
    assert reason({"type": "change"}, "", {}, {}, {"match": False, "summary": ""}) == \
        "The check matched, but the judge said no: no reason given"


# --- reasons: change and other checks -----------------------------------------------------------------------------

def test_change_data_change_check_gives_the_lines_that_came_and_went():
    before, after = {"text": "Release notes\n1.0 first"}, {"text": "Release notes\n1.1 second\n1.0 first"}
    found = describe_change(before["text"], after["text"])
    data = change_data({"type": "change"}, "currently: Release notes", found, before, after)
    assert data["reason"] == "The watched part changed."
    assert data["diff"] == "+ 1.1 second" and data["found"] == "+ 1.1 second"
    assert "before" not in data and "after" not in data


def test_change_data_text_diff_needs_text_on_both_sides():
    data = change_data({"type": "change"}, "currently: a", "", None, {"text": "a"})
    assert "diff" not in data and "before" not in data


def test_reason_other_check_types_that_fire_name_the_check_and_what_held():
    assert reason({"type": "regex", "pattern": "sold out"}, "matched 'Sold out'\nline two", {}, {}) == \
        "The regex check held: matched 'Sold out'"
    assert reason({"type": "status"}, "status is 'passed' (was 'running')", {}, {}) == \
        "The status check held: status is 'passed' (was 'running')"


def test_reason_other_check_types_that_do_not_fire_say_so():
    assert reason({"type": "regex", "pattern": "x"}, "", {"holds": False}, {"holds": False}) == \
        "Changed, but not in a way the check fires on."
    assert reason({"type": "status"}, "", {"state": "a"}, {"state": "b"}) == \
        "Changed, but not in a way the check fires on."


def test_change_data_caps_what_it_keeps():
    long = "x" * (MAX_SIDE_CHARS + 500)
    data = change_data({"type": "regex"}, long, long, {}, {})
    assert len(data["summary"]) == MAX_SIDE_CHARS and len(data["found"]) == MAX_SIDE_CHARS
    diff = change_data({"type": "change"}, "s", "f", {"text": "a"}, {"text": "a\n" + long})["diff"]
    assert len(diff) == MAX_SIDE_CHARS and diff.endswith("…")


# --- fold ---------------------------------------------------------------------------------------------------------

def test_fold_counts_the_quiet_checks_between_two_check_events_from_their_snapshots():
    """baseline (check 1), three quiet checks (2-4), a change (5), a fire (6): one span of 3 between baseline and
    change, from the older event's time to the newer one's."""
    events = [event("fired", 6, 50), event("changed", 5, 40), event("baseline", 1, 0)]
    items = fold(events, check_count=6, last_checked_at=at(50))
    assert [item["kind"] for item in items] == ["fired", "changed", "quiet", "baseline"]
    assert quiet_spans(items) == [(3, at(0), at(40))]
    assert items[0] is events[0] and items[3] is events[2], "the events themselves pass through"


def test_fold_counts_the_span_after_the_newest_event_up_to_the_last_check():
    events = [event("fired", 6, 50), event("baseline", 1, 0)]
    items = fold(events, check_count=9, last_checked_at=at(80))
    assert [item["kind"] for item in items] == ["quiet", "fired", "quiet", "baseline"]
    assert quiet_spans(items) == [(3, at(50), at(80)), (4, at(0), at(50))]


def test_fold_gives_no_span_when_no_check_was_quiet():
    events = [event("fired", 4, 30), event("changed", 3, 20), event("error", 2, 10), event("baseline", 1, 0)]
    assert fold(events, check_count=4, last_checked_at=at(30)) == events


def test_fold_non_check_events_do_not_count_as_a_check():
    """A pause, resume or decision keeps the counter as it was: the quiet checks before it are those since the
    last check event, and those after it run up to the next one."""
    events = [event("changed", 6, 60), event("resumed", 3, 35), event("paused", 3, 30), event("baseline", 1, 0)]
    items = fold(events, check_count=6, last_checked_at=at(60))
    assert [item["kind"] for item in items] == ["changed", "quiet", "resumed", "paused", "quiet", "baseline"]
    assert quiet_spans(items) == [(2, at(35), at(60)), (2, at(0), at(30))]
    assert sum(span[0] for span in quiet_spans(items)) == 6 - 2, "the counter less the two check events"


def test_fold_a_non_check_event_on_top_with_no_check_since_has_no_span():
    events = [event("decision", 1, 30), event("armed", 1, 0)]
    assert fold(events, check_count=1, last_checked_at=at(0)) == events


def test_fold_quiet_checks_after_a_newest_non_check_event():
    events = [event("paused", 2, 30), event("baseline", 1, 0)]
    items = fold(events, check_count=5, last_checked_at=at(90))
    assert quiet_spans(items) == [(3, at(30), at(90)), (1, at(0), at(30))]


def test_fold_without_a_last_check_time_gives_no_top_span():
    events = [event("baseline", 1, 0)]
    assert fold(events, check_count=4, last_checked_at=None) == events


def test_fold_of_nothing_is_nothing():
    assert fold([], check_count=3, last_checked_at=at(5)) == []


# --- why_not ------------------------------------------------------------------------------------------------------

def test_why_not_is_the_newest_changes_reason():
    events = [event("changed", 5, 40, data={"reason": "Changed, but 91.30 is not below 90."}, detail="currently"),
              event("changed", 3, 20, data={"reason": "older"}), event("baseline", 1, 0)]
    assert why_not(events) == "Changed, but 91.30 is not below 90."


def test_why_not_is_none_once_something_fired_after_the_change():
    events = [event("fired", 6, 50, data={"reason": "88.20 is below 90 (was 91.30)"}),
              event("changed", 5, 40, data={"reason": "Changed, but 91.30 is not below 90."})]
    assert why_not(events) is None


def test_why_not_looks_past_notices_to_the_change():
    events = [event("paused", 5, 45, data={"reason": "Paused by a call"}),
              event("changed", 5, 40, data={"reason": "The check matched, but the judge said no: nope"}),
              event("fired", 3, 20, data={"reason": "fired"})]
    assert why_not(events) == "The check matched, but the judge said no: nope"


def test_why_not_falls_back_to_the_detail_and_is_none_without_a_change():
    assert why_not([event("changed", 2, 10, data={}, detail="currently 91")]) == "currently 91"
    assert why_not([event("baseline", 1, 0, data={"reason": "The first check"})]) is None
    assert why_not([]) is None
