"""Shared fetches (engine/shared_fetch.py): which checks may read another's fetch, and what they are given."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import pytest

from engine.checks import CheckSpec
from engine.errors import FetchError
from engine.http import FetchPolicy, Response, Validators
from engine.pipeline import QUIET, Prior, run_check
from engine.shared_fetch import ENTRY_OVERHEAD_BYTES, SharedFetches, Window, claim_order, request_key
from engine.sources import SourceIO, SourceSpec

URL = "https://example.com/status"
T0 = datetime(2026, 12, 1, 12, 0, 5)  # 12:00:05, in the 300 s window 12:00:00–12:05:00
BODY = b"<html><body><p id='a'>1</p><p id='b'>2</p></body></html>"


class Origin:
    """Stands in for the network behind Fetcher.get: counts the GETs, answers what the test set."""

    def __init__(self, loopback: bool = False) -> None:
        self.policy = FetchPolicy(allow_loopback=loopback)
        self.asked: list[tuple[str, Validators | None]] = []
        self.body, self.validators, self.error = BODY, Validators(), None

    def get(self, url, headers=None, validators=None) -> Response:
        self.asked.append((url, validators))
        if self.error is not None:
            raise self.error
        if validators and validators == self.validators:
            return Response(url, 304, {}, b"", False, validators=self.validators)
        return Response(url, 200, {"etag": self.validators.etag}, self.body, False, validators=self.validators)


def window(account: int = 1, at: datetime = T0, previous: datetime | None = None, interval: int = 300) -> Window:
    return Window(account, interval, at, previous if previous is not None else at - timedelta(seconds=interval))


def read(shared: SharedFetches, origin: Origin, win: Window, validators: Validators | None = None,
         headers: dict | None = None) -> Response:
    return shared.fetcher(origin, win).get(URL, headers, validators=validators)


def test_shared_fetch_public_url_is_fetched_once_a_window_for_every_account():
    shared, origin = SharedFetches(1 << 20), Origin()
    answers = [read(shared, origin, window(account, T0 + timedelta(seconds=account))) for account in (1, 2, 3)]
    assert len(origin.asked) == 1 and {a.body for a in answers} == {BODY}


def test_shared_fetch_with_loopback_allowed_is_kept_per_account():
    shared, origin = SharedFetches(1 << 20), Origin(loopback=True)
    for account in (1, 1, 2, 2):
        read(shared, origin, window(account))
    assert len(origin.asked) == 2


def test_shared_fetch_next_window_fetches_again():
    shared, origin = SharedFetches(1 << 20), Origin()
    read(shared, origin, window(1, T0))
    read(shared, origin, window(2, T0 + timedelta(seconds=290)))  # 12:04:55: same window
    read(shared, origin, window(3, T0 + timedelta(seconds=296)))  # 12:05:01: the next one
    assert len(origin.asked) == 2


def test_shared_fetch_never_gives_a_monitor_back_a_fetch_older_than_its_previous_check():
    shared, origin = SharedFetches(1 << 20), Origin()
    read(shared, origin, window(1, T0))
    origin.body = b"<p>changed</p>"
    # claimed again within the same window (jitter): its previous claim is the fetch's own
    again = read(shared, origin, window(1, T0 + timedelta(seconds=200), previous=T0))
    assert again.body == b"<p>changed</p>" and len(origin.asked) == 2


def test_shared_fetch_request_with_headers_of_its_own_is_never_shared():
    shared, origin = SharedFetches(1 << 20), Origin()
    for _ in range(3):
        read(shared, origin, window(), headers={"Authorization": "Bearer secret"})
    assert len(origin.asked) == 3
    assert request_key(URL, {"X-Token": "t"}, 1, True) is None
    assert request_key(URL, None, 1, True) == (None, URL) and request_key(URL, {}, 7, False) == (7, URL)


def test_shared_fetch_304_serves_only_the_same_validators():
    shared, origin = SharedFetches(1 << 20), Origin()
    origin.validators = Validators(etag='"v1"')
    first = read(shared, origin, window(1), Validators(etag='"v1"'))
    assert first.not_modified
    same = read(shared, origin, window(2), Validators(etag='"v1"'))
    assert same.not_modified and len(origin.asked) == 1
    other = read(shared, origin, window(3), Validators(etag='"v0"'))
    assert not other.not_modified and other.body == BODY and other.validators == Validators(etag='"v1"')
    assert origin.asked[-1] == (URL, Validators(etag='"v0"')) and len(origin.asked) == 2
    none = read(shared, origin, window(4))  # the full body kept now serves one that asks with nothing
    assert none.body == BODY and len(origin.asked) == 2


def test_shared_fetch_full_body_is_a_304_for_a_check_holding_its_validators():
    shared, origin = SharedFetches(1 << 20), Origin()
    origin.validators = Validators(etag='"v2"')
    assert read(shared, origin, window(1)).body == BODY
    matching = read(shared, origin, window(2), Validators(etag='"v2"'))
    older = read(shared, origin, window(3), Validators(etag='"v1"'))
    assert matching.not_modified and matching.body == b""
    assert not older.not_modified and older.body == BODY and len(origin.asked) == 1


def test_shared_fetch_error_is_shared_as_a_fresh_copy():
    shared, origin = SharedFetches(1 << 20), Origin()
    origin.error = FetchError("The server answered 500 Internal Server Error.", unreachable=True)
    raised = []
    for account in (1, 2):
        with pytest.raises(FetchError) as caught:
            read(shared, origin, window(account))
        raised.append(caught.value)
    assert len(origin.asked) == 1
    assert raised[1] is not raised[0] and raised[1].message == raised[0].message and raised[1].unreachable


def test_shared_fetch_keeps_at_most_its_bytes_least_recently_used_first():
    entry = ENTRY_OVERHEAD_BYTES + 2 * len(f"{URL}/0") + len("etag") + len(BODY)  # url kept as asked and as sent
    shared, origin = SharedFetches(3 * entry), Origin()
    for n in (0, 1, 2, 0, 3):  # 0 read again before 3 comes: 1 is the least recently used
        shared.fetcher(origin, window(n + 1)).get(f"{URL}/{n}")
    assert len(origin.asked) == 4
    shared.fetcher(origin, window(9)).get(f"{URL}/0")
    assert len(origin.asked) == 4, "kept"
    shared.fetcher(origin, window(9)).get(f"{URL}/1")
    assert len(origin.asked) == 5, "dropped to make room for 3"
    tiny = SharedFetches(10)
    for _ in range(2):
        tiny.fetcher(origin, window()).get(URL)  # larger than the whole bound: never kept
    assert len(origin.asked) == 7


def test_shared_fetch_off_at_zero_bytes_is_the_plain_fetcher():
    origin = Origin()
    assert SharedFetches(0).fetcher(origin, window()) is origin


def test_shared_fetch_a_thread_waits_for_the_fetch_under_way():
    shared, origin = SharedFetches(1 << 20), Origin()
    started, release = threading.Event(), threading.Event()
    slow_get = origin.get

    def slow(url, headers=None, validators=None):
        started.set()
        release.wait(5)
        return slow_get(url, headers, validators)

    origin.get = slow
    answers = []
    first = threading.Thread(target=lambda: answers.append(read(shared, origin, window(1))))
    first.start()
    started.wait(5)
    second = threading.Thread(target=lambda: answers.append(read(shared, origin, window(2))))
    second.start()
    release.set()
    first.join(5)
    second.join(5)
    assert len(origin.asked) == 1 and [a.body for a in answers] == [BODY, BODY]


def test_shared_fetch_through_the_pipeline_each_monitor_compares_its_own_part():
    shared, origin = SharedFetches(1 << 20), Origin()
    a = SourceSpec("page", URL, selector="#a")
    b = SourceSpec("page", URL, selector="#b")
    first = run_check(SourceIO(shared.fetcher(origin, window(1))), a, CheckSpec("change"), Prior(), 4096)
    second = run_check(SourceIO(shared.fetcher(origin, window(2))), b, CheckSpec("change"), Prior(), 4096)
    assert len(origin.asked) == 1
    assert first.text == "1" and second.text == "2" and first.raw_hash == second.raw_hash
    prior = Prior(first.raw_hash, first.content_hash, first.verdict.state)
    later = window(1, T0 + timedelta(seconds=300), previous=T0)
    assert run_check(SourceIO(shared.fetcher(origin, later)), a, CheckSpec("change"), prior, 4096).kind == QUIET


def test_claim_order_groups_http_sources_by_url():
    assert claim_order({"type": "page", "url": URL, "selector": "#a"}) == URL
    assert claim_order({"type": "json", "url": URL}) == URL
    assert claim_order({"type": "file", "path": "/x"}) == "" and claim_order({"type": "time"}) == ""
