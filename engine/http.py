"""The one outbound HTTP seam: GET (and a tool step's other methods) with an SSRF guard at connect time, and
size/time limits; a conditional GET when the caller has validators. Which addresses may be contacted is
engine/addresses.py's."""

from __future__ import annotations

import contextlib
import functools
import heapq
import http
import itertools
import os
import re
import socket
import ssl
import string
import threading
import time
from dataclasses import dataclass
from urllib.parse import quote, urljoin, urlsplit, urlunparse

import certifi
import urllib3
from urllib3 import BaseHTTPResponse
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, HTTPError, NewConnectionError, SSLError
from urllib3.exceptions import TimeoutError as Urllib3Timeout
from urllib3.util import create_urllib3_context, parse_url
from urllib3.util.connection import create_connection

from engine.addresses import check_url, resolve_allowed
from engine.errors import BlockedURL, FetchError

_CHUNK = 65536
_REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
_CREDENTIAL_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})
_UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
_ESCAPE = re.compile(r"%([^\W_]{2})")
_PHRASES = {status.value: status.phrase for status in http.HTTPStatus}
#: a validator longer than this is not kept (nor sent back): it would only make the monitor's row bigger
MAX_VALIDATOR_CHARS = 256
#: what a validator kept may hold: visible characters and spaces (no NUL or other control character to store)
_VALIDATOR = re.compile(r"[\x20-\x7e\x80-\xff]*\Z")


@dataclass(frozen=True)
class FetchPolicy:
    timeout: float = 30.0
    max_bytes: int = 1024 * 1024
    allow_loopback: bool = False
    max_redirects: int = 5


@dataclass(frozen=True)
class Validators:
    """What a server said identifies the body it sent (ETag, Last-Modified), to ask next time whether it changed."""
    etag: str = ""
    last_modified: str = ""

    def __bool__(self) -> bool:
        return bool(self.etag or self.last_modified)

    def headers(self) -> dict[str, str]:
        """The conditional request's headers: If-None-Match, If-Modified-Since (a server honours the first)."""
        pairs = (("If-None-Match", self.etag), ("If-Modified-Since", self.last_modified))
        return {name: value for name, value in pairs if value}

    @classmethod
    def of(cls, headers: dict[str, str]) -> Validators:
        """The validators of a response's (lower-cased) headers; one too long or odd to keep is left out."""
        etag, modified = (_keepable(headers.get(name, "")) for name in ("etag", "last-modified"))
        return cls(etag, modified)


def _keepable(value: str) -> str:
    value = value.strip()
    return value if len(value) <= MAX_VALIDATOR_CHARS and _VALIDATOR.match(value) else ""


@dataclass(frozen=True)
class Response:
    url: str
    status: int
    headers: dict[str, str]
    body: bytes
    truncated: bool
    #: get() only: the final response's validators, None when the redirects left the origin asked (they would
    #: belong to another site than the one they are sent to next time)
    validators: Validators | None = None

    @property
    def not_modified(self) -> bool:
        """A 304 to a conditional get(): the body is the one the validators were taken from (none is read)."""
        return self.status == 304


class _Deadline:
    """Shuts the socket in use down once the overall time budget of one get() is spent."""

    current = threading.local()

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.expires = time.monotonic() + seconds
        self.expired = False
        self.finished = False
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> _Deadline:
        _Deadline.current.deadline = self
        _watchdog.watch(self)
        return self

    def __exit__(self, *exc) -> None:
        self.finished = True
        _Deadline.current.deadline = None
        self.attach(None)

    def left(self) -> float:
        return self.expires - time.monotonic()

    def attach(self, sock: socket.socket | None) -> None:
        with self._lock:
            self._sock = sock
        if self.expired:
            self._fire()

    def _fire(self) -> None:
        with self._lock:
            self.expired, sock = True, self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _Watchdog:
    """One thread per process that fires every _Deadline that runs out.

    A threading.Timer per get() cost a thread start and exit per fetch, about 0.3 ms of CPU, nearly
    as much as the keep-alive GET itself; this one thread waits on a heap of deadlines instead.
    """

    _COMPACT_EVERY = 1024

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        """Fresh state; also runs in a forked child, where the parent's thread does not exist."""
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, _Deadline]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, deadline: _Deadline) -> None:
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="fetch-deadlines", daemon=True)
                self._thread.start()
            order = next(self._order)
            if order % self._COMPACT_EVERY == 0:  # drop finished gets, so the heap stays ~ the live ones
                self._heap = [entry for entry in self._heap if not entry[2].finished]
                heapq.heapify(self._heap)
            heapq.heappush(self._heap, (deadline.expires, order, deadline))
            if self._heap[0][2] is deadline:
                self._cond.notify()

    def _run(self) -> None:
        cond = self._cond
        while True:
            with cond:
                heap = self._heap
                while heap and heap[0][2].finished:
                    heapq.heappop(heap)
                if not heap:
                    cond.wait()
                    continue
                delay = heap[0][0] - time.monotonic()
                if delay > 0:
                    cond.wait(delay)
                    continue
                deadline = heapq.heappop(heap)[2]
            deadline._fire()


_watchdog = _Watchdog()
os.register_at_fork(after_in_child=_watchdog._reset)


class _GuardMixin:
    """Connects only to addresses resolve_allowed approved, by address, without resolving again."""

    allow_loopback: bool
    def _new_conn(self) -> socket.socket:
        addresses = resolve_allowed(self._dns_host, self.port, self.allow_loopback)
        deadline = getattr(_Deadline.current, "deadline", None)
        error: OSError = OSError("no address to connect to")
        for address in addresses:
            timeout = max(deadline.left(), 0.001) if deadline else self.timeout
            try:
                return create_connection((address, self.port), timeout,
                                         socket_options=self.socket_options)
            except OSError as exc:
                error = exc
        if isinstance(error, socket.timeout):
            raise ConnectTimeoutError(self, f"Connection to {self.host} timed out.") from error
        raise NewConnectionError(self, f"Failed to establish a new connection: {error}") from error

    def getresponse(self):
        deadline = getattr(_Deadline.current, "deadline", None)
        if deadline is not None:
            deadline.attach(self.sock)
        return super().getresponse()


@functools.cache
def _pool_classes(allow_loopback: bool) -> dict[str, type]:
    attrs = {"allow_loopback": allow_loopback}
    plain = type("GuardedHTTPConnection", (_GuardMixin, HTTPConnection), attrs)
    tls = type("GuardedHTTPSConnection", (_GuardMixin, HTTPSConnection), attrs)
    return {"http": type("GuardedPool", (HTTPConnectionPool,), {"ConnectionCls": plain}),
            "https": type("GuardedTLSPool", (HTTPSConnectionPool,), {"ConnectionCls": tls})}


@functools.cache
def _tls_context(ca_certs: str | None) -> ssl.SSLContext:
    """One verifying context per CA bundle, shared: loading certifi's bundle costs ~15 ms of CPU."""
    context = create_urllib3_context()  # CERT_REQUIRED, host name checked, TLS 1.2 or later
    context.load_verify_locations(cafile=ca_certs or certifi.where())
    return context


class Fetcher:
    """GETs public web pages within a FetchPolicy; one urllib3 PoolManager, reused across calls."""

    def __init__(self, policy: FetchPolicy = FetchPolicy(),
                 user_agent: str = "Vigil/0.1 (+monitor)", *, ca_certs: str | None = None):
        """`ca_certs`, a PEM file of CAs to trust instead of certifi's bundle, is for tests."""
        self.policy = policy
        self._headers = {"User-Agent": user_agent, "Accept-Encoding": "gzip, deflate",
                         "Accept": "*/*", "Connection": "keep-alive"}
        self._pools = urllib3.PoolManager(num_pools=10, maxsize=10, cert_reqs="CERT_REQUIRED",
                                          ssl_context=_tls_context(ca_certs))
        self._pools.pool_classes_by_scheme = _pool_classes(policy.allow_loopback)

    def close(self) -> None:
        self._pools.clear()

    def get(self, url: str, headers: dict[str, str] | None = None,
            validators: Validators | None = None) -> Response:
        """The page, or with `validators` possibly a 304 (`not_modified`, empty body). The validators follow
        redirects on the origin only; a 304 to a request that sent none is a FetchError."""
        check_url(url)
        conditional = validators.headers() if validators else {}
        if conditional:
            headers = {**(headers or {}), **conditional}
        with _Deadline(self.policy.timeout) as deadline:
            return self._follow(url, self._merged(headers), deadline,
                                private=frozenset(name.lower() for name in conditional), conditional=bool(conditional))

    def call(self, method: str, url: str, headers: dict[str, str] | None = None, body: bytes | None = None,
             timeout: float | None = None) -> Response:
        """One request of a tool's step: any status is an answer (a 404 is data, not an error); GET and HEAD
        follow redirects, other methods answer the redirect itself. FetchError only when it could not run."""
        check_url(url)
        seconds = min(self.policy.timeout, timeout) if timeout is not None else self.policy.timeout
        with _Deadline(seconds) as deadline:
            if method in ("GET", "HEAD"):
                # every header the caller gives is a secret here (a tool's): none of them follows a redirect off
                # the origin, not only the usual credential headers
                private = frozenset(name.lower() for name in headers or ())
                return self._follow(url, self._merged(headers), deadline, method=method, strict=False,
                                    private=private)
            resp = self._send(url, self._merged(headers), deadline, method=method, body=body)
            try:
                return self._finish(resp, deadline, strict=False)
            finally:
                deadline.attach(None)
                if resp.connection is not None:
                    resp.close()
                resp.release_conn()

    def _merged(self, headers: dict[str, str] | None) -> dict[str, str]:
        if not headers:
            return self._headers
        # they override the defaults whatever the case of the names; None drops one
        pairs = {k.lower(): (k, v) for k, v in [*self._headers.items(), *headers.items()]}
        return {name: value for name, value in pairs.values() if value is not None}

    def _follow(self, url: str, headers: dict[str, str], deadline: _Deadline, method: str = "GET",
                strict: bool = True, private: frozenset = frozenset(), conditional: bool | None = None) -> Response:
        """`private` headers are dropped where the redirects leave the origin, with the credentials. For get(),
        `conditional` says whether they are validators (a 304 answers them until they are dropped), and the
        Response gets the final answer's validators unless the redirects left the origin."""
        left = False
        for _ in range(self.policy.max_redirects + 1):
            resp = self._send(url, headers, deadline, method=method)
            try:
                target = _redirect_target(resp)
                if target is None:
                    return self._finish(resp, deadline, strict, asked=bool(conditional) and not left,
                                        keep_validators=conditional is not None and not left)
                with contextlib.suppress(FetchError):  # read a small body: the connection is reused
                    _read_body(resp, deadline, _CHUNK)
            finally:
                deadline.attach(None)
                if resp.connection is not None:  # body not read to its end: the connection must go
                    resp.close()
                resp.release_conn()  # urllib3 released it already if the body was read to its end
            if _strips_credentials(url, target):
                left = True
                headers = {k: v for k, v in headers.items()
                           if k.lower() not in _CREDENTIAL_HEADERS and k.lower() not in private}
            url = target
        raise FetchError(f"The page led through more than {self.policy.max_redirects} redirects; "
                         "the redirect chain is too long or loops.")

    def _send(self, url: str, headers: dict[str, str], deadline: _Deadline, method: str = "GET",
              body: bytes | None = None) -> BaseHTTPResponse:
        """Sends the request and reads the status line and headers; the body is left to _finish."""
        remaining = deadline.left()
        if remaining <= 0:
            raise _timed_out(url, deadline)
        try:
            prepared = _prepare(url)
            resp = self._pools.urlopen(method, prepared, body=body, headers=headers, redirect=False,
                                       retries=False, preload_content=False, decode_content=True,
                                       timeout=urllib3.Timeout(connect=remaining, read=remaining))
        except (HTTPError, OSError, ValueError) as exc:
            raise _translate(exc, url, deadline) from exc
        resp.url = prepared
        return resp

    def _finish(self, resp: BaseHTTPResponse, deadline: _Deadline, strict: bool = True,
                asked: bool = False, keep_validators: bool = False) -> Response:
        """The Response; `keep_validators`: with the answer's validators (get() on the origin asked)."""
        if strict:
            _check_status(resp, asked)
        body, truncated = _read_body(resp, deadline, self.policy.max_bytes)
        headers = {name.lower(): value for name, value in resp.headers.itermerged()}
        return Response(url=resp.url, status=resp.status, headers=headers, body=body, truncated=truncated,
                        validators=Validators.of(headers) if keep_validators else None)


@functools.lru_cache(maxsize=1024)
def _prepare(url: str) -> str:
    """The url as sent and as Response.url: normalized and quoted as requests prepared it."""
    parts = parse_url(url)
    netloc = f"{parts.host}:{parts.port}" if parts.port else parts.host
    return _requote(urlunparse((parts.scheme, netloc, parts.path or "/", "", parts.query,
                                parts.fragment)))


def _requote(uri: str) -> str:
    """requests' requote_uri: decode %XX escapes of unreserved characters, quote illegal ones."""
    try:
        uri = _ESCAPE.sub(lambda m: c if (c := chr(int(m[1], 16))) in _UNRESERVED else m[0], uri)
    except ValueError:  # an escape that is not hexadecimal: its '%' is quoted too
        return quote(uri, safe="!#$&'()*+,/:;=?@[]~")
    return quote(uri, safe="!#$%&'()*+,/:;=?@[]~")


def _redirect_target(resp: BaseHTTPResponse) -> str | None:
    location = resp.headers.get("location")
    if resp.status not in _REDIRECT_CODES or not location:
        return None
    try:  # http.client decodes header values as latin-1; Location is UTF-8 far more often
        return check_url(_requote(urljoin(resp.url, location.encode("latin-1").decode("utf-8"))))
    except (BlockedURL, ValueError) as exc:
        detail = exc.message if isinstance(exc, BlockedURL) else "it is not a valid url."
        raise BlockedURL(f"The page redirected to an unusable url: {detail}") from None


def _strips_credentials(old_url: str, new_url: str) -> bool:
    """Whether a redirect leaves the origin (http to https on default ports does not)."""
    old, new = urlsplit(old_url), urlsplit(new_url)
    upgrade = (old.scheme, old.port or 80, new.scheme, new.port or 443) == ("http", 80, "https", 443)
    ports = {"http": 80, "https": 443}
    same = (old.scheme, old.port or ports[old.scheme]) == (new.scheme, new.port or ports[new.scheme])
    return old.hostname != new.hostname or not (upgrade or same)


def _read_body(resp: BaseHTTPResponse, deadline: _Deadline, limit: int) -> tuple[bytes, bool]:
    chunks, size = [], 0
    try:
        for chunk in resp.stream(_CHUNK, decode_content=True):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                return b"".join(chunks)[:limit], True
    except (HTTPError, OSError) as exc:
        raise _translate(exc, resp.url, deadline) from exc
    if deadline.expired:
        raise _timed_out(resp.url, deadline)
    return b"".join(chunks), False


def _check_status(resp: BaseHTTPResponse, asked: bool = False) -> None:
    """A 304 answers only a request that `asked` with validators (If-None-Match, If-Modified-Since)."""
    code = resp.status
    if 200 <= code < 300 or (code == 304 and asked):
        return
    text = f"{code} {_PHRASES.get(code, '')}".strip()
    if code == 304:
        raise FetchError("The page answered 304 Not Modified to a request that asked for no comparison, "
                         "so it sent nothing to read.")
    if code == 429 or code >= 500:
        raise FetchError(f"The server answered {text}.", unreachable=True)
    if 400 <= code < 500:
        raise FetchError(f"The page answered {text}.")
    raise FetchError(f"The page answered {text}, which is not a page that can be read.")


def _timed_out(url: str, deadline: _Deadline) -> FetchError:
    host = urlsplit(url).netloc
    return FetchError(f"The request to {host} timed out after {deadline.seconds:g} seconds.",
                      unreachable=True)


def _translate(exc: BaseException, url: str, deadline: _Deadline) -> FetchError:
    chain = _error_chain(exc)
    host = urlsplit(url).netloc
    if any(isinstance(e, FetchError) for e in chain):
        return next(e for e in chain if isinstance(e, FetchError))
    if deadline.expired:
        return _timed_out(url, deadline)
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return FetchError(f"The server at {host} refused the connection.", unreachable=True)
    if any(isinstance(e, NewConnectionError) for e in chain):
        return FetchError(f"Could not connect to {host}.", unreachable=True)
    if any(isinstance(e, (socket.timeout, Urllib3Timeout)) for e in chain):
        return _timed_out(url, deadline)
    if any(isinstance(e, SSLError) for e in chain):
        return FetchError(f"The secure connection to {host} failed (certificate or TLS problem).",
                          unreachable=True)
    if isinstance(exc, ValueError):
        return BlockedURL(f"The url could not be used ({exc}); give a plain http(s) address.")
    return FetchError(f"The connection to {host} failed while reading the page.", unreachable=True)


def _error_chain(exc: BaseException) -> list[BaseException]:
    seen, todo = [], [exc]
    while todo:
        err = todo.pop()
        if isinstance(err, BaseException) and err not in seen:
            seen.append(err)
            todo.extend([err.__cause__, err.__context__, getattr(err, "reason", None), *err.args])
    return seen
