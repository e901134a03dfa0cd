"""The runner's one HTTP seam to the Vigil server (urllib, JSON in and out), and its errors."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import urllib.error
import urllib.request
import weakref
from typing import Optional
from urllib.parse import quote

from runner import __version__
from runner.keepalive import KeptConnections, direct

#: seconds the server may hold a poll (it holds at most 25)
POLL_WAIT_SECONDS = 25
#: a poll's socket timeout is its wait and this much room for the network
POLL_MARGIN_SECONDS = 10
#: the socket timeout of every other call
REQUEST_TIMEOUT_SECONDS = 30
#: the first and the longest pause between retries after a network error
BACKOFF_FIRST_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 30.0


class RunnerError(Exception):
    """Base of the runner's errors; `detail` is one sentence for the owner."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


class Unpaired(RunnerError):
    """401: the device was revoked, or the token is unknown; the runner exits."""


class AnotherRunner(RunnerError):
    """409 on the poll: another runner is connected with this device's token; the runner exits."""


class Refused(RunnerError):
    """A 4xx other than 401: permanent for this request, sending it again will not help."""

    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status = status


class Unreachable(RunnerError):
    """The network, a timeout, a 5xx or a 429: try again later (`retry_after`: seconds the server asked for)."""

    def __init__(self, detail: str, retry_after: Optional[float] = None):
        super().__init__(detail)
        self.retry_after = retry_after


class Backoff:
    """Pauses between retries: `first`, doubling to at most `most` seconds (1, 2, 4 … 30 by default)."""

    def __init__(self, first: float = BACKOFF_FIRST_SECONDS, most: float = BACKOFF_MAX_SECONDS):
        self._first, self._most = first, most
        self._next = first

    def next(self, at_least: Optional[float] = None) -> float:
        """The pause before the next try: no shorter than `at_least` (a Retry-After), no longer than `most`."""
        delay, self._next = self._next, min(self._next * 2, self._most)
        return max(delay, min(at_least or 0.0, self._most))

    def reset(self) -> None:
        """A call went through: start again from the first pause."""
        self._next = self._first


class Client:
    """Calls of docs/runner.md's wire protocol against `server` (its base URL)."""

    def __init__(self, server: str, token: Optional[str] = None, session: Optional[str] = None):
        self.server = server.rstrip("/")
        self._token = token
        self._session = session
        self._connections: weakref.WeakSet = weakref.WeakSet()
        self._connections_lock = threading.Lock()
        self._aborted = False
        self._opener = urllib.request.build_opener(_HTTPHandler(self._track), _HTTPSHandler(self._track))
        self._kept = KeptConnections(self.server, self._track) if direct(self.server) else None

    def abort(self) -> None:
        """Cut the calls in flight (a held poll included) and refuse new ones; they fail as Unreachable."""
        with self._connections_lock:
            self._aborted = True
            connections = list(self._connections)
        for connection in connections:
            sock = connection.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _track(self, connection_class):
        def connect(host, **kwargs):
            connection = connection_class(host, **kwargs)
            with self._connections_lock:
                if self._aborted:
                    raise OSError("the runner is stopping")
                self._connections.add(connection)
            return connection
        return connect

    def pair(self, code: str, name: Optional[str], hostname: str) -> dict:
        """Trade a pairing code for `{"device_id", "name", "token"}`."""
        body = {"code": code, "hostname": hostname, "version": __version__}
        if name:
            body["name"] = name
        return self._call("POST", "/api/runner/pair", body)

    def poll(self, wait: int = POLL_WAIT_SECONDS) -> dict:
        """Wait up to `wait` seconds for `{"assignments": [...], "stops": [...]}`."""
        try:
            return self._call("GET", f"/api/runner/poll?wait={int(wait)}", timeout=wait + POLL_MARGIN_SECONDS)
        except Refused as exc:
            if exc.status == 409:
                raise AnotherRunner(exc.detail) from None
            raise

    def records(self, run_id: str, records: list) -> int:
        """Send numbered records; the highest seq the server holds without a gap."""
        answer = self._call("POST", f"/api/runner/runs/{quote(run_id, safe='')}/records", {"records": records})
        acked = answer.get("acked")
        if isinstance(acked, bool) or not isinstance(acked, int):
            raise Unreachable(f"the server answered records without an acked number: {answer!r:.200}")
        return acked

    def result(self, run_id: str, result: dict) -> None:
        """Send a polled run's result (a repeat is a no-op on the server)."""
        self._call("POST", f"/api/runner/runs/{quote(run_id, safe='')}/result", result)

    def _call(self, method: str, path: str, body: Optional[dict] = None,
              timeout: float = REQUEST_TIMEOUT_SECONDS) -> dict:
        data = None if body is None else json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        headers = self._headers(body)
        if self._kept is not None:
            try:
                answered = self._kept.call(method, path, data, headers, timeout)
            except (OSError, http.client.HTTPException, socket.timeout) as exc:
                raise Unreachable(f"could not reach {self.server}: {_reason(exc)}") from None
            if answered is not None:
                status, reason, response_headers, raw = answered
                if status >= 400:
                    raise _http_error(status, reason, response_headers, raw)
                return _json_object(raw, path)
        return self._call_urllib(method, path, data, headers, timeout)

    def _call_urllib(self, method: str, path: str, data: Optional[bytes], headers: dict, timeout: float) -> dict:
        """Through urllib: behind a proxy from the environment, or to follow a redirect."""
        request = urllib.request.Request(self.server + path, data=data, method=method, headers=headers)
        try:
            with self._opener.open(request, timeout=timeout) as response:
                return _json_object(response.read(), path)
        except urllib.error.HTTPError as exc:
            raise _http_error(exc.code, exc.reason, exc.headers, _body(exc)) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException, socket.timeout) as exc:
            raise Unreachable(f"could not reach {self.server}: {_reason(exc)}") from None

    def _headers(self, body: Optional[dict]) -> dict:
        headers = {"Accept": "application/json", "User-Agent": f"vigil-runner/{__version__}",
                   "X-Vigil-Runner-Version": __version__}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        if self._session:
            headers["X-Vigil-Session"] = self._session
        return headers


class _HTTPHandler(urllib.request.HTTPHandler):
    """urllib's HTTP handler, its connections made by `connect` (so that Client.abort can reach them)."""

    def __init__(self, connect):
        super().__init__()
        self._connect = connect

    def http_open(self, req):
        return self.do_open(self._connect(http.client.HTTPConnection), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    """urllib's HTTPS handler (the default, verifying context), its connections made by `connect`."""

    def __init__(self, connect):
        super().__init__()
        self._connect = connect

    def https_open(self, req):
        return self.do_open(self._connect(http.client.HTTPSConnection), req, context=self._context)


def _json_object(raw: bytes, path: str) -> dict:
    try:
        answer = json.loads(raw or b"{}")
    except ValueError:
        raise Unreachable(f"the server's answer to {path} is not JSON: {raw[:200]!r}") from None
    if not isinstance(answer, dict):
        raise Unreachable(f"the server's answer to {path} is not a JSON object: {raw[:200]!r}")
    return answer


def _http_error(code: int, reason: str, headers, raw: bytes) -> RunnerError:
    detail = _detail(code, reason, raw)
    if code == 401:
        return Unpaired(detail)
    if code == 429 or code >= 500:
        return Unreachable(f"the server answered {code}: {detail}", _retry_after(headers))
    return Refused(code, detail)


def _body(exc: urllib.error.HTTPError) -> bytes:
    try:
        return exc.read() or b""
    except (OSError, http.client.HTTPException):
        return b""


def _detail(code: int, reason: str, raw: bytes) -> str:
    try:
        answer = json.loads(raw or b"{}")
    except ValueError:
        answer = None
    if isinstance(answer, dict) and isinstance(answer.get("detail"), str):
        return answer["detail"]
    return f"{code} {reason}"


def _retry_after(headers) -> Optional[float]:
    try:
        return max(0.0, float(headers.get("Retry-After", "")))
    except (AttributeError, TypeError, ValueError):
        return None


def _reason(exc: Exception) -> str:
    reason = getattr(exc, "reason", None) or exc
    return str(reason) or type(reason).__name__
