"""cel over a watched document (seed 001's dynadata_doc): `doc`, has() guards, maps.get and edge-triggering."""

import json
from datetime import datetime, timezone

import pytest

from engine.checks import cel as module
from engine.checks import parse_check
from engine.checks.cel import decide_here, maps_get, reads_now
from engine.content import json_content
from engine.errors import ContentError

NOW = datetime(2026, 10, 9, 12, 0, tzinfo=timezone.utc)
JOB = {"status": "done", "outputs": {"txt": "hello", "files": [{"name": "a.txt"}, {"name": "b.srt"}]},
       "progress": None}


def here(expr: str, document: dict) -> bool:
    """In this process, with the document as the child would get it (numbers as doubles)."""
    converted = module.to_cel(document)
    return decide_here(expr, {"doc": converted, "data": converted})


def content(**document):
    return json_content(json.dumps(document).encode())


def cel(expr: str):
    return parse_check({"type": "cel", "expr": expr})


def readings(expr: str, documents: list[dict]) -> list[bool]:
    """Whether each reading fires, each one given the state the one before left (the first starts from none)."""
    check, state, fired = cel(expr), {"holds": False}, []
    for document in documents:
        verdict = module.evaluate(check, content(**document), state, NOW)
        fired.append(verdict.fired)
        state = verdict.state
    return fired


# --- doc: the document under seed 001's name -------------------------------------------------------------------

def test_doc_reads_the_document_in_process():
    assert here("doc.status == 'done' && doc.outputs.txt == 'hello'", JOB) is True
    assert here("doc.status == 'failed'", JOB) is False


def test_doc_is_the_same_data_in_evaluate():
    check = cel("doc.status == 'done' && doc.outputs.files[1].name == 'b.srt' && doc == data")
    assert module.evaluate(check, content(**JOB), {}, NOW).state["holds"] is True


def test_doc_numbers_compare_with_int_literals_and_sizes_without_a_type_error():
    assert readings("doc.progress >= 100 && size(doc.parts) == doc.expected",
                    [{"progress": 40, "parts": [1], "expected": 2},
                     {"progress": 100.0, "parts": [1, 2], "expected": 2}]) == [False, True]


def test_doc_has_guard_keeps_waiting_for_an_absent_field():
    assert here("has(doc.outputs.pdf) && doc.outputs.pdf != ''", JOB) is False
    assert here("has(doc.status) && doc.status == 'ready'", {"other": 1.0}) is False
    assert here("has(doc.outputs.txt) && doc.outputs.txt != ''", JOB) is True


# --- maps.get(doc, 'a.b', default) -----------------------------------------------------------------------------

@pytest.mark.parametrize("expr", [
    "maps.get(doc, 'outputs.txt', '') == 'hello'",            # nested maps
    "maps.get(doc, 'outputs.files.1.name', '') == 'b.srt'",   # a number indexes a list
    "maps.get(doc, 'outputs.files.0', {}).name == 'a.txt'",
    "maps.get(doc, 'status', 'none') == 'done'",
    "maps.get(doc, 'progress', 0.0) == null",                 # present but null is the value, not the default
])
def test_maps_get_reads_the_value_at_the_path(expr):
    assert here(expr, JOB) is True


@pytest.mark.parametrize("path", [
    "outputs.pdf",          # missing key
    "missing.deeper.still",
    "outputs.files.5.name",  # index past the end
    "outputs.files.-1",     # not a list index
    "outputs.files.²",      # a digit to str.isdigit, not to int()
    "outputs.files.name",   # a word on a list
    "status.length",        # a string in the middle of the path
    "progress.value",       # null in the middle of the path
])
def test_maps_get_gives_the_default_when_the_path_is_not_there(path):
    assert here(f"maps.get(doc, '{path}', 'fallback') == 'fallback'", JOB) is True


def test_maps_get_without_default_gives_null():
    assert here("maps.get(doc, 'outputs.pdf') == null", JOB) is True


def test_maps_get_safe_read_lets_the_condition_wait_then_hold():
    expr = "maps.get(doc, 'outputs.txt', '') != ''"
    assert here(expr, {"status": "running"}) is False
    assert here(expr, {"status": "running", "outputs": {}}) is False
    assert here(expr, JOB) is True


def test_maps_get_python_function_follows_the_same_rules():
    assert maps_get(JOB, "outputs.files.0.name") == "a.txt"
    assert maps_get(JOB, "outputs.nope", 7) == 7
    assert maps_get(JOB, "") is JOB
    assert maps_get("not a map", "a", "d") == "d"


def test_maps_get_with_a_non_string_path_is_a_clear_error():
    with pytest.raises(ContentError) as error:
        here("maps.get(doc, 3, '') == ''", JOB)
    message = str(error.value)
    assert message.startswith("the condition could not be evaluated:")
    assert "maps.get takes a dotted path as text" in message
    with pytest.raises(ValueError, match="dotted path as text"):
        maps_get(JOB, ["outputs", "txt"])


def test_maps_get_non_string_path_error_keeps_its_example():
    with pytest.raises(ContentError) as error:
        here("maps.get(doc, 3, '') == ''", JOB)
    assert "maps.get(doc, 'outputs.txt', '')" in str(error.value)


# --- an unguarded missing field ----------------------------------------------------------------------------------

def test_unguarded_missing_field_suggests_has_and_maps_get():
    with pytest.raises(ContentError) as error:
        here("doc.status == 'ready'", {"other": 1.0})
    message = str(error.value)
    assert "('status')" in message
    assert "has(doc.status)" in message and "maps.get(doc, 'status', default)" in message


def test_unguarded_missing_field_is_a_content_error_from_evaluate_too():
    with pytest.raises(ContentError, match=r"guard it with has\(doc\.status\)"):
        module.evaluate(cel("doc.status == 'ready'"), content(other=1), {"holds": False}, NOW)


def test_unguarded_nested_field_hint_names_the_whole_path():
    # seed 001's own example of an unguarded condition
    with pytest.raises(ContentError) as error:
        here("doc.outputs.txt != ''", {"outputs": {}})
    message = str(error.value)
    assert "has(doc.outputs.txt)" in message and "maps.get(doc, 'outputs.txt', default)" in message


# --- reads_now -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("expr, expected", [
    ("now > timestamp(doc.due)", True),
    ("has(doc.due) && timestamp(doc.due) < now", True),
    ("doc.status == 'done'", False),
    ("doc.now == 1.0", False),   # a field called now is not the clock
    ("maps.get(doc, 'now', '') == 'x'", False),
    ("1 +", False),              # does not compile: not a condition that reads the clock
])
def test_reads_now_says_whether_the_condition_reads_the_clock(expr, expected):
    assert reads_now(expr) is expected


# --- evaluate(): edge-triggered over the document ----------------------------------------------------------------

def test_evaluate_fires_when_it_becomes_true_and_not_while_it_holds():
    fired = readings("doc.status == 'done'", [{"status": "rendering"}, {"status": "done"},
                                              {"status": "done", "url": "https://example.com/r.mp4"}])
    assert fired == [False, True, False]


def test_evaluate_fires_again_after_it_stopped_holding():
    fired = readings("doc.status == 'done'", [{"status": "done"}, {"status": "rendering"}, {"status": "done"}])
    assert fired == [True, False, True]


def test_evaluate_true_at_a_previous_that_already_held_does_not_fire():
    verdict = module.evaluate(cel("doc.status == 'done'"), content(status="done"), {"holds": True}, NOW)
    assert verdict.fired is False and verdict.state["holds"] is True
    assert verdict.summary == "the condition is true now"


def test_evaluate_fired_verdict_names_the_condition_and_keeps_the_document():
    verdict = module.evaluate(cel("doc.status == 'done'"), content(status="done", n=2), {"holds": False}, NOW)
    assert verdict.fired is True
    assert verdict.found == "the condition is now true: doc.status == 'done'"
    assert verdict.state == {"holds": True, "data": {"status": "done", "n": 2}}
    assert verdict.fact == content(status="done", n=2).digest[:16]


def test_evaluate_false_keeps_the_watch_armed_without_firing():
    verdict = module.evaluate(cel("maps.get(doc, 'outputs.txt', '') != ''"), content(status="running"),
                              {"holds": False}, NOW)
    assert verdict.fired is False and verdict.state["holds"] is False
    assert verdict.summary == "the condition is false now"


def test_evaluate_doc_reads_now_against_the_time_passed_in():
    check = cel("has(doc.due) && timestamp(doc.due) < now")
    document = content(due="2026-10-09T11:00:00Z")
    assert module.evaluate(check, document, {"holds": False}, NOW).fired is True
    earlier = datetime(2026, 10, 9, 10, 0, tzinfo=timezone.utc)
    assert module.evaluate(check, document, {"holds": False}, earlier).fired is False
