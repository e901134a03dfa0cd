"""cel: a CEL condition over data, text, value, previous and now; edge-triggered."""

import json
from datetime import datetime, timedelta, timezone

import pytest

from engine.checks import baseline, evaluate, parse_check
from engine.checks import cel as module
from engine.content import Content, ContentError, json_content
from engine.errors import SpecError
from engine.streams import waking_lines

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=timezone.utc)


def cel(expr, **fields):
    return parse_check({"type": "cel", "expr": expr, **fields})


def doc(**data) -> Content:
    return json_content(json.dumps(data).encode())


def steps(check, contents, now=NOW):
    verdict = baseline(check, contents[0], now)
    out = []
    for content in contents[1:]:
        verdict = evaluate(check, content, verdict.state, now)
        out.append(verdict)
    return out


def holds(expr, content, previous=None, now=NOW, **fields) -> bool:
    return evaluate(cel(expr, **fields), content, previous or {}, now).state["holds"]


def test_parse_keeps_expr_and_value_path():
    check = cel("value < 90.0", value_path="data.price")
    assert (check.type, check.expr, check.value_path) == ("cel", "value < 90.0", "data.price")


@pytest.mark.parametrize("raw, field", [
    ({"type": "cel"}, "expr"),
    ({"type": "cel", "expr": "  "}, "expr"),
    ({"type": "cel", "expr": 3}, "expr"),
    ({"type": "cel", "expr": "1 +"}, "expr"),
    ({"type": "cel", "expr": "data.x == " + "1 + " * 600 + "1"}, "expr"),
    ({"type": "cel", "expr": "true", "value_path": "a..b"}, "value_path"),
    ({"type": "cel", "expr": "true", "pattern": "x"}, "pattern"),
])
def test_parse_refuses_bad_fields(raw, field):
    with pytest.raises(SpecError) as error:
        parse_check(raw)
    assert field in str(error.value)


def test_syntax_error_quotes_the_library_briefly():
    with pytest.raises(SpecError) as error:
        cel("data.status == 'done' &&")
    message = str(error.value)
    assert message.startswith("check.expr is not valid CEL: at column 25: Syntax error: mismatched input '<EOF>'")
    assert len(message) < 250 and "\n" not in message


def test_becoming_true_fires_once():
    check = cel("has(data.status) && data.status == 'done'")
    verdicts = steps(check, [doc(status="running"), doc(status="done"), doc(status="done", n=1)])
    assert [v.fired for v in verdicts] == [True, False]
    assert verdicts[0].found == "the condition is now true: has(data.status) && data.status == 'done'"
    assert verdicts[0].state == {"holds": True, "data": {"status": "done"}}
    assert verdicts[0].fact


def test_false_then_true_again_fires_again():
    verdicts = steps(cel("data.up == false"), [doc(up=True), doc(up=False), doc(up=True), doc(up=False)])
    assert [v.fired for v in verdicts] == [True, False, True]


def test_true_at_baseline_does_not_fire_while_it_stays_true():
    verdict = baseline(cel("data.up"), doc(up=True), NOW)
    assert not verdict.fired and verdict.summary == "the condition is true now"
    assert not evaluate(cel("data.up"), doc(up=True, x=1), verdict.state, NOW).fired


def test_missing_field_is_a_content_error():
    with pytest.raises(ContentError, match=r"does not have \('status'\); guard it with has\(data.status\)"):
        baseline(cel("data.status == 'done'"), doc(other=1), NOW)


def test_has_guard_keeps_waiting():
    assert holds("has(data.status) && data.status == 'done'", doc(other=1)) is False


def test_nested_json_converts():
    content = doc(jobs=[{"name": "a", "steps": [{"ok": True}, {"ok": None}]}, {"name": "b", "meta": {}}])
    assert holds("data.jobs[0].steps[0].ok && data.jobs[0].steps[1].ok == null", content)
    assert holds("size(data.jobs) == 2 && data.jobs.exists(j, j.name == 'b' && size(j.meta) == 0)", content)
    assert holds("!has(data.jobs[1].steps)", content)


def test_json_numbers_are_doubles_so_types_do_not_flip():
    assert holds("data.n == 95 && data.n > 90 && data.n + 1.0 == 96.0", doc(n=95))
    assert holds("data.n + 1.0 > 96.0", doc(n=95.5))
    assert holds("type(data.n) == double", doc(n=95))
    with pytest.raises(ContentError, match="could not be evaluated: Unsupported operation: float \\+ int "
                                           "\\(CEL compares int and double, but does not mix types in arithmetic"):
        holds("data.n + 1 > 0", doc(n=95))


@pytest.mark.parametrize("expr, expected", [
    ("data.price < 100", True), ("data.price <= 99", False), ("data.price > 99", True), ("data.price >= 100", False),
    ("data.price == 99.5 && data.whole == 3 && data.whole != 4", True), ("data.whole == 3u && 2u < data.price", True),
    ("1 < 2.5 && 3 == 3.0 && 3u == 3.0 && 2.5 > 2 && 2 <= 2.0 && 3.0 >= 3u", True),
    ("size(data.items) < data.price && size(data.items) == data.whole", True),
])
def test_numbers_compare_across_int_uint_and_double(expr, expected):
    """JSON numbers are doubles; an int or uint literal, or size(), compares with them as CEL says it does."""
    assert holds(expr, doc(price=99.5, whole=3, items=[1, 2, 3])) is expected


def test_stream_line_filter_compares_a_double_with_an_int():
    """Seed 002's CEL over `line`: a line the filter can't evaluate wakes anyway, so a type error would wake all."""
    load = cel("double(line) > 2 && size(line) < 3.5")
    assert waking_lines(load, ["1.5", "2.5", "3", "10.25"]) == ["2.5", "3"]


def test_index_out_of_range_is_a_content_error():
    with pytest.raises(ContentError, match="index out of bounds"):
        holds("data.items[3] == 1", doc(items=[1]))


def test_type_error_is_a_content_error_in_one_sentence():
    with pytest.raises(ContentError) as error:
        holds("data.name > 1", doc(name="x"))
    assert str(error.value).startswith("the condition could not be evaluated: No such overload: the operation is "
                                       "not defined for the given operand types (CEL compares int and double, but does not mix types")
    assert "\n" not in str(error.value)


def test_unknown_variable_is_a_content_error():
    with pytest.raises(ContentError, match="Undefined variable or function: 'price'"):
        holds("price > 3.0", doc(price=1))


def test_non_bool_result_is_a_content_error():
    with pytest.raises(ContentError, match="must be true or false; it gave 'done'"):
        holds("data.status", doc(status="done"))
    with pytest.raises(ContentError, match="it gave 3.0"):
        holds("data.n", doc(n=3))


def test_previous_compares_with_the_last_reading():
    check = cel("data.count > previous.count")
    verdicts = steps(check, [doc(count=1), doc(count=2), doc(count=3), doc(count=2), doc(count=4)])
    assert [v.fired for v in verdicts] == [True, False, False, True]


def test_previous_on_the_first_reading_is_the_current_data():
    verdict = baseline(cel("data.count == previous.count"), doc(count=1), NOW)
    assert verdict.state["holds"] is True


def test_previous_is_null_after_data_too_large_to_store(monkeypatch):
    monkeypatch.setattr(module, "MAX_STATE_DATA_BYTES", 50)
    check = cel("previous == null")
    first = baseline(check, doc(blob="x" * 100), NOW)
    assert first.state["data"] is None
    assert evaluate(check, doc(blob="y"), first.state, NOW).fired


def test_now_is_a_timestamp():
    assert holds('now > timestamp("2020-01-01T00:00:00Z")', doc(a=1))
    assert holds('now - timestamp("2025-06-01T00:00:00Z") == duration("12h")', doc(a=1))
    assert holds("now.getFullYear() == 2025", doc(a=1))
    later = NOW + timedelta(days=400)
    assert holds("now.getFullYear() == 2026", doc(a=1), now=later)


def test_naive_now_is_taken_as_utc():
    assert holds('now == timestamp("2025-06-01T12:00:00Z")', doc(a=1), now=NOW.replace(tzinfo=None))


def test_data_time_fields_compare_with_now():
    assert holds("timestamp(data.due) < now", doc(due="2025-05-01T00:00:00Z"))


def test_text_and_value_on_a_page():
    page = Content(text="Price: $89.50 today")
    assert holds("data == null && text.contains('Price') && value < 90.0", page)


def test_value_at_value_path():
    assert holds("value == 7.0", doc(a={"b": 7}), value_path="a.b")


def test_unreadable_value_is_null():
    assert holds("value == null", Content(text="no digits here"))
    assert holds("value == null", doc(a={"b": "n/a"}), value_path="a.b")
    assert holds("value == null", doc(a=1), value_path="missing")


def test_division_by_zero_is_a_content_error():
    with pytest.raises(ContentError, match="division by zero"):
        holds("1 / 0 == 1", doc(a=1))


def test_deeply_nested_json_is_a_content_error():
    deep = {}
    node = deep
    for _ in range(150):
        node["a"] = {}
        node = node["a"]
    with pytest.raises(ContentError, match="nested more than"):
        holds("true", json_content(json.dumps(deep).encode()))


# --- conditions that cost too much: evaluated in a child process with a deadline --------------------------------

CUBIC = "data.items.all(x, data.items.all(y, data.items.all(z, z >= 0.0)))"
MANY = doc(items=list(range(1000)))  # CUBIC over it: 10^9 steps, minutes of native code


def test_a_condition_past_its_deadline_is_stopped_and_this_process_kept_running():
    import threading
    import time

    ticks, stop = [0], threading.Event()

    def other_work() -> None:  # another thread of the worker: it must not be frozen meanwhile
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    thread = threading.Thread(target=other_work)
    thread.start()
    try:
        with pytest.raises(ContentError, match=r"took longer than 2 s to evaluate and was stopped; simplify it"):
            holds(CUBIC, MANY)
    finally:
        stop.set()
        thread.join()
    assert ticks[0] > 100, "the evaluation held the GIL: other threads of this process stood still"
    assert holds("size(data.items) == 1000", MANY) is True, "the next condition needs a working evaluator"


def test_quadratic_membership_is_stopped_too():
    """`in` over a list inside a comprehension: no nesting of macros, still n² steps."""
    big = doc(items=list(range(200_000)))
    with pytest.raises(ContentError, match="took longer than"):
        holds("data.items.all(x, x in data.items)", big)


def test_an_evaluator_that_died_between_checks_is_replaced_without_an_error():
    import os
    import signal

    assert holds("size(data.items) > 3", MANY) is True
    os.kill(module._runner._child.pid, signal.SIGKILL)
    module._runner._child.wait()
    assert holds("size(data.items) > 3", MANY) is True
