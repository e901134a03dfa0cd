"""A scripted OpenAI-compatible chat model on 127.0.0.1, for driving an agent runtime through a whole conversation.

    with ScriptedModel(page_url="http://127.0.0.1:…/acmeb") as model:   # or .start() … .stop()
        runtime env: OPENAI_BASE_URL=model.base_url
        model.count                    # chat completions answered so far (thread-safe)
        model.requests[-1]["messages"] # every request body, recorded

The answer depends only on the last message of the request:

- the user's "tell me when the price drops below 90" → a `monitor` tool call creating a page watch of `page_url`
  (`#price`, threshold below 90, checked every `interval`);
- a `tool` result of a `monitor` call → "I'll tell you when it drops below 90.";
- a `tool` result of a `vigil_wake` call → "ACMEB dropped to $<price>.", the price read from the wake's fenced
  content (the first number between `<<<` and `>>>`);
- anything else → "ok".

Answers have the chat.completions shape: `choices[0].message`, `finish_reason` and `usage`.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ASK = "tell me when the price drops below 90"
ARMED = "I'll tell you when it drops below 90."
USAGE = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
_FENCED = re.compile(r"<<<(.*?)>>>", re.S)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


class ModelServer:
    """A model API on 127.0.0.1 (port 0) served by `handler` (which finds this object as `self.server.model`),
    recording every request body; a context manager, or .start() … .stop()."""

    def __init__(self, handler) -> None:
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._server.model = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.requests)

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def record(self, body: dict) -> int:
        with self._lock:
            self.requests.append(body)
            return len(self.requests)


class ScriptedModel(ModelServer):
    def __init__(self, page_url: str = "", interval: str = "1s") -> None:
        super().__init__(_Handler)
        self.page_url = page_url
        self.interval = interval

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"

    def answer(self, body: dict, number: int) -> dict:
        """The assistant message for one request."""
        messages = body.get("messages") or []
        last = messages[-1] if messages else {}
        if last.get("role") == "user" and ASK in str(last.get("content", "")).lower():
            return {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{number}", "type": "function",
                "function": {"name": "monitor", "arguments": json.dumps(self.create_arguments())}}]}
        if last.get("role") == "tool":
            called = _called(messages, last.get("tool_call_id"))
            if called == "monitor":
                return _text(ARMED)
            if called == "vigil_wake":
                return _text(f"ACMEB dropped to ${_price(last.get('content', ''))}.")
        return _text("ok")

    def create_arguments(self) -> dict:
        return {"action": "monitor_create", "arguments": {
            "description": "ACMEB below $90",
            "source": {"type": "page", "url": self.page_url, "selector": "#price"},
            "check": {"type": "threshold", "op": "below", "value": 90},
            "interval": self.interval}}


def _text(content: str) -> dict:
    return {"role": "assistant", "content": content}


def _called(messages: list[dict], call_id) -> str | None:
    """The name of the function whose call `call_id` answers."""
    for message in reversed(messages):
        for call in message.get("tool_calls") or []:
            if call.get("id") == call_id:
                return call.get("function", {}).get("name")
    return None


def _price(content: str) -> str:
    """The first number inside the wake's fence (what the page showed), else the last number anywhere."""
    try:
        wake = json.loads(content).get("wake", "")
    except (ValueError, AttributeError):
        wake = content
    fenced = _FENCED.search(wake)
    numbers = _NUMBER.findall(fenced.group(1)) if fenced else []
    if numbers:
        return numbers[0]
    anywhere = _NUMBER.findall(wake)
    return anywhere[-1] if anywhere else "?"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        model: ScriptedModel = self.server.model  # type: ignore[attr-defined]
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not self.path.rstrip("/").endswith("/chat/completions"):
            return self._send(404, {"error": {"message": "Not found.", "code": "not_found"}})
        try:
            body = json.loads(raw)
            assert isinstance(body, dict)
        except (ValueError, AssertionError):
            return self._send(400, {"error": {"message": "The body must be a JSON object.", "code": None}})
        number = model.record(body)
        message = model.answer(body, number)
        self._send(200, {
            "id": f"chatcmpl-{number}", "object": "chat.completion", "created": 0, "model": body.get("model"),
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
            "usage": USAGE})

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass

    def log_message(self, *args) -> None:
        pass
