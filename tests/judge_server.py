"""A real OpenAI-compatible Chat Completions server on 127.0.0.1 that tests use as the judge model.

    with JudgeServer() as server:              # or JudgeServer().start() ... server.stop()
        server.mode = "no_match"               # the answer given when nothing is queued
        server.queue("500", "match")           # answers given first, one per request, in order
        model = JudgeModel("default", server.base_url, "sk-test", "gpt-test")
        ...
        server.requests[-1].body["messages"]   # every request, recorded

Modes: "match", "no_match", "malformed", "500", "429", "401", "content_filter" (200 with
finish_reason content_filter), "content_filter_400" (Azure-style HTTP 400), "slow" (answers
"match" after `slow_seconds`, or at once when the server stops), "empty_choices" (200, choices []),
"html" (200 with an HTML body), "redirect" (302 to /elsewhere). Every completion carries
usage {"prompt_tokens": 100, "completion_tokens": 10}. `match_verdict` / `no_match_verdict` are the
JSON objects the "match" / "no_match" answers carry; a test may replace them.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

MODES = ("match", "no_match", "malformed", "500", "429", "401", "content_filter", "content_filter_400", "slow",
         "empty_choices", "html", "redirect")
USAGE = {"prompt_tokens": 100, "completion_tokens": 10}
MATCH_VERDICT = {"match": True, "summary": "The price dropped to $95.10.", "key": "price-95.10"}
NO_MATCH_VERDICT = {"match": False, "summary": "The price is still $120.00.", "key": None}

AZURE_FILTER_ERROR = {"error": {
    "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy.",
    "type": None, "param": "prompt", "code": "content_filter", "status": 400,
    "innererror": {"code": "ResponsibleAIPolicyViolation",
                   "content_filter_result": {"jailbreak": {"filtered": True, "detected": True}}}}}


@dataclass
class RecordedRequest:
    """One request as the server saw it; `headers` has lower-case names, `body` is parsed JSON or None."""

    method: str
    path: str                       # without the query string
    query: dict[str, str]           # first value of each query parameter
    headers: dict[str, str]
    body: object = None
    raw: bytes = field(default=b"", repr=False)


class JudgeServer:
    """Answers POST …/chat/completions according to `mode` and the queued answers; records every request."""

    def __init__(self, mode: str = "match", *, slow_seconds: float = 5.0) -> None:
        self.mode = mode
        self.slow_seconds = slow_seconds
        self.match_verdict = dict(MATCH_VERDICT)
        self.no_match_verdict = dict(NO_MATCH_VERDICT)
        self.requests: list[RecordedRequest] = []
        self._answers: deque[str] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.judge = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def azure_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/openai/deployments/dep1"

    def queue(self, *modes: str) -> "JudgeServer":
        """Answers for the next requests, in order; `mode` applies again once they are used up."""
        for mode in modes:
            if mode not in MODES:
                raise ValueError(f"Unknown judge server mode {mode!r}.")
        with self._lock:
            self._answers.extend(modes)
        return self

    def next_mode(self) -> str:
        with self._lock:
            return self._answers.popleft() if self._answers else self.mode

    def record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def clear(self) -> None:
        """Forget recorded requests and queued answers (the mode stays)."""
        with self._lock:
            self.requests.clear()
            self._answers.clear()

    def start(self) -> "JudgeServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "JudgeServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def answer(self, mode: str) -> tuple[int, bytes]:
        """The status and body for one answer mode."""
        if mode == "slow":
            self._stopping.wait(self.slow_seconds)
            mode = "match"
        if mode in ("500", "429", "401"):
            return int(mode), _dumps({"error": {"message": f"Simulated HTTP {mode}.", "code": None}})
        if mode == "content_filter_400":
            return 400, _dumps(AZURE_FILTER_ERROR)
        if mode == "content_filter":
            return 200, _completion(None, "content_filter")
        if mode == "empty_choices":
            return 200, _dumps({"id": "chatcmpl-test", "choices": [], "usage": USAGE})
        if mode == "html":
            return 200, b"<html><body>Welcome to the proxy login page.</body></html>"
        if mode == "malformed":
            return 200, _completion('{"match": "true", "summary": "Looks like it', "stop")
        verdict = self.match_verdict if mode == "match" else self.no_match_verdict
        return 200, _completion(json.dumps(verdict), "stop")


def _dumps(value) -> bytes:
    return json.dumps(value).encode("utf-8")


def _completion(content: str | None, finish_reason: str) -> bytes:
    return _dumps({
        "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": "gpt-test",
        "choices": [{"index": 0, "finish_reason": finish_reason,
                     "message": {"role": "assistant", "content": content}}],
        "usage": dict(USAGE, total_tokens=USAGE["prompt_tokens"] + USAGE["completion_tokens"]),
    })


def _parse(raw: bytes):
    try:
        return json.loads(raw)
    except ValueError:
        return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        judge_server: JudgeServer = self.server.judge  # type: ignore[attr-defined]
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        url = urlsplit(self.path)
        query = {name: values[0] for name, values in parse_qs(url.query).items()}
        headers = {name.lower(): value for name, value in self.headers.items()}
        judge_server.record(RecordedRequest("POST", url.path, query, headers, _parse(raw), raw))
        if not url.path.endswith("/chat/completions"):
            return self.send(404, _dumps({"error": {"message": "Not found.", "code": "not_found"}}))
        mode = judge_server.next_mode()
        if mode == "redirect":
            return self.send(302, b"", {"Location": "/elsewhere"})
        self.send(*judge_server.answer(mode))

    def send(self, status: int, body: bytes, headers: dict | None = None) -> None:
        try:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the client gave up (a timeout test)

    def log_message(self, *args) -> None:
        pass
