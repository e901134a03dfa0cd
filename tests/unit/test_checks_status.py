"""status: fires on entering a state that matters, once per entry."""

import pytest

from engine.checks import baseline, evaluate, parse_check
from engine.content import Content, ContentError, json_content
from engine.errors import SpecError

DONE = ["success", "failure", "cancelled"]


def status(values=DONE, path="data.status"):
    return parse_check({"type": "status", "value_path": path, "values": values})


def doc(value) -> Content:
    import json
    return json_content(json.dumps({"run": {"status": value}, "status": value}).encode())


def run(check, states):
    """Baseline on the first state, then evaluate each next one; the list of verdicts after the baseline."""
    verdict = baseline(check, doc(states[0]))
    verdicts = []
    for state in states[1:]:
        verdict = evaluate(check, doc(state), verdict.state)
        verdicts.append(verdict)
    return verdicts


def test_parse_keeps_path_and_values():
    check = status()
    assert check.type == "status" and check.value_path == "data.status" and check.values == tuple(DONE)


@pytest.mark.parametrize("raw, field", [
    ({"type": "status", "values": ["ok"]}, "value_path"),
    ({"type": "status", "value_path": "a..b", "values": ["ok"]}, "value_path"),
    ({"type": "status", "value_path": "status"}, "values"),
    ({"type": "status", "value_path": "status", "values": []}, "values"),
    ({"type": "status", "value_path": "status", "values": "success"}, "values"),
    ({"type": "status", "value_path": "status", "values": [{"a": 1}]}, "values"),
    ({"type": "status", "value_path": "status", "values": [None]}, "values"),
    ({"type": "status", "value_path": "status", "values": [float("nan")]}, "values"),
    ({"type": "status", "value_path": "status", "values": [""]}, "values"),
    ({"type": "status", "value_path": "status", "values": ["x" * 201]}, "values"),
    ({"type": "status", "value_path": "status", "values": list(range(51))}, "values"),
    ({"type": "status", "value_path": "status", "values": ["ok"], "op": "=="}, "op"),
])
def test_parse_refuses_bad_fields(raw, field):
    with pytest.raises(SpecError) as error:
        parse_check(raw)
    assert field in str(error.value)


def test_entering_a_state_that_matters_fires_once():
    first, second = run(status(), ["running", "success", "success"])
    assert first.fired and first.found == "status is now 'success' (was 'running')" and first.fact == "success"
    assert first.state == {"state": "success"}
    assert not second.fired


def test_a_different_state_that_matters_fires():
    verdicts = run(status(), ["running", "success", "failure"])
    assert [v.fired for v in verdicts] == [True, True]
    assert verdicts[1].found == "status is now 'failure' (was 'success')"


def test_leaving_and_coming_back_fires_again():
    verdicts = run(status(), ["success", "running", "success"])
    assert [v.fired for v in verdicts] == [False, True]


def test_states_that_do_not_matter_never_fire():
    verdicts = run(status(), ["queued", "running", "queued"])
    assert not any(v.fired for v in verdicts)


def test_baseline_in_a_state_that_matters_does_not_fire_and_staying_does_not_either():
    check = status()
    first = baseline(check, doc("success"))
    assert not first.fired and first.summary == "status is 'success'"
    assert not evaluate(check, doc("success"), first.state).fired


def test_case_sensitive_strings():
    assert not run(status(["Success"]), ["running", "success"])[0].fired


@pytest.mark.parametrize("values, state", [([200], 200), ([200], "200"), (["200"], 200), ([200], 200.0),
                                           ([True], True), (["true"], True), ([0], 0), ([1.5], 1.5)])
def test_numbers_and_bools_match_their_json_values(values, state):
    assert run(status(values), [None, state])[0].fired


def test_bool_and_number_are_not_confused():
    assert not run(status([1]), [None, True])[0].fired
    assert not run(status([True]), [None, 1])[0].fired


def test_null_is_a_state():
    verdict = run(status(["success"]), [None, "success"])[0]
    assert verdict.found == "status is now 'success' (was 'null')"


def test_missing_path_is_a_content_error():
    with pytest.raises(ContentError, match="value_path 'data.status' is gone"):
        baseline(status(), json_content(b'{"other": 1}'))


def test_object_at_path_is_a_content_error():
    with pytest.raises(ContentError, match="not a single state"):
        baseline(status(path="run"), doc("x"))


def test_page_source_is_a_content_error():
    with pytest.raises(ContentError, match="not JSON"):
        baseline(status(), Content(text="status: success"))


def test_long_state_is_stored_as_a_digest():
    long = "s" * 150
    verdict = run(status([long]), ["running", long])[0]
    assert verdict.fired and verdict.fact.startswith("sha256:") and len(verdict.fact) < 100
    assert verdict.state["state"] == verdict.fact
    assert not evaluate(status([long]), doc(long), verdict.state).fired
