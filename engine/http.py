"""The one outbound HTTP seam: GET (and a tool step's other methods) with an SSRF guard at connect time, and
size/time limits; a conditional GET when the caller has validators. Which addresses may be contacted is
engine/addresses.py's; the connections, their pool and deadlines, and the bytes on the wire are engine/wire.py's."""

from __future__ import annotations

import contextlib
import functools
import http
import http.client
import re
import socket
import ssl
import string
import zlib
from dataclasses import dataclass
from urllib.parse import quote, urljoin, urlsplit, urlunparse

from urllib3.util import parse_url

from engine.addresses import Own, check_url
from engine.egress import Egress, refused
from engine.errors import BlockedURL, FetchError
from engine.wire import (
    CHUNK, BadRequest, ConnectFailed, Connection, Deadline, Inflater, Origin, Pool, Sent, Target, request_head,
    tls_context, unanswered,
)
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
    #: Vigil's own origins and listening addresses: refused at connect, FETCH_ALLOW_LOOPBACK or not
    own: Own | None = None
    #: the operator's egress proxy (OUTBOUND_PROXY, NO_PROXY); the guard above still decides first
    egress: Egress | None = None


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




class Fetcher:
    """GETs public web pages within a FetchPolicy, over kept-alive connections reused across calls.

    Built on http.client directly, not on `requests` as DESIGN.md lists nor on urllib3 as it was before: a
    quiet check's GET is most of its CPU, and urllib3's pool, retry and response layers cost more than the
    request itself (in one process against one server, a 304 took ~500 µs of CPU through urllib3 and ~190 µs
    here). What urllib3 gave is kept: the guarded connect, verified TLS, the keep-alive pool with its
    dropped-connection check, gzip/deflate decoding within the size cap (those in engine/wire.py; redirects,
    statuses and errors here). urllib3 still parses the url.
    """

    def __init__(self, policy: FetchPolicy = FetchPolicy(),
                 user_agent: str = "Vigil/0.1 (+monitor)", *, ca_certs: str | None = None):
        """`ca_certs`, a PEM file of CAs to trust instead of certifi's bundle, is for tests."""
        self.policy = policy
        self._headers = {"User-Agent": user_agent, "Accept-Encoding": "gzip, deflate",
                         "Accept": "*/*", "Connection": "keep-alive"}
        self._context = tls_context(ca_certs)
        self._pool = Pool()

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
        with Deadline(self.policy.timeout) as deadline:
            return self._follow(url, self._merged(headers), deadline,
                                private=frozenset(name.lower() for name in conditional), conditional=bool(conditional))

    def call(self, method: str, url: str, headers: dict[str, str] | None = None, body: bytes | None = None,
             timeout: float | None = None) -> Response:
        """One request of a tool's step: any status is an answer (a 404 is data, not an error); GET and HEAD
        follow redirects, other methods answer the redirect itself. FetchError only when it could not run."""
        check_url(url)
        seconds = min(self.policy.timeout, timeout) if timeout is not None else self.policy.timeout
        with Deadline(seconds) as deadline:
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

    def _follow(self, url: str, headers: dict[str, str], deadline: Deadline, method: str = "GET",
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
                    _read_body(sent, deadline, CHUNK)
            finally:
                self._release(sent, deadline)
            if _strips_credentials(url, target):
                left = True
                headers = {k: v for k, v in headers.items()
                           if k.lower() not in _CREDENTIAL_HEADERS and k.lower() not in private}
            url = target
        raise FetchError(f"The page led through more than {self.policy.max_redirects} redirects; "
                         "the redirect chain is too long or loops.")

    def _send(self, url: str, headers: dict[str, str], deadline: Deadline, method: str = "GET",
              body: bytes | None = None) -> Sent:
        """Sends the request and reads the status line and headers; the body is left to _finish."""
        if deadline.left() <= 0:
            raise _timed_out(url, deadline)
        try:
            target = _target(url, self.policy.allow_loopback, self.policy.own, self.policy.egress)
            head = request_head(method, target, headers, body)  # a header that cannot be sent touches no connection
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
                if deadline.expired or method not in ("GET", "HEAD") or not unanswered(exc):
                    raise _translate(exc, target.url, deadline) from exc
        conn = None
        try:
            conn = Connection(target.origin, self._context if target.origin.tls else None)
            return self._request(conn, target, head, deadline, method, body)
        except (http.client.HTTPException, OSError, ValueError) as exc:
            if conn is not None:
                conn.close()
            raise _translate(exc, target.url, deadline) from exc

    def _request(self, conn: Connection, target: Target, head: bytes, deadline: Deadline,
                 method: str, body: bytes | None) -> Sent:
        if conn.sock is None:
            conn.connect(deadline)
        conn.sock.settimeout(max(deadline.left(), 0.001))
        deadline.attach(conn.sock)
        sent = Sent(conn, conn.exchange(head, body, method), target.url)
        if target.proxy_authorization is not None and sent.resp.status == 407:  # the proxy's answer, not the site's
            sent.resp.close()
            conn.close()
            raise refused(conn.origin.proxy, 407, sent.resp.reason, conn.origin.name, conn.origin.port)
        return sent

    def _release(self, sent: Sent, deadline: Deadline) -> None:
        """Back to the pool if the answer was read to its end and the connection may carry another."""
        deadline.attach(None)
        conn, resp = sent.conn, sent.resp
        if resp.isclosed() and not resp.will_close and conn.sock is not None and not deadline.expired:
            self._pool.give(conn)
        else:
            resp.close()
            conn.close()

    def _finish(self, sent: Sent, deadline: Deadline, strict: bool = True,
                asked: bool = False, keep_validators: bool = False) -> Response:
        """The Response; `keep_validators`: with the answer's validators (get() on the origin asked)."""
        if strict:
            _check_status(sent.resp, asked)
        body, truncated = _read_body(sent, deadline, self.policy.max_bytes)
        headers = sent.headers()
        return Response(url=sent.url, status=sent.resp.status, headers=headers, body=body, truncated=truncated,
                        validators=Validators.of(headers) if keep_validators else None)


@functools.lru_cache(maxsize=4096)
def _prepare(url: str) -> str:
    """The url as sent and as Response.url: normalized and quoted as requests prepared it."""
    parts = parse_url(url)
    netloc = f"{parts.host}:{parts.port}" if parts.port else parts.host
    return _requote(urlunparse((parts.scheme, netloc, parts.path or "/", "", parts.query,
                                parts.fragment)))


@functools.lru_cache(maxsize=4096)
def _target(url: str, allow_loopback: bool, own: Own | None = None, egress: Egress | None = None) -> Target:
    """Plain http through the operator's proxy is asked in absolute form (https goes through a tunnel instead)."""
    prepared = _prepare(url)
    parts = parse_url(prepared)
    tls = parts.scheme == "https"
    origin = Origin(tls, parts.host, parts.port or (443 if tls else 80), allow_loopback, own, egress)
    proxy = None if tls else origin.proxy
    if proxy is not None:
        return Target(prepared, origin, f"http://{origin.host_header}{parts.request_uri}", proxy.authorization)
    return Target(prepared, origin, parts.request_uri)  # proxy_authorization None: not sent to a proxy


def _requote(uri: str) -> str:
    """requests' requote_uri: decode %XX escapes of unreserved characters, quote illegal ones."""
    try:
        uri = _ESCAPE.sub(lambda m: c if (c := chr(int(m[1], 16))) in _UNRESERVED else m[0], uri)
    except ValueError:  # an escape that is not hexadecimal: its '%' is quoted too
        return quote(uri, safe="!#$&'()*+,/:;=?@[]~")
    return quote(uri, safe="!#$%&'()*+,/:;=?@[]~")


def _redirect_target(sent: Sent) -> str | None:
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


def _read_body(sent: Sent, deadline: Deadline, limit: int) -> tuple[bytes, bool]:
    """The body, decoded, and whether it was cut at `limit` bytes (decoded bytes: a small gzip bomb is cut
    too, without inflating more than the cap)."""
    resp = sent.resp
    inflater = Inflater.of(resp.headers.merged.get("content-encoding"))
    chunks, size = [], 0
    try:
        while chunk := resp.read(CHUNK):
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


def _timed_out(url: str, deadline: Deadline) -> FetchError:
    host = urlsplit(url).netloc
    return FetchError(f"The request to {host} timed out after {deadline.seconds:g} seconds.",
                      unreachable=True)


def _translate(exc: BaseException, url: str, deadline: Deadline) -> FetchError:
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
    if any(isinstance(e, ConnectFailed) for e in chain):
        return FetchError(f"Could not connect to {host}.", unreachable=True)
    if isinstance(exc, BadRequest):
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
