"""regex: edge-triggered pattern checks under a time limit."""

import time

import pytest

from engine.checks import baseline, evaluate, parse_check
from engine.content import Content, ContentError
from engine.errors import SpecError


def rx(pattern, **fields):
    return parse_check({"type": "regex", "pattern": pattern, **fields})


def steps(check, texts):
    verdict = baseline(check, Content(text=texts[0]))
    out = []
    for text in texts[1:]:
        verdict = evaluate(check, Content(text=text), verdict.state)
        out.append(verdict)
    return out


def test_parse_defaults_to_match():
    check = rx(r"In stock")
    assert (check.type, check.pattern, check.when) == ("regex", "In stock", "match")
    assert rx("x", when="no_match").when == "no_match"


@pytest.mark.parametrize("raw, field", [
    ({"type": "regex"}, "pattern"),
    ({"type": "regex", "pattern": ""}, "pattern"),
    ({"type": "regex", "pattern": 5}, "pattern"),
    ({"type": "regex", "pattern": "(unclosed"}, "pattern"),
    ({"type": "regex", "pattern": "a{3,1}"}, "pattern"),
    ({"type": "regex", "pattern": "a" * 1001}, "pattern"),
    ({"type": "regex", "pattern": "a", "when": "sometimes"}, "when"),
    ({"type": "regex", "pattern": "a", "value": 3}, "value"),
])
def test_parse_refuses_bad_fields(raw, field):
    with pytest.raises(SpecError) as error:
        parse_check(raw)
    assert field in str(error.value)


def test_invalid_pattern_says_why():
    with pytest.raises(SpecError, match="not a valid regular expression: missing \\)"):
        rx("(unclosed")


def test_starting_to_match_fires_once_with_the_match():
    first, second = steps(rx(r"Back in stock: \d+"), ["Sold out", "Back in stock: 12 left", "Back in stock: 12"])
    assert first.fired and first.found == "the pattern matches 'Back in stock: 12'"
    assert first.fact == "Back in stock: 12"
    assert not second.fired, "still matching is not a new fact"


def test_stops_and_starts_again_fires_again():
    verdicts = steps(rx("open"), ["closed", "open", "closed", "open"])
    assert [v.fired for v in verdicts] == [True, False, True]


def test_baseline_match_does_not_fire_later():
    verdicts = steps(rx("open"), ["open now", "open today"])
    assert not verdicts[0].fired


def test_no_match_fires_when_the_pattern_disappears():
    verdicts = steps(rx("Sold out", when="no_match"), ["Sold out", "Sold out!", "Available", "Available!", "Sold out"])
    assert [v.fired for v in verdicts] == [False, True, False, False]
    assert verdicts[1].found == "the pattern no longer matches" and verdicts[1].fact == "no match"


def test_inline_flags_work():
    assert steps(rx("(?i)sold out"), ["x", "SOLD OUT"])[0].fired


def test_long_match_is_cut_and_fact_is_short():
    verdict = steps(rx("a+"), ["b", "a" * 5000])[0]
    assert len(verdict.found) < 250 and verdict.fact.startswith("sha256:")


def test_nested_repeat_that_the_engine_handles_is_fast():
    started = time.monotonic()
    verdict = baseline(rx(r"(a+)+$"), Content(text="a" * 50 + "b"))
    # a bound, not a timing: unguarded, this backtracking runs for years; 10 s holds on a loaded 2-core machine
    assert time.monotonic() - started < 10 and verdict.summary == "the pattern does not match"


def test_catastrophic_pattern_is_cut_off_as_a_content_error():
    started = time.monotonic()
    with pytest.raises(ContentError, match="the pattern took too long on this content"):
        baseline(rx(r"(a|aa)+$"), Content(text="a" * 50 + "b"))
    assert time.monotonic() - started < 10  # cut off (unguarded it never ends), however loaded the machine
