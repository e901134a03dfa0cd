"""The one outbound HTTP seam: GET (and a tool step's other methods) with an SSRF guard at connect time, and
size/time limits; a conditional GET when the caller has validators. Which addresses may be contacted is
engine/addresses.py's."""

from __future__ import annotations

import collections
import contextlib
import functools
import heapq
import http
import http.client
import itertools
import os
import re
import select
import socket
import ssl
import string
import threading
import time
import zlib
from dataclasses import dataclass
from socket import create_connection
from urllib.parse import quote, urljoin, urlsplit, urlunparse

import certifi
from urllib3.util import parse_url

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


class _ConnectFailed(OSError):
    """No approved address of the host took the connection (the last attempt's error is the cause)."""


class _Connection:
    """One keep-alive connection to one origin, opened only to an address resolve_allowed approved, by
    address, without resolving again (what the guard checked is what is contacted); TLS verifies the host
    name the url gave. It writes each request's head itself and reads the answer with http.client."""

    __slots__ = ("origin", "sock", "_context")

    def __init__(self, origin: _Origin, context: ssl.SSLContext | None):
        self.origin, self._context = origin, context
        self.sock: socket.socket | None = None

    def connect(self, deadline: _Deadline) -> None:
        error: OSError = OSError("no address to connect to")
        host, port = self.origin.name, self.origin.port
        for address in resolve_allowed(host, port, self.origin.allow_loopback):
            try:
                sock = create_connection((address, port), max(deadline.left(), 0.001))
                break
            except OSError as exc:
                error = exc
        else:
            raise _ConnectFailed(str(error)) from error
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._context is not None:
                sock = self._context.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
                # the ssl module gives the whole handshake one budget (the socket's timeout, what is left of the
                # deadline); attached, the watchdog also shuts it down when the deadline runs out
                deadline.attach(sock)
                sock.do_handshake()
        except BaseException:
            sock.close()
            raise
        self.sock = sock

    def exchange(self, head: bytes, body: bytes | None, method: str) -> _Answer:
        """Sends the request and reads the answer's status line and headers."""
        if body and len(body) > _CHUNK:
            self.sock.sendall(head)
            self.sock.sendall(body)
        else:
            self.sock.sendall(head + body if body else head)
        answer = _Answer(self.sock, method=method)
        try:
            answer.begin()
        except BaseException:
            answer.close()
            raise
        return answer

    def idle_dropped(self) -> bool:
        """Whether the server closed (or wrote to) the connection while it waited in the pool: readable
        with no request out means an end of file or junk, and either way it cannot carry the next one."""
        if self.sock is None:
            return True
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        return bool(poller.poll(0))

    def close(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()


class _Answer(http.client.HTTPResponse):
    """http.client's response (its body reading: lengths, chunks, the end of the connection) with the header
    block read by _Headers instead of the email package's parser, which took ~40 µs of a 304's ~250."""

    def begin(self) -> None:
        if self.headers is not None:
            return
        version, status, reason = self._read_status()
        skipped = 0
        while 100 <= status < 200:  # interim answers (100 Continue, 103 Early Hints): skip to the real one
            if skipped == _MAX_INTERIM:
                raise http.client.HTTPException(f"more than {_MAX_INTERIM} interim answers")
            _Headers.read(self.fp)
            version, status, reason = self._read_status()
            skipped += 1
        self.code = self.status = status
        self.reason = reason.strip()
        if not version.startswith("HTTP/1."):
            raise http.client.UnknownProtocol(version)
        self.version = 10 if version == "HTTP/1.0" else 11
        self.headers = self.msg = _Headers.read(self.fp)
        self.chunked = self.headers.get("transfer-encoding", "").lower() == "chunked"
        self.chunk_left = None
        self.will_close = self._check_close()
        self.length = None
        length = self.headers.get("content-length")
        if length and not self.chunked:
            with contextlib.suppress(ValueError):
                self.length = int(length) if int(length) >= 0 else None
        if status in (204, 304) or self._method == "HEAD":
            self.length = 0
        if not self.will_close and not self.chunked and self.length is None:
            self.will_close = True  # no length and not chunked: the body ends where the connection does


#: interim (1xx) answers skipped before the real one; a server that sends more is not answering
_MAX_INTERIM = 10


class _Headers:
    """An answer's header block: `first` (lower-cased name → its first value: what http.client reads for the
    body's framing) and `merged` (→ every value of it joined with ", ": Response.headers)."""

    __slots__ = ("first", "merged")
    #: lines of a header block (folded ones and ones without a colon count too), and the length of one, as
    #: http.client limits them: a block is at most ~6 MiB however the server spreads it
    _MAX_LINES = 100
    _MAX_LINE = 65536

    def __init__(self, pairs: list[tuple[str, str]]):
        self.first: dict[str, str] = {}
        self.merged: dict[str, str] = {}
        for name, value in pairs:
            key = name.lower()
            if key in self.merged:
                self.merged[key] = f"{self.merged[key]}, {value}"
            else:
                self.first[key] = self.merged[key] = value

    @classmethod
    def read(cls, fp) -> _Headers:
        """Reads up to the blank line; a line over 64 KiB or a block over 100 lines is refused."""
        pairs: list[tuple[str, str]] = []
        for _ in range(cls._MAX_LINES + 1):
            line = fp.readline(cls._MAX_LINE + 1)
            if len(line) > cls._MAX_LINE:
                raise http.client.LineTooLong("header line")
            if line in (b"\r\n", b"\n", b""):
                return cls(pairs)
            text = line.decode("iso-8859-1").rstrip("\r\n")
            if text[:1] in (" ", "\t") and pairs:  # an obsolete folded line continues the header before it
                name, value = pairs[-1]
                pairs[-1] = (name, f"{value} {text.strip()}")
                continue
            name, colon, value = text.partition(":")
            if colon and name.strip():
                pairs.append((name.strip(), value.strip(" \t")))
        raise http.client.HTTPException(f"got more than {cls._MAX_LINES} header lines")

    def get(self, name: str, default=None):
        return self.first.get(name.lower(), default)


@dataclass(frozen=True)
class _Origin:
    tls: bool
    #: as the url writes it (an IPv6 address in brackets)
    host: str
    port: int
    allow_loopback: bool

    @property
    def name(self) -> str:
        """The host to resolve and to verify the certificate for: an IPv6 address without its brackets."""
        return self.host[1:-1] if self.host.startswith("[") else self.host

    @functools.cached_property
    def host_header(self) -> str:
        """Host's value: the scheme's own port left out, as browsers (and urllib3) send it."""
        return self.host if self.port == (443 if self.tls else 80) else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class _Target:
    """A url as sent: `url` normalized and quoted as requests prepared it (also Response.url), its origin and
    the request target (path and query; the fragment is not sent)."""
    url: str
    origin: _Origin
    path: str


class _Pool:
    """Idle keep-alive connections, a few per origin, for the few origins used last.

    16 origins, as urllib3's pool kept 10: each worker thread has a Fetcher, and with 8 threads that is at most 128
    idle sockets a process (a worker's claims come sorted by url, so its next check is mostly to the last origin).

    A connection is out of the pool while a request uses it, so one is never shared by two threads; one that
    comes back with its response not read to the end, a close asked for, or its deadline spent is closed
    instead (its socket may hold the rest of an answer, or be shut down).
    """

    def __init__(self, per_origin: int = 10, origins: int = 16):
        self._per_origin, self._origins = per_origin, origins
        self._idle: collections.OrderedDict[_Origin, list[_Connection]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def take(self, origin: _Origin) -> _Connection | None:
        while True:
            with self._lock:
                idle = self._idle.get(origin)
                if not idle:
                    return None
                conn = idle.pop()
            if not conn.idle_dropped():
                return conn
            conn.close()

    def give(self, conn: _Connection) -> None:
        evicted: list[_Connection] = []
        with self._lock:
            idle = self._idle.get(conn.origin)
            if idle is None:
                idle = self._idle[conn.origin] = []
            self._idle.move_to_end(conn.origin)
            if len(idle) < self._per_origin:
                idle.append(conn)
            else:
                evicted.append(conn)
            while len(self._idle) > self._origins:
                evicted.extend(self._idle.popitem(last=False)[1])
        for stale in evicted:
            stale.close()

    def clear(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, collections.OrderedDict()
        for conns in idle.values():
            for conn in conns:
                conn.close()


@functools.cache
def _tls_context(ca_certs: str | None) -> ssl.SSLContext:
    """One verifying context per CA bundle, shared: loading certifi's bundle costs ~15 ms of CPU."""
    context = ssl.create_default_context(cafile=ca_certs or certifi.where())  # CERT_REQUIRED, host name checked
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    return context


class Fetcher:
    """GETs public web pages within a FetchPolicy, over kept-alive connections reused across calls.

    Built on http.client directly, not on `requests` as DESIGN.md lists nor on urllib3 as it was before: a
    quiet check's GET is most of its CPU, and urllib3's pool, retry and response layers cost more than the
    request itself (in one process against one server, a 304 took ~500 µs of CPU through urllib3 and ~190 µs
    here). What urllib3 gave is kept here: the guarded connect, verified TLS, the keep-alive pool with its
    dropped-connection check, gzip/deflate decoding within the size cap. urllib3 still parses the url.
    """

    def __init__(self, policy: FetchPolicy = FetchPolicy(),
                 user_agent: str = "Vigil/0.1 (+monitor)", *, ca_certs: str | None = None):
        """`ca_certs`, a PEM file of CAs to trust instead of certifi's bundle, is for tests."""
        self.policy = policy
        self._headers = {"User-Agent": user_agent, "Accept-Encoding": "gzip, deflate",
                         "Accept": "*/*", "Connection": "keep-alive"}
        self._context = _tls_context(ca_certs)
        self._pool = _Pool()

    def close(self) -> None:
        self._pool.clear()

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
            sent = self._send(url, self._merged(headers), deadline, method=method, body=body)
            try:
                return self._finish(sent, deadline, strict=False)
            finally:
                self._release(sent, deadline)

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
            sent = self._send(url, headers, deadline, method=method)
            try:
                target = _redirect_target(sent)
                if target is None:
                    return self._finish(sent, deadline, strict, asked=bool(conditional) and not left,
                                        keep_validators=conditional is not None and not left)
                with contextlib.suppress(FetchError):  # read a small body: the connection is reused
                    _read_body(sent, deadline, _CHUNK)
            finally:
                self._release(sent, deadline)
            if _strips_credentials(url, target):
                left = True
                headers = {k: v for k, v in headers.items()
                           if k.lower() not in _CREDENTIAL_HEADERS and k.lower() not in private}
            url = target
        raise FetchError(f"The page led through more than {self.policy.max_redirects} redirects; "
                         "the redirect chain is too long or loops.")

    def _send(self, url: str, headers: dict[str, str], deadline: _Deadline, method: str = "GET",
              body: bytes | None = None) -> _Sent:
        """Sends the request and reads the status line and headers; the body is left to _finish."""
        if deadline.left() <= 0:
            raise _timed_out(url, deadline)
        try:
            target = _target(url, self.policy.allow_loopback)
            head = _request_head(method, target, headers, body)  # a header that cannot be sent touches no connection
        except ValueError as exc:
            raise _translate(exc, url, deadline) from exc
        conn = self._pool.take(target.origin)
        if conn is not None:
            try:
                return self._request(conn, target, head, deadline, method, body)
            except (http.client.HTTPException, OSError, ValueError) as exc:
                conn.close()
                # the server may close an idle connection just as it is reused: a GET or HEAD it never answered
                # is sent again once, on a new connection (another method might have been carried out)
                if deadline.expired or method not in ("GET", "HEAD") or not _unanswered(exc):
                    raise _translate(exc, target.url, deadline) from exc
        conn = None
        try:
            conn = _Connection(target.origin, self._context if target.origin.tls else None)
            return self._request(conn, target, head, deadline, method, body)
        except (http.client.HTTPException, OSError, ValueError) as exc:
            if conn is not None:
                conn.close()
            raise _translate(exc, target.url, deadline) from exc

    def _request(self, conn: _Connection, target: _Target, head: bytes, deadline: _Deadline,
                 method: str, body: bytes | None) -> _Sent:
        if conn.sock is None:
            conn.connect(deadline)
        conn.sock.settimeout(max(deadline.left(), 0.001))
        deadline.attach(conn.sock)
        return _Sent(conn, conn.exchange(head, body, method), target.url)

    def _release(self, sent: _Sent, deadline: _Deadline) -> None:
        """Back to the pool if the answer was read to its end and the connection may carry another."""
        deadline.attach(None)
        conn, resp = sent.conn, sent.resp
        if resp.isclosed() and not resp.will_close and conn.sock is not None and not deadline.expired:
            self._pool.give(conn)
        else:
            resp.close()
            conn.close()

    def _finish(self, sent: _Sent, deadline: _Deadline, strict: bool = True,
                asked: bool = False, keep_validators: bool = False) -> Response:
        """The Response; `keep_validators`: with the answer's validators (get() on the origin asked)."""
        if strict:
            _check_status(sent.resp, asked)
        body, truncated = _read_body(sent, deadline, self.policy.max_bytes)
        headers = sent.headers()
        return Response(url=sent.url, status=sent.resp.status, headers=headers, body=body, truncated=truncated,
                        validators=Validators.of(headers) if keep_validators else None)


@dataclass
class _Sent:
    """A request sent and its answer's status line and headers read; the body not yet."""
    conn: _Connection
    resp: _Answer
    url: str

    def headers(self) -> dict[str, str]:
        """Lower-cased names; a header sent more than once has its values joined with ", "."""
        return self.resp.headers.merged


_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_HEADER_VALUE = re.compile(r"[^\x00\n\r]*\Z")


def _request_head(method: str, target: _Target, headers: dict[str, str], body: bytes | None) -> bytes:
    """The request line and headers as sent; a name or value that would break the head is refused, naming the
    header but not its value (a tool's header values are secrets)."""
    if not _TOKEN.match(method):
        raise _BadRequest(f"The request method {method[:20]!r} is not a valid HTTP method.")
    lines = [f"{method} {target.path} HTTP/1.1"]
    if not any(name.lower() == "host" for name in headers):
        lines.append(f"Host: {target.origin.host_header}")
    lines.extend(_header_line(name, value) for name, value in headers.items())
    if body is not None or method in _BODY_METHODS:
        lines.append(f"Content-Length: {len(body or b'')}")
    lines.append("\r\n")
    try:
        return "\r\n".join(lines).encode("latin-1")
    except UnicodeEncodeError:
        raise _BadRequest("A request header holds a character outside Latin-1; "
                          "percent-encode it or leave it out.") from None


def _header_line(name: str, value: str | int) -> str:
    """One header's line, checked (not remembered: a tool's header values are secrets)."""
    if isinstance(value, int):
        value = str(value)
    if not isinstance(name, str) or not _TOKEN.match(name):
        raise _BadRequest(f"The request header name {str(name)[:40]!r} is not a valid header name.")
    if not isinstance(value, str) or not _HEADER_VALUE.match(value):
        raise _BadRequest(f"The request header {name!r} holds a line break or other character a header "
                          "cannot carry.")
    return f"{name}: {value}"


class _BadRequest(ValueError):
    """A request that cannot be written as HTTP/1.1: it is the caller's to fix, not the url's."""


def _unanswered(exc: BaseException) -> bool:
    """The error of a request the server closed before answering anything (a stale kept-alive connection)."""
    return isinstance(exc, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                            ConnectionAbortedError))


@functools.lru_cache(maxsize=4096)
def _prepare(url: str) -> str:
    """The url as sent and as Response.url: normalized and quoted as requests prepared it."""
    parts = parse_url(url)
    netloc = f"{parts.host}:{parts.port}" if parts.port else parts.host
    return _requote(urlunparse((parts.scheme, netloc, parts.path or "/", "", parts.query,
                                parts.fragment)))


@functools.lru_cache(maxsize=4096)
def _target(url: str, allow_loopback: bool) -> _Target:
    prepared = _prepare(url)
    parts = parse_url(prepared)
    tls = parts.scheme == "https"
    origin = _Origin(tls, parts.host, parts.port or (443 if tls else 80), allow_loopback)
    return _Target(prepared, origin, parts.request_uri)


def _requote(uri: str) -> str:
    """requests' requote_uri: decode %XX escapes of unreserved characters, quote illegal ones."""
    try:
        uri = _ESCAPE.sub(lambda m: c if (c := chr(int(m[1], 16))) in _UNRESERVED else m[0], uri)
    except ValueError:  # an escape that is not hexadecimal: its '%' is quoted too
        return quote(uri, safe="!#$&'()*+,/:;=?@[]~")
    return quote(uri, safe="!#$%&'()*+,/:;=?@[]~")


def _redirect_target(sent: _Sent) -> str | None:
    location = sent.resp.headers.get("location")
    if sent.resp.status not in _REDIRECT_CODES or not location:
        return None
    try:  # http.client decodes header values as latin-1; Location is UTF-8 far more often
        return check_url(_requote(urljoin(sent.url, location.encode("latin-1").decode("utf-8"))))
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


def _read_body(sent: _Sent, deadline: _Deadline, limit: int) -> tuple[bytes, bool]:
    """The body, decoded, and whether it was cut at `limit` bytes (decoded bytes: a small gzip bomb is cut
    too, without inflating more than the cap)."""
    resp = sent.resp
    inflater = _Inflater.of(resp.headers.merged.get("content-encoding"))
    chunks, size = [], 0
    try:
        while chunk := resp.read(_CHUNK):
            if inflater is not None:
                chunk = inflater.inflate(chunk, limit - size + 1)
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                return b"".join(chunks)[:limit], True
    except (http.client.HTTPException, OSError, zlib.error) as exc:
        raise _translate(exc, sent.url, deadline) from exc
    if deadline.expired:
        raise _timed_out(sent.url, deadline)
    return b"".join(chunks), False


class _Inflater:
    """Decodes a gzip or deflate body, never more than it is asked for at a time.

    One coding only: a body encoded twice over ("gzip, gzip"), or in a coding Vigil does not ask for, is read
    as it came (as urllib3 passed an unknown coding through).
    """

    def __init__(self, gzip: bool):
        self._gzip = gzip
        self._raw_deflate = False
        self._started = False
        self._zlib = self._new()

    @classmethod
    def of(cls, coding: str | None) -> _Inflater | None:
        codings = [c for c in (coding or "").lower().replace(" ", "").split(",") if c and c != "identity"]
        if len(codings) != 1 or codings[0] not in ("gzip", "x-gzip", "deflate"):
            return None
        return cls(gzip=codings[0] != "deflate")

    def _new(self):
        if self._gzip:
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        return zlib.decompressobj(-zlib.MAX_WBITS if self._raw_deflate else zlib.MAX_WBITS)

    def inflate(self, data: bytes, most: int) -> bytes:
        """Up to `most` bytes of what `data` decodes to (all of it when it is shorter: then every byte of
        `data` was used; a caller that gets `most` bytes stops reading)."""
        if not self._started and not self._gzip:
            self._started = True
            try:
                return self._inflate(data, most)
            except zlib.error:  # "deflate" as many servers send it: raw, without the zlib wrapper
                self._raw_deflate = True
                self._zlib = self._new()
        return self._inflate(data, most)

    def _inflate(self, data: bytes, most: int) -> bytes:
        out = self._zlib.decompress(data, most)
        # a gzip body may be several members one after another: each is decoded in turn
        while self._gzip and self._zlib.eof and self._zlib.unused_data and len(out) < most:
            rest, self._zlib = self._zlib.unused_data, self._new()
            out += self._zlib.decompress(rest, most - len(out))
        return out


def _check_status(resp, asked: bool = False) -> None:
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
    if any(isinstance(e, socket.timeout) for e in chain):
        return _timed_out(url, deadline)
    if any(isinstance(e, _ConnectFailed) for e in chain):
        return FetchError(f"Could not connect to {host}.", unreachable=True)
    if isinstance(exc, _BadRequest):
        return FetchError(str(exc))
    if any(isinstance(e, ssl.SSLError) for e in chain):
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
