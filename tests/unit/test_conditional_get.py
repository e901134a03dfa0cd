"""Conditional GET without a server: the validators' headers, a 304's status check, and the pipeline's use of them."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import pytest

from engine.checks import CheckSpec
from engine.content import page_content
from engine.errors import FetchError
from engine.http import MAX_VALIDATOR_CHARS, Response, Validators, _check_status
from engine.pipeline import BASELINE, FIRED, QUIET, Prior, run_check
from engine.sources import SourceIO, SourcePolicy, read_checked
from engine.spec import SourceSpec

PAGE = SourceSpec(type="page", url="https://shop.example.com/item")
CHANGE = CheckSpec()
MAX = 64 * 1024
BODY = b"<p>Price: 95</p>"


class Server:
    """A fetcher that answers like a server honouring validators: 304 when the ETag asked matches."""

    def __init__(self, body: bytes = BODY, etag: str = "", last_modified: str = ""):
        self.body, self.etag, self.last_modified = body, etag, last_modified
        self.asked: list[Validators | None] = []

    def get(self, url, headers=None, validators=None):
        self.asked.append(validators)
        sent = {k: v for k, v in (("etag", self.etag), ("last-modified", self.last_modified)) if v}
        if validators and self.etag and validators.etag == self.etag:
            return Response(url, 304, sent, b"", False, Validators.of(sent))
        return Response(url, 200, sent, self.body, False, Validators.of(sent))


def sha(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def stored(etag: str = '"a"', last_modified: str = "") -> Prior:
    return Prior(sha(BODY), page_content(BODY, None, MAX).digest, {"text": "x"}, Validators(etag, last_modified))


def test_validators_headers_are_if_none_match_and_if_modified_since():
    assert Validators('"a"', "Wed, 21 Oct 2015 07:28:00 GMT").headers() == {
        "If-None-Match": '"a"', "If-Modified-Since": "Wed, 21 Oct 2015 07:28:00 GMT"}
    assert Validators(etag='W/"b"').headers() == {"If-None-Match": 'W/"b"'}
    assert Validators().headers() == {} and not Validators() and Validators(last_modified="x")


def test_validators_of_a_response_take_etag_and_last_modified_and_leave_out_a_huge_one():
    assert Validators.of({"etag": ' "a" ', "last-modified": "Wed, 21 Oct 2015 07:28:00 GMT"}) == \
        Validators('"a"', "Wed, 21 Oct 2015 07:28:00 GMT")
    assert Validators.of({"content-type": "text/html"}) == Validators()
    assert Validators.of({"etag": '"' + "x" * MAX_VALIDATOR_CHARS + '"'}) == Validators()
    assert Validators.of({"etag": '"a\x00b"', "last-modified": "Wed,\x0721 Oct"}) == Validators()


def test_check_status_takes_a_304_only_when_validators_were_sent():
    _check_status(SimpleNamespace(status=304), asked=True)
    with pytest.raises(FetchError, match="304 Not Modified to a request that asked for no comparison") as info:
        _check_status(SimpleNamespace(status=304))
    assert info.value.unreachable is False
    _check_status(SimpleNamespace(status=200))


def test_run_check_304_is_quiet_with_the_stored_hashes_and_no_body_read():
    server, prior = Server(etag='"a"'), stored('"a"')
    outcome = run_check(server, PAGE, CHANGE, prior, MAX)
    assert server.asked == [Validators('"a"')]
    assert (outcome.kind, outcome.not_modified) == (QUIET, True)
    assert (outcome.raw_hash, outcome.content_hash) == (prior.raw_hash, prior.content_hash)
    assert outcome.validators == prior.validators


def test_run_check_200_carries_the_new_validators():
    server = Server(b"<p>Price: 80</p>", etag='"b"', last_modified="Thu, 22 Oct 2015 07:28:00 GMT")
    outcome = run_check(server, PAGE, CHANGE, stored('"a"'), MAX)
    assert outcome.kind == FIRED and not outcome.not_modified
    assert outcome.validators == Validators('"b"', "Thu, 22 Oct 2015 07:28:00 GMT")


def test_run_check_same_bytes_under_a_new_etag_is_quiet_by_hash():
    outcome = run_check(Server(etag='"b"'), PAGE, CHANGE, stored('"a"'), MAX)
    assert (outcome.kind, outcome.not_modified, outcome.validators) == (QUIET, False, Validators('"b"'))


def test_run_check_without_a_baseline_or_stored_validators_asks_with_none():
    server = Server(etag='"a"')
    assert run_check(server, PAGE, CHANGE, Prior(validators=Validators('"a"')), MAX).kind == BASELINE
    run_check(server, PAGE, CHANGE, stored(""), MAX)
    assert server.asked == [None, None]


def test_run_check_with_placeholders_in_the_url_neither_sends_nor_keeps_validators():
    server = Server(etag='"a"')
    spec = SourceSpec(type="page", url="https://shop.example.com/day/{{last_checked_date}}")
    outcome = run_check(server, spec, CHANGE, stored('"a"'), MAX)
    assert server.asked == [None] and outcome.validators is None
    assert (outcome.kind, outcome.not_modified) == (QUIET, False)


def test_run_check_while_a_for_count_is_under_way_asks_with_none():
    """check_body evaluates unchanged bytes while a `for` count is pending, so it needs the body a 304 lacks."""
    server = Server(etag='"a"')
    check = CheckSpec(type="threshold", op="<", value=99.0, hold_for=3)
    prior = Prior(sha(BODY), page_content(BODY, None, MAX).digest, {"pending": True, "held": 1}, Validators('"a"'))
    run_check(server, PAGE, check, prior, MAX)
    assert server.asked == [None]


def test_read_checked_of_a_file_has_no_validators(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"hello")
    spec = SourceSpec(type="file", path=str(tmp_path / "a.txt"))
    fetched = read_checked(spec, SourceIO(Server(), SourcePolicy(file_roots=(str(tmp_path),))), None,
                           Validators('"a"'))
    assert (fetched.body, fetched.validators, fetched.not_modified) == (b"hello", None, False)
