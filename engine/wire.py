"""The wire under engine/http.py's Fetcher: one request's deadline and the watchdog that enforces it, the
keep-alive connection (opened only to an address engine/addresses.py approved), the pool that keeps them, the
request head as written, and the answer's status line, headers and coding as read. What to send, where redirects
may lead and what an answer means are the Fetcher's."""

from __future__ import annotations

import collections
import contextlib
import functools
import heapq
import http.client
import itertools
import os
import re
import select
import socket
import ssl
import threading
import time
import zlib
from dataclasses import dataclass
from socket import create_connection

import certifi

from engine.addresses import Own, resolve_guarded
from engine.egress import Egress, Proxy

#: bytes read (and sent, for a body) at a time
CHUNK = 65536


class Deadline:
    """Shuts the socket in use down once the overall time budget of one get() is spent."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.expires = time.monotonic() + seconds
        self.expired = False
        self.finished = False
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> Deadline:
        _watchdog.watch(self)
        return self

    def __exit__(self, *exc) -> None:
        self.finished = True
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
    """One thread per process that fires every Deadline that runs out.

    A threading.Timer per get() cost a thread start and exit per fetch, about 0.3 ms of CPU, nearly
    as much as the keep-alive GET itself; this one thread waits on a heap of deadlines instead.
    """

    _COMPACT_EVERY = 1024

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        """Fresh state; also runs in a forked child, where the parent's thread does not exist."""
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, Deadline]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, deadline: Deadline) -> None:
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


class ConnectFailed(OSError):
    """No approved address of the host took the connection (the last attempt's error is the cause)."""


class Connection:
    """One keep-alive connection to one origin, opened only to an address resolve_guarded approved, by
    address, without resolving again (what the guard checked is what is contacted); TLS verifies the host
    name the url gave. It writes each request's head itself and reads the answer with http.client."""

    __slots__ = ("origin", "sock", "_context")

    def __init__(self, origin: Origin, context: ssl.SSLContext | None):
        self.origin, self._context = origin, context
        self.sock: socket.socket | None = None

    def connect(self, deadline: Deadline) -> None:
        error: OSError = OSError("no address to connect to")
        host, port = self.origin.name, self.origin.port
        addresses = resolve_guarded(host, port, self.origin.allow_loopback, self.origin.own)
        proxy = self.origin.proxy
        if proxy is not None:  # checked above all the same; the operator's proxy is asked for the name
            sock = self._through(proxy, deadline)
        else:
            for address in addresses:
                try:
                    sock = create_connection((address, port), max(deadline.left(), 0.001))
                    break
                except OSError as exc:
                    error = exc
            else:
                raise ConnectFailed(str(error)) from error
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

    def _through(self, proxy: Proxy, deadline: Deadline) -> socket.socket:
        """A connection to the proxy: a CONNECT tunnel to the origin for https, the proxy itself for plain http
        (whose requests are then written in absolute form, engine/http.py's _target)."""
        sock = proxy.open(deadline.left())
        if self.origin.tls:
            deadline.attach(sock)  # the watchdog shuts a proxy that stalls the CONNECT down with the deadline
            try:
                proxy.tunnel(sock, self.origin.name, self.origin.port)
            except BaseException:
                sock.close()
                raise
        return sock

    def exchange(self, head: bytes, body: bytes | None, method: str) -> Answer:
        """Sends the request and reads the answer's status line and headers."""
        if body and len(body) > CHUNK:
            self.sock.sendall(head)
            self.sock.sendall(body)
        else:
            self.sock.sendall(head + body if body else head)
        answer = Answer(self.sock, method=method)
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


class Answer(http.client.HTTPResponse):
    """http.client's response (its body reading: lengths, chunks, the end of the connection) with the header
    block read by Headers instead of the email package's parser, which took ~40 µs of a 304's ~250."""

    def begin(self) -> None:
        if self.headers is not None:
            return
        version, status, reason = self._read_status()
        skipped = 0
        while 100 <= status < 200:  # interim answers (100 Continue, 103 Early Hints): skip to the real one
            if skipped == _MAX_INTERIM:
                raise http.client.HTTPException(f"more than {_MAX_INTERIM} interim answers")
            Headers.read(self.fp)
            version, status, reason = self._read_status()
            skipped += 1
        self.code = self.status = status
        self.reason = reason.strip()
        if not version.startswith("HTTP/1."):
            raise http.client.UnknownProtocol(version)
        self.version = 10 if version == "HTTP/1.0" else 11
        self.headers = self.msg = Headers.read(self.fp)
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


class Headers:
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
    def read(cls, fp) -> Headers:
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
class Origin:
    tls: bool
    #: as the url writes it (an IPv6 address in brackets)
    host: str
    port: int
    allow_loopback: bool
    #: Vigil itself, which the guard refuses whatever the other rules allow
    own: Own | None = None
    #: the operator's egress proxy (OUTBOUND_PROXY, NO_PROXY), or None: every request direct
    egress: Egress | None = None

    @functools.cached_property
    def proxy(self) -> Proxy | None:
        """The proxy this origin is reached through, or None (no proxy, or NO_PROXY names it)."""
        return self.egress.proxy_for(self.name, self.port) if self.egress else None

    @property
    def name(self) -> str:
        """The host to resolve and to verify the certificate for: an IPv6 address without its brackets."""
        return self.host[1:-1] if self.host.startswith("[") else self.host

    @functools.cached_property
    def host_header(self) -> str:
        """Host's value: the scheme's own port left out, as browsers (and urllib3) send it."""
        return self.host if self.port == (443 if self.tls else 80) else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Target:
    """A url as sent: `url` normalized and quoted as requests prepared it (also Response.url), its origin and
    the request target (path and query; the fragment is not sent)."""
    url: str
    origin: Origin
    path: str
    #: for a plain-http request sent to the operator's proxy (whose path is then absolute), its Proxy-Authorization
    #: ("" when it takes none); None for a request sent to the origin itself
    proxy_authorization: str | None = None


class Pool:
    """Idle keep-alive connections, a few per origin, for the few origins used last.

    16 origins, as urllib3's pool kept 10: each worker thread has a Fetcher, and with 8 threads that is at most 128
    idle sockets a process (a worker's claims come sorted by url, so its next check is mostly to the last origin).

    A connection is out of the pool while a request uses it, so one is never shared by two threads; one that
    comes back with its response not read to the end, a close asked for, or its deadline spent is closed
    instead (its socket may hold the rest of an answer, or be shut down).
    """

    def __init__(self, per_origin: int = 10, origins: int = 16):
        self._per_origin, self._origins = per_origin, origins
        self._idle: collections.OrderedDict[Origin, list[Connection]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def take(self, origin: Origin) -> Connection | None:
        while True:
            with self._lock:
                idle = self._idle.get(origin)
                if not idle:
                    return None
                conn = idle.pop()
            if not conn.idle_dropped():
                return conn
            conn.close()

    def give(self, conn: Connection) -> None:
        evicted: list[Connection] = []
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
def tls_context(ca_certs: str | None) -> ssl.SSLContext:
    """One verifying context per CA bundle, shared: loading certifi's bundle costs ~15 ms of CPU."""
    context = ssl.create_default_context(cafile=ca_certs or certifi.where())  # CERT_REQUIRED, host name checked
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    return context


@dataclass
class Sent:
    """A request sent and its answer's status line and headers read; the body not yet."""
    conn: Connection
    resp: Answer
    url: str

    def headers(self) -> dict[str, str]:
        """Lower-cased names; a header sent more than once has its values joined with ", "."""
        return self.resp.headers.merged


_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_HEADER_VALUE = re.compile(r"[^\x00\n\r]*\Z")


def request_head(method: str, target: Target, headers: dict[str, str], body: bytes | None) -> bytes:
    """The request line and headers as sent; a name or value that would break the head is refused, naming the
    header but not its value (a tool's header values are secrets)."""
    if not _TOKEN.match(method):
        raise BadRequest(f"The request method {method[:20]!r} is not a valid HTTP method.")
    lines = [f"{method} {target.path} HTTP/1.1"]
    if not any(name.lower() == "host" for name in headers):
        lines.append(f"Host: {target.origin.host_header}")
    lines.extend(_header_line(name, value) for name, value in headers.items())
    if target.proxy_authorization:
        lines.append(f"Proxy-Authorization: {target.proxy_authorization}")
    if body is not None or method in _BODY_METHODS:
        lines.append(f"Content-Length: {len(body or b'')}")
    lines.append("\r\n")
    try:
        return "\r\n".join(lines).encode("latin-1")
    except UnicodeEncodeError:
        raise BadRequest("A request header holds a character outside Latin-1; "
                          "percent-encode it or leave it out.") from None


def _header_line(name: str, value: str | int) -> str:
    """One header's line, checked (not remembered: a tool's header values are secrets)."""
    if isinstance(value, int):
        value = str(value)
    if not isinstance(name, str) or not _TOKEN.match(name):
        raise BadRequest(f"The request header name {str(name)[:40]!r} is not a valid header name.")
    if not isinstance(value, str) or not _HEADER_VALUE.match(value):
        raise BadRequest(f"The request header {name!r} holds a line break or other character a header "
                          "cannot carry.")
    return f"{name}: {value}"


class BadRequest(ValueError):
    """A request that cannot be written as HTTP/1.1: it is the caller's to fix, not the url's."""


def unanswered(exc: BaseException) -> bool:
    """The error of a request the server closed before answering anything (a stale kept-alive connection)."""
    return isinstance(exc, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                            ConnectionAbortedError))


class Inflater:
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
    def of(cls, coding: str | None) -> Inflater | None:
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
