import pytest

from engine.checks import (CheckSpec, baseline, describe_change, evaluate, format_number, normalize_op,
                           read_number)
from engine.content import Content, ContentError, json_content


def text(value: str) -> Content:
    return Content(text=value)


def below(target, value_path=None) -> CheckSpec:
    return CheckSpec(type="threshold", op="<", value=target, value_path=value_path)


# --- reading the number ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("page, number", [
    ("Price: $1,234.50", 1234.5),
    ("Temperature −3 °C", -3.0),
    ("Delta: -7.25 today", -7.25),
    ("12345 visitors", 12345.0),
    ("Sold 3 of 10", 3.0),
    ("Total 1,000,000 units and 5 more", 1000000.0),
    ("95.1", 95.1),
])
def test_read_number_takes_the_first_number_in_text(page, number):
    assert read_number(below(0), text(page)) == number


def test_read_number_reads_value_path_in_json():
    content = json_content(b'{"data": {"jobs": [{"remaining": 4}, {"remaining": 9}]}}')
    assert read_number(below(0, "data.jobs[1].remaining"), content) == 9.0
    assert read_number(below(0, "jobs[0].remaining"), json_content(b'{"jobs": [{"remaining": 4}]}')) == 4.0


@pytest.mark.parametrize("raw, number", [('"95.5"', 95.5), ('"1,234.5"', 1234.5), ('" 7 "', 7.0), ('"−2"', -2.0),
                                         ("12", 12.0), ("0.5", 0.5)])
def test_read_number_accepts_numeric_strings_in_json(raw, number):
    content = json_content(b'{"v": ' + raw.encode() + b"}")
    assert read_number(below(0, "v"), content) == number


@pytest.mark.parametrize("raw", ['"ninety"', "true", "null", "[1]", '{"x": 1}', '"nan"', '"inf"', '""', "1e400"])
def test_read_number_refuses_a_json_value_that_is_not_a_number(raw):
    content = json_content(b'{"v": ' + raw.encode() + b"}")
    with pytest.raises(ContentError, match="not a"):
        read_number(below(0, "v"), content)


@pytest.mark.parametrize("path", ["w", "v[0]", "v.x", "data.w"])
def test_read_number_missing_path_is_a_content_error_naming_it(path):
    with pytest.raises(ContentError, match=path.replace("[", r"\[").replace("]", r"\]")):
        read_number(below(0, path), json_content(b'{"v": 5}'))


def test_read_number_value_path_on_text_is_a_content_error():
    with pytest.raises(ContentError):
        read_number(below(0, "v"), text("v is 5"))


@pytest.mark.parametrize("page", ["", "no digits here", "Price: call us"])
def test_read_number_no_number_in_text_is_a_content_error(page):
    with pytest.raises(ContentError, match="no number"):
        read_number(below(0), text(page))


# --- operators --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("op, symbol", [
    ("<", "<"), ("<=", "<="), (">", ">"), (">=", ">="), ("==", "=="), ("!=", "!="), ("=", "=="),
    ("below", "<"), ("under", "<"), ("less than", "<"), ("Less Than", "<"), ("less-than", "<"), ("lt", "<"),
    ("above", ">"), ("over", ">"), ("greater than", ">"), ("gt", ">"),
    ("at_most", "<="), ("at most", "<="), ("lte", "<="),
    ("at_least", ">="), ("at least", ">="), ("gte", ">="),
    ("equals", "=="), ("equal", "=="), ("eq", "=="),
    ("not_equals", "!="), ("not equals", "!="), ("ne", "!="),
    ("  BELOW ", "<"),
])
def test_normalize_op_maps_symbols_and_words(op, symbol):
    assert normalize_op(op) == symbol


@pytest.mark.parametrize("op", ["approximately", "", "<>", "=<", "around", None, 1, True, ["<"]])
def test_normalize_op_refuses_unknown_ops(op):
    assert normalize_op(op) is None


@pytest.mark.parametrize("op, value, holds", [
    ("<", 89, True), ("<", 90, False), ("<=", 90, True), ("<=", 91, False),
    (">", 91, True), (">", 90, False), (">=", 90, True), (">=", 89, False),
    ("==", 90, True), ("==", 90.5, False), ("!=", 90.5, True), ("!=", 90, False),
])
def test_threshold_compares_with_each_op(op, value, holds):
    check = CheckSpec(type="threshold", op=op, value=90)
    verdict = evaluate(check, text(f"value {value}"), {"value": 0.0, "holds": False})
    assert verdict.fired is holds
    assert verdict.state == {"value": float(value), "holds": holds}


# --- edge triggering --------------------------------------------------------------------------------------------------

def run_sequence(check, values):
    """Baseline on the first value, then evaluate each next value against the stored state."""
    state = baseline(check, text(f"Price: {values[0]}")).state
    fired = []
    for value in values[1:]:
        verdict = evaluate(check, text(f"Price: {value}"), state)
        fired.append(verdict.fired)
        state = verdict.state
    return fired


def test_threshold_baseline_below_threshold_does_not_fire():
    verdict = baseline(below(90), text("Price: 85"))
    assert verdict.fired is False
    assert verdict.found == ""
    assert verdict.state["holds"] is True


def test_threshold_baseline_already_holding_does_not_fire_while_it_keeps_holding():
    assert run_sequence(below(90), [85, 84, 80]) == [False, False]


def test_threshold_fires_once_when_the_value_crosses():
    assert run_sequence(below(90), [95, 89]) == [True]


def test_threshold_does_not_fire_again_while_the_condition_still_holds():
    assert run_sequence(below(90), [95, 89, 88]) == [True, False]


def test_threshold_fires_again_after_the_value_goes_back():
    assert run_sequence(below(90), [95, 89, 88, 91, 89]) == [True, False, False, True]


def test_threshold_fires_after_baseline_that_held_once_it_went_back():
    assert run_sequence(below(90), [85, 92, 80]) == [False, True]


def test_threshold_found_names_value_op_target_and_previous_value():
    state = baseline(below(90), text("Price: 95")).state
    verdict = evaluate(below(90), text("Price: 89"), state)
    assert verdict.fired
    assert verdict.found == "89 is below 90 (was 95)"
    assert verdict.fact == "89"
    assert verdict.summary == "currently 89"


@pytest.mark.parametrize("op, word", [("<=", "at or below"), (">", "above"), (">=", "at or above"),
                                      ("==", "equal to"), ("!=", "not equal to")])
def test_threshold_found_uses_the_op_word(op, word):
    check = CheckSpec(type="threshold", op=op, value=90)
    verdict = evaluate(check, text("90" if op in ("<=", ">=", "==") else "95.1"), {"value": 1.5, "holds": False})
    assert verdict.fired
    assert f" {word} 90 (was 1.50)" in verdict.found


def test_threshold_found_without_previous_value_leaves_out_was():
    verdict = evaluate(below(90), text("80"), {})
    assert verdict.fired and verdict.found == "80 is below 90"


def test_threshold_not_fired_has_no_found_text():
    verdict = evaluate(below(90), text("95"), {"value": 96.0, "holds": False})
    assert verdict.fired is False
    assert verdict.found == ""
    assert verdict.summary == "currently 95"


def test_threshold_reads_value_path_through_evaluate():
    check = CheckSpec(type="threshold", op="==", value=0, value_path="data.jobs[0].remaining")
    before = baseline(check, json_content(b'{"jobs": [{"remaining": 3}]}')).state
    verdict = evaluate(check, json_content(b'{"jobs": [{"remaining": 0}]}'), before)
    assert verdict.fired
    assert verdict.found == "0 is equal to 0 (was 3)"


def test_threshold_unreadable_content_raises_content_error():
    with pytest.raises(ContentError):
        evaluate(below(90), text("nothing"), {"value": 95.0, "holds": False})


# --- change check -----------------------------------------------------------------------------------------------------

def test_change_baseline_never_fires():
    verdict = baseline(CheckSpec(), text("hello\nworld"))
    assert verdict.fired is False
    assert verdict.found == ""
    assert verdict.state == {"text": "hello\nworld"}
    assert "hello world" in verdict.summary


def test_change_fires_on_any_change_with_added_and_removed_lines():
    state = baseline(CheckSpec(), text("title\nprice 95\nin stock")).state
    verdict = evaluate(CheckSpec(), text("title\nprice 89\nin stock\nsale!"), state)
    assert verdict.fired is True
    lines = verdict.found.splitlines()
    assert "+ price 89" in lines
    assert "+ sale!" in lines
    assert "- price 95" in lines
    assert "+ title" not in lines and "- title" not in lines
    assert lines.index("+ price 89") < lines.index("- price 95")  # what appeared first
    assert verdict.state == {"text": "title\nprice 89\nin stock\nsale!"}
    assert verdict.fact


def test_change_fires_on_a_single_character_change():
    state = baseline(CheckSpec(), text("v1.0.0")).state
    verdict = evaluate(CheckSpec(), text("v1.0.1"), state)
    assert verdict.fired
    assert verdict.found == "+ v1.0.1\n- v1.0.0"


def test_change_fact_differs_for_different_content():
    state = baseline(CheckSpec(), text("a")).state
    assert evaluate(CheckSpec(), text("b"), state).fact != evaluate(CheckSpec(), text("c"), state).fact


def test_describe_change_is_capped():
    found = describe_change("", "\n".join(f"line {i}" for i in range(1000)), limit=100)
    assert len(found) == 100 and found.endswith("…")


def test_describe_change_order_only_change_still_says_something():
    assert describe_change("a\nb", "a\nb\n") == "the content changed (whitespace or order only)"


def test_change_state_text_is_bounded():
    verdict = baseline(CheckSpec(), text("x" * 100_000))
    assert len(verdict.state["text"]) <= 32 * 1024


# --- formatting -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, shown", [(95.1, "95.10"), (90.0, "90"), (90, "90"), (-3.0, "-3"), (1234.5, "1234.50"),
                                          (0.000123, "0.000123"), (0.5, "0.50")])
def test_format_number(value, shown):
    assert format_number(value) == shown
