import hashlib

import pytest

from engine.checks import CheckSpec
from engine.content import json_content, page_content
from engine.http import FetchError
from engine.pipeline import BASELINE, CHANGED, ERROR, FIRED, QUIET, Prior, run_check
from engine.spec import SourceSpec

PAGE = SourceSpec(type="page", url="https://shop.example.com/item")
JSON = SourceSpec(type="json", url="https://ci.example.com/run.json")
CHANGE = CheckSpec()
BELOW_90 = CheckSpec(type="threshold", op="<", value=90.0)
MAX = 64 * 1024


class Body:
    truncated, validators, not_modified = False, None, False

    def __init__(self, body: bytes):
        self.body = body


class FakeFetcher:
    """Answers every GET with `body`, or raises `error`; remembers the urls asked for."""

    def __init__(self, body: bytes = b"", error: Exception | None = None):
        self.body, self.error, self.urls = body, error, []

    def get(self, url, headers=None, validators=None):
        self.urls.append(url)
        if self.error:
            raise self.error
        return Body(self.body)


def sha(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def after(outcome) -> Prior:
    """What the monitor stores after `outcome`."""
    return Prior(raw_hash=outcome.raw_hash, content_hash=outcome.content_hash, state=outcome.verdict.state)


def test_run_check_first_run_is_a_baseline_with_a_summary():
    fetcher = FakeFetcher(b"<p>Price: 95</p>")
    outcome = run_check(fetcher, PAGE, BELOW_90, Prior(), MAX)
    assert fetcher.urls == [PAGE.url]
    assert outcome.kind == BASELINE
    assert outcome.verdict.fired is False
    assert outcome.verdict.summary == "currently 95"
    assert outcome.raw_hash == sha(b"<p>Price: 95</p>")
    assert outcome.content_hash == page_content(b"<p>Price: 95</p>", None, MAX).digest
    assert outcome.error == ""


def test_run_check_baseline_of_a_condition_that_already_holds_does_not_fire():
    outcome = run_check(FakeFetcher(b"<p>Price: 80</p>"), PAGE, BELOW_90, Prior(), MAX)
    assert outcome.kind == BASELINE
    assert outcome.verdict.fired is False
    assert outcome.verdict.state["holds"] is True


def test_run_check_same_raw_body_is_quiet_without_normalizing():
    body = b"{ this is not JSON at all"
    prior = Prior(raw_hash=sha(body), content_hash="stored-content-hash", state={"text": "earlier"})
    outcome = run_check(FakeFetcher(body), JSON, CHANGE, prior, MAX)
    assert outcome.kind == QUIET
    assert outcome.raw_hash == sha(body)
    assert outcome.content_hash == "stored-content-hash"
    assert outcome.verdict is None
    assert outcome.error == ""


def test_run_check_same_raw_body_without_state_is_still_a_baseline():
    body = b'{"a": 1}'
    outcome = run_check(FakeFetcher(body), JSON, CHANGE, Prior(raw_hash=sha(body)), MAX)
    assert outcome.kind == BASELINE


def test_run_check_same_normalized_content_is_quiet_with_the_new_raw_hash():
    first = run_check(FakeFetcher(b'{"b": 2, "a": 1}'), JSON, CHANGE, Prior(), MAX)
    reordered = b'{\n  "a": 1,\n  "b": 2\n}'
    outcome = run_check(FakeFetcher(reordered), JSON, CHANGE, after(first), MAX)
    assert outcome.kind == QUIET
    assert outcome.raw_hash == sha(reordered) != first.raw_hash
    assert outcome.content_hash == first.content_hash == json_content(reordered).digest
    assert outcome.verdict is None


def test_run_check_page_markup_change_with_same_text_is_quiet():
    first = run_check(FakeFetcher(b"<p>In stock</p>"), PAGE, CHANGE, Prior(), MAX)
    outcome = run_check(FakeFetcher(b"<div class='new'><p>In   stock</p><script>x=2</script></div>"), PAGE, CHANGE,
                        after(first), MAX)
    assert outcome.kind == QUIET


def test_run_check_change_check_fires_on_changed_content():
    first = run_check(FakeFetcher(b'{"status": "running"}'), JSON, CHANGE, Prior(), MAX)
    outcome = run_check(FakeFetcher(b'{"status": "done"}'), JSON, CHANGE, after(first), MAX)
    assert outcome.kind == FIRED
    assert outcome.verdict.fired
    lines = outcome.verdict.found.splitlines()
    assert [line[:2] + line[2:].strip() for line in lines] == ['+ "status": "done"', '- "status": "running"']
    assert outcome.content_hash == json_content(b'{"status": "done"}').digest


def test_run_check_threshold_sequence_changes_then_fires_once():
    prior = after(run_check(FakeFetcher(b"<p>Price: 95</p>"), PAGE, BELOW_90, Prior(), MAX))
    kinds = []
    for price in (93, 89, 88, 91, 89):
        outcome = run_check(FakeFetcher(f"<p>Price: {price}</p>".encode()), PAGE, BELOW_90, prior, MAX)
        kinds.append(outcome.kind)
        prior = after(outcome)
    assert kinds == [CHANGED, FIRED, CHANGED, CHANGED, FIRED]


def test_run_check_fired_outcome_names_the_crossing():
    prior = after(run_check(FakeFetcher(b"<p>Price: 95</p>"), PAGE, BELOW_90, Prior(), MAX))
    outcome = run_check(FakeFetcher(b"<p>Price: 89.5</p>"), PAGE, BELOW_90, prior, MAX)
    assert outcome.kind == FIRED
    assert outcome.verdict.found == "89.50 is below 90 (was 95)"


@pytest.mark.parametrize("unreachable", [True, False])
def test_run_check_fetch_error_is_an_error_outcome(unreachable):
    error = FetchError("The site did not answer within 30 seconds.", unreachable=unreachable)
    outcome = run_check(FakeFetcher(error=error), PAGE, CHANGE, Prior(state={"text": "x"}), MAX)
    assert outcome.kind == ERROR
    assert outcome.unreachable is unreachable
    assert outcome.error == "The site did not answer within 30 seconds."
    assert outcome.verdict is None


def test_run_check_invalid_json_is_an_error_sentence():
    outcome = run_check(FakeFetcher(b"<html>oops</html>"), JSON, CHANGE, Prior(), MAX)
    assert outcome.kind == ERROR
    assert outcome.unreachable is False
    assert outcome.raw_hash == sha(b"<html>oops</html>")
    assert outcome.error.startswith("The response is not valid JSON")
    assert outcome.error.endswith(".") and not outcome.error.endswith("..")


def test_run_check_selector_gone_is_an_error_sentence():
    source = SourceSpec(type="page", url=PAGE.url, selector="#price")
    outcome = run_check(FakeFetcher(b"<p>redesigned</p>"), source, CHANGE, Prior(state={"text": "95"}), MAX)
    assert outcome.kind == ERROR
    assert outcome.error == "The selector '#price' matches nothing on the page."


def test_run_check_missing_number_after_a_change_is_an_error_not_a_match():
    prior = after(run_check(FakeFetcher(b"<p>Price: 95</p>"), PAGE, BELOW_90, Prior(), MAX))
    outcome = run_check(FakeFetcher(b"<p>Sold out</p>"), PAGE, BELOW_90, prior, MAX)
    assert outcome.kind == ERROR
    assert outcome.error[0].isupper() and outcome.error.endswith(".")


def test_run_check_deep_json_is_an_error_not_a_crash():
    body = b"[" * 100_000 + b"]" * 100_000
    outcome = run_check(FakeFetcher(body), JSON, CHANGE, Prior(), MAX)
    assert outcome.kind == ERROR
    assert outcome.error == "The JSON is nested too deeply to read."
