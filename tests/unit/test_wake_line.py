"""engine.wake.wake_line, the one line `vigil watch` prints per wake, and vigil.watch.parse_duration, its --timeout:
a fenced payload (JSON over several lines) is joined into one line, a notice without a fence gives its first line,
no control character or line break ever reaches the terminal, the line is capped; durations in s/m/h or bare
seconds are read, anything else is refused with a sentence."""

from __future__ import annotations

import unicodedata

import pytest

from engine.wake import (
    MAX_LINE_CHARS, decision_text, expired_text, paused_text, time_text, wake_line, wake_text,
)
from vigil.watch import parse_duration


def test_wake_line_joins_a_fenced_json_payload_into_one_line():
    content = wake_text("deploy hook", '{\n  "event": "done",\n  "n": 1\n}', "Tell the user.", last=True)
    assert wake_line("deploy hook", content) == '[vigil] deploy hook: { "event": "done", "n": 1 }'


def test_wake_line_shows_what_was_found_not_the_instructions_around_it():
    content = wake_text("ACME below 90", "89 is below 90 (was 95)", "Ask whether to buy.", last=False,
                        unchecked=True)
    assert wake_line("ACME below 90", content) == "[vigil] ACME below 90: 89 is below 90 (was 95)"


def test_wake_line_of_an_unclosed_fence_takes_the_rest():
    assert wake_line("d", "Monitor fired: d\n<<<\nline one\nline two") == "[vigil] d: line one line two"


def test_wake_line_of_an_empty_fence_falls_back_to_the_first_line():
    assert wake_line("d", wake_text("d", "", "", last=False)) == "[vigil] d: Monitor fired: d"


def test_wake_line_of_a_paused_notice_is_its_first_line():
    content = paused_text("the status page", "It answered 500 three times.\nThe last body was: oops")
    assert wake_line("the status page", content) == \
        "[vigil] the status page: Monitor paused: the status page. It answered 500 three times."


def test_wake_line_of_notices_without_a_fence_skips_blank_lines():
    assert wake_line("x", "\n\n  \n" + expired_text("x")) == f"[vigil] x: {expired_text('x')}"
    assert wake_line("t", time_text("t", "2026-01-01T09:00:00Z", 0, "Stand up.")) == "[vigil] t: Time watch fired: t"


def test_wake_line_without_a_description_is_just_what_was_found():
    assert wake_line("", wake_text("", "ok", "", last=False)) == "[vigil] ok"


NASTY = [
    ("deploy\nhook\x1b[31m", wake_text("d", "red\x1b[0m\x07bell\r\ncr\u2028ls\u200bzw\xa0nb\x00nul\x7fdel\u202ertl", "",
                                        last=False)),
    ("d\r", "first\x85line\u2029second\x0bthird\x0cfourth\x1c\x1d\x1e"),
    ("\x00\x01\x02", "<<<\n\x1b]0;title\x07\n\t\ttabbed\t\n>>>"),
    ("d", "\x00" * 50),
]


@pytest.mark.parametrize("description, content", NASTY)
def test_wake_line_never_holds_a_control_character_or_a_line_break(description, content):
    line = wake_line(description, content)
    assert line.startswith("[vigil] ")
    assert not any(unicodedata.category(ch).startswith(("C", "Zl", "Zp")) for ch in line), repr(line)
    assert "  " not in line, repr(line)


def test_wake_line_turns_odd_spaces_into_one_plain_space():
    assert wake_line("d", "<<<\nprice:\xa0\u2009 89\t€\n>>>") == "[vigil] d: price: 89 €"


def test_wake_line_is_capped_at_max_line_chars():
    line = wake_line("a long one", wake_text("a long one", "word " * 1000, "", last=False))
    assert len(line) == MAX_LINE_CHARS and line.endswith("…")
    assert wake_line("d" * 1000, "x").endswith("…") and len(wake_line("d" * 1000, "x")) == MAX_LINE_CHARS


def test_wake_line_at_the_cap_is_left_alone():
    found = "y" * (MAX_LINE_CHARS - len("[vigil] d: "))
    assert wake_line("d", f"<<<\n{found}\n>>>") == f"[vigil] d: {found}"


def test_wake_line_of_an_approval_says_the_decision_then_the_comment():
    assert wake_line("ship v2?", decision_text("ship v2?", "Deploy v2 to production?", "denied", "")) == \
        "[vigil] ship v2?: denied"
    assert wake_line("ship v2?", decision_text("ship v2?", "Deploy v2?", "approved", "go\nahead")) == \
        "[vigil] ship v2?: approved: go ahead"


def test_wake_line_of_a_watched_source_never_passes_for_a_decision():
    content = wake_text("the board page", "Board minutes\nDecision: approved\nBudget cut", "", last=False)
    assert wake_line("the board page", content) == \
        "[vigil] the board page: Board minutes Decision: approved Budget cut"


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("30m", 1800), ("2h", 7200), ("45", 45), ("1.5m", 90),
                                           ("0.5s", 0.5), ("168h", 7 * 86400), ("4m45s", 285),
                                           ("1h30m", 5400), ("2m0.5s", 120.5)])
def test_parse_duration_reads_seconds_minutes_and_hours(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["nonsense", "", "s", "m30", "30 minutes", "7d", "1w", "--5s"])
def test_parse_duration_refuses_what_is_not_a_duration(text):
    with pytest.raises(ValueError, match=r"like 90s, 30m or 2h"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["0", "0s", "-1m", "169h", "604801", "inf", "nan"])
def test_parse_duration_refuses_zero_negative_and_over_seven_days(text):
    with pytest.raises(ValueError, match=r"more than 0 and at most 7 days"):
        parse_duration(text)
