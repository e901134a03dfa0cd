"""Shared fetches: monitors whose request is the same (the url after placeholders, no header of their own) read
one fetch per interval window, so what polling costs follows the distinct sources, not the monitors.

Only the network read is shared. Each monitor still hashes the body against its own stored digest, normalizes it
with its own selector or path, and records its own check: a shared body goes through the same pipeline as one
fetched for the monitor alone. Errors are shared the same way (a 500 in this window is a 500 for every monitor of
that url).

What may be shared:
- a GET with no header of the caller's: a source with credentials or a header of its own never shares (today's
  page, json, feed and metric sources send none; a tool's steps do not come through here at all);
- across accounts only where the SSRF guard proves every address public, that is when loopback is not allowed
  (then engine/addresses.py refuses every private, loopback or other non-global address at connect time). With
  FETCH_ALLOW_LOOPBACK on, any host name may resolve to this machine, so every url is keyed per account: a private
  url's body never reaches another account.

When a fetch may serve a check: it was made for a claim in the same interval window as this check's claim
(window = floor(epoch seconds / interval)), and after the monitor's previous claim, so a monitor never reads back
its own last fetch, nor anything older than what it saw.

Conditional GET: the first check of a window asks with its own validators. A 304 serves only a check that asks
with exactly those validators; a full body serves every check, and a check whose validators are the body's own
gets the 304 the server would have given it (nothing read or hashed). A 304 never reaches a monitor whose
validators differ: it fetches for itself.

Beyond the GET: the scheduler steers the monitors of one url onto one slot (engine/schedule.py), so they fall due in
the same tick; the claim takes monitors due at the same moment by source (so its limit splits no url's monitors but
the last one's), sorts them by url and counts them as one fetch when it cuts messages (tasks/checks.batches). In a
batch each source's monitors run latest previous claim first, and a check whose inputs are all the same as a quiet
one's before it takes that outcome instead of running the pipeline again (tasks/checks.same_inputs); the claim read
sends such monitors' source, check and digests once (models/claims). So the monitors after the first of a url cost
their claim, their event and their record, not a check.

One SharedFetches per worker process (threads share it, and a thread waits for another already fetching the same
request); with N worker processes at most N GETs go out per distinct request per window. It is a plain object
with no I/O of its own: the fetch it shares is the caller's.
"""

from __future__ import annotations

import copy
import functools
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from engine.errors import FetchError
from engine.http import Fetcher, Response, Validators
from engine.placeholders import has_placeholders
from engine.schedule import epoch_seconds

#: what one kept answer costs beyond its body, url and headers (the objects around them), for the size bound
ENTRY_OVERHEAD_BYTES = 256
#: the source types read with one GET of their url, whose answers may be shared
HTTP_SOURCES = frozenset({"page", "json", "feed", "metric"})


@dataclass(frozen=True)
class Window:
    """What one check may accept of another's fetch: its account, its interval, its claim and the one before."""
    account: int
    interval_seconds: int
    claimed_at: datetime
    previous_claim: datetime | None = None

    @functools.cached_property
    def index(self) -> float:
        return window_index(self.claimed_at, self.interval_seconds)


@functools.lru_cache(maxsize=256)
def window_index(claimed_at: datetime, interval_seconds: int) -> float:
    """Which window of its interval a claim falls in: floor(epoch seconds / interval). Remembered: every check of a
    batch asks it (tasks/checks.same_inputs), and the claims of one tick share one time."""
    return epoch_seconds(claimed_at) // max(interval_seconds, 1)


@dataclass(frozen=True)
class _Kept:
    """One fetch's answer (or error), with the claim it was made for and the validators it asked with."""
    claimed_at: datetime
    #: claimed_at in epoch seconds, so each check tells its window with one division
    epoch: float
    asked: Validators | None
    answer: Response | FetchError
    size: int


def request_key(url: str, headers: dict | None, account: int, across_accounts: bool) -> tuple | None:
    """The key identical requests share, or None when this one may not be shared (it carries headers of its own:
    credentials or a per-monitor header)."""
    if headers:
        return None
    return (None if across_accounts else account, url)


def claim_order(source: dict) -> str:
    """What the scheduler sorts claimed monitors by, so those reading the same url land in the same batch."""
    return (source.get("url") or "") if source.get("type") in HTTP_SOURCES else ""


def fetch_key(source: dict) -> str:
    """The url whose one GET a claimed monitor may share with the others of its batch, or "" when its check
    reads on its own (not an HTTP source, a url with placeholders: another url each check, or a page rendered in a
    browser, which makes no GET of its own)."""
    url = claim_order(source)
    return "" if source.get("render") or has_placeholders(url) else url


class SharedFetches:
    """The answers of this process's recent fetches, least recently used dropped past `max_bytes`."""

    def __init__(self, max_bytes: int, wait_seconds: float = 30.0):
        self.max_bytes = max_bytes
        self.wait_seconds = wait_seconds
        self._kept: OrderedDict[tuple, _Kept] = OrderedDict()
        self._size = 0
        self._fetching: dict[tuple, threading.Event] = {}
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def fetcher(self, fetcher: Fetcher, window: Window) -> Fetcher | SharedFetcher:
        """One check's fetcher: `fetcher`, its GETs shared with the checks of `window`'s requests."""
        return SharedFetcher(self, fetcher, window) if self.enabled else fetcher

    def read(self, key: tuple, window: Window, validators: Validators | None,
             fetch: Callable[[], Response]) -> Response:
        """A kept answer this check may use, else `fetch()` (once per process at a time), kept for the others."""
        found, waiting = self._find(key, window, validators)
        if found is None and waiting is not None:  # another thread is fetching it: its answer will likely do
            waiting.wait(self.wait_seconds)
            found, waiting = self._find(key, window, validators)
        if found is not None:
            return _given(found)
        leading = waiting is None
        try:
            answer = fetch()
        except FetchError as exc:
            self._keep(key, window, validators, exc, leading)
            raise
        except BaseException:
            self._done(key, leading)
            raise
        self._keep(key, window, validators, answer, leading)
        return answer

    def _find(self, key: tuple, window: Window, validators: Validators | None):
        """(an answer this check may use, None) or (None, the event of a fetch under way; None: this thread
        fetches it, and is registered as doing so)."""
        with self._lock:
            kept = self._kept.get(key)
            found = _usable(kept, window, validators) if kept is not None else None
            if found is not None:
                self._kept.move_to_end(key)
                return found, None
            waiting = self._fetching.get(key)
            if waiting is None:
                self._fetching[key] = threading.Event()
            return None, waiting

    def _keep(self, key: tuple, window: Window, validators: Validators | None, answer: Response | FetchError,
              leading: bool) -> None:
        kept = _Kept(window.claimed_at, epoch_seconds(window.claimed_at), validators, answer, _size_of(key, answer))
        with self._lock:
            old = self._kept.pop(key, None)
            if old is not None:
                self._size -= old.size
            if kept.size <= self.max_bytes:
                self._kept[key] = kept
                self._size += kept.size
            while self._size > self.max_bytes:
                self._size -= self._kept.popitem(last=False)[1].size
        self._done(key, leading)

    def _done(self, key: tuple, leading: bool) -> None:
        if leading:
            with self._lock:
                event = self._fetching.pop(key, None)
            if event is not None:
                event.set()


class SharedFetcher:
    """A Fetcher for one check (what SourceIO.fetcher holds): get() goes through the shared answers."""

    def __init__(self, shared: SharedFetches, fetcher: Fetcher, window: Window):
        self._shared, self._fetcher, self._window = shared, fetcher, window

    @property
    def policy(self):
        return self._fetcher.policy

    def get(self, url: str, headers: dict[str, str] | None = None,
            validators: Validators | None = None) -> Response:
        key = request_key(url, headers, self._window.account, across_accounts=not self.policy.allow_loopback)
        if key is None:
            return self._fetcher.get(url, headers, validators=validators)
        return self._shared.read(key, self._window, validators or None,
                                 lambda: self._fetcher.get(url, headers, validators=validators))


def _usable(kept: _Kept, window: Window, validators: Validators | None) -> Response | FetchError | None:
    """What `kept` answers this check, or None when the check must fetch for itself."""
    if kept.epoch // max(window.interval_seconds, 1) != window.index or (
            window.previous_claim is not None and window.previous_claim >= kept.claimed_at):
        return None
    answer = kept.answer
    if isinstance(answer, FetchError):
        return answer
    if answer.not_modified:  # says only that the body of the validators asked is current
        return answer if validators and validators == kept.asked else None
    if validators and answer.validators == validators:  # the 304 the server would answer this check
        return replace(answer, status=304, body=b"", truncated=False)
    return answer


def _given(found: Response | FetchError) -> Response:
    if isinstance(found, FetchError):
        raise copy.copy(found)  # a copy: raising the kept one again would grow its traceback on every check
    return found


def _size_of(key: tuple, answer: Response | FetchError) -> int:
    if isinstance(answer, FetchError):
        return ENTRY_OVERHEAD_BYTES + len(key[1]) + len(answer.message)
    headers = sum(len(name) + len(value) for name, value in answer.headers.items())
    return ENTRY_OVERHEAD_BYTES + len(key[1]) + len(answer.url) + headers + len(answer.body)
