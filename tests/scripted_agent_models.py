"""Scripted streaming models on 127.0.0.1 for the real agent CLIs: an OpenAI Responses API server (Codex) and an
Anthropic Messages API server (Claude Code).

    with ResponsesModel(tool="monitor_create", arguments=lambda text: {...}) as model:
        codex config: base_url = model.base_url, wire_api = "responses"
        model.requests                 # every request body, recorded (its `tools` show the names the model sees)

Each answers a request that offers the named tool, and carries no result of it yet, with one call of that tool
(its arguments built from the request's text, so the prompt can carry the conversation id); a request that carries
the tool's result gets FINAL as a plain message; anything else (titles, quota checks) gets "ok". Answers stream
as SSE when the request asks for a stream, as the CLIs do.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

from tests.scripted_model import ModelServer

FINAL = "The Vigil monitor is armed."
#: the tool Claude Code loads deferred tools with
SEARCH = "ToolSearch"


class _ScriptedModel(ModelServer):
    #: the path (without query) the API answers on
    PATH = ""

    def __init__(self, tool: str, arguments: Callable[[str], dict]) -> None:
        super().__init__(_Handler)
        self.tool, self.arguments = tool, arguments
        self.calls: list[str] = []  # the tool names the model was made to call
        self.results: list[str] = []  # what the scripted tool's calls returned, as the model was shown it

    @property
    def base_url(self) -> str:
        return self.origin

    def offered(self, body: dict) -> str | None:
        """The name under which the request offers the scripted tool (each CLI prefixes it its own way)."""
        for name in _tool_names(body.get("tools") or []):
            if name == self.tool or name.endswith(f"__{self.tool}"):
                return name
        return None

    def events(self, body: dict, number: int) -> list[tuple[str, dict]]:
        raise NotImplementedError

    def whole(self, body: dict, number: int) -> dict:
        raise NotImplementedError


def _tool_names(tools: list) -> list[str]:
    """Tool names, including those inside a namespace entry ({"type": "namespace", "name", "tools": […]})."""
    names = []
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        if isinstance(tool.get("tools"), list):
            names += [f"{tool.get('name')}__{name}" for name in _tool_names(tool["tools"])]
        name = tool.get("name") or (tool.get("function") or {}).get("name")
        if name:
            names.append(name)
    return names


class ResponsesModel(_ScriptedModel):
    """OpenAI's Responses API (`POST /v1/responses`, stream: response.created, response.output_item.done,
    response.completed), as Codex's `wire_api = "responses"` provider calls it."""

    PATH = "/v1/responses"

    @property
    def base_url(self) -> str:
        return f"{super().base_url}/v1"

    def item(self, body: dict, number: int) -> dict:
        items = [i for i in body.get("input") or [] if isinstance(i, dict)]
        outputs = [i.get("output") for i in items
                   if i.get("type") in ("function_call_output", "custom_tool_call_output")]
        answered = bool(outputs)
        if answered:
            self.results.append(json.dumps(outputs[-1]) if not isinstance(outputs[-1], str) else outputs[-1])
        name = self.offered(body)
        if name and not answered:
            self.calls.append(name)
            namespace, _, short = name.rpartition("__") if name.startswith("mcp__") else ("", "", name)
            call = {"type": "function_call", "id": f"fc_{number}", "call_id": f"call_{number}", "name": short,
                    "arguments": json.dumps(self.arguments(json.dumps(items)))}
            return {**call, "namespace": namespace} if namespace else call
        text = FINAL if answered else "ok"
        return {"type": "message", "id": f"msg_{number}", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}

    def events(self, body: dict, number: int) -> list[tuple[str, dict]]:
        response = {"id": f"resp_{number}", "object": "response", "model": body.get("model"), "output": []}
        usage = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 10,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 110}
        item = self.item(body, number)
        return [("response.created", {"type": "response.created", "response": {**response, "status": "in_progress"}}),
                ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0,
                                               "item": item}),
                ("response.completed", {"type": "response.completed",
                                        "response": {**response, "status": "completed", "output": [item],
                                                     "usage": usage}})]

    def whole(self, body: dict, number: int) -> dict:
        return self.events(body, number)[-1][1]["response"]


class MessagesModel(_ScriptedModel):
    """Anthropic's Messages API (`POST /v1/messages`, stream: message_start, content_block_start/delta/stop,
    message_delta, message_stop), as Claude Code calls it with ANTHROPIC_BASE_URL."""

    PATH = "/v1/messages"

    def block(self, body: dict, number: int) -> dict:
        """The tool call, or the answer. Claude Code defers MCP tools: it names them in a system message and
        offers `ToolSearch`, which loads a tool's schema; the model calls that first, as a real one must."""
        messages = body.get("messages") or []
        called = {c["id"]: c["name"] for m in messages if m.get("role") == "assistant"
                  for c in _blocks(m) if c.get("type") == "tool_use"}
        answers = [(called.get(c.get("tool_use_id"), ""), c.get("content")) for m in messages
                   if m.get("role") == "user" for c in _blocks(m) if c.get("type") == "tool_result"]
        results = [name for name, _ in answers]
        mine = [content for name, content in answers if name == self.tool or name.endswith(f"__{self.tool}")]
        if mine:
            self.results.append(mine[-1] if isinstance(mine[-1], str) else json.dumps(mine[-1]))
            return {"type": "text", "text": FINAL}
        name = self.offered(body)
        loaded = name and (not self.deferred(body, name) or SEARCH in results)
        if loaded:
            self.calls.append(name)
            return {"type": "tool_use", "id": f"toolu_{number}", "name": name,
                    "input": self.arguments(json.dumps(messages))}
        deferred = re.search(rf"mcp__[A-Za-z0-9-]+?__{re.escape(self.tool)}(?!\w)", json.dumps(body))
        if deferred and SEARCH in _tool_names(body.get("tools") or []) and SEARCH not in results:
            self.calls.append(SEARCH)
            return {"type": "tool_use", "id": f"toolu_{number}", "name": SEARCH,
                    "input": {"query": f"select:{deferred.group(0)}"}}
        return {"type": "text", "text": "ok"}

    def deferred(self, body: dict, name: str) -> bool:
        """Whether the request lists the tool only by name (its schema not loaded yet)."""
        return all(t.get("defer_loading") for t in body.get("tools") or [] if t.get("name") == name)

    def events(self, body: dict, number: int) -> list[tuple[str, dict]]:
        block = self.block(body, number)
        message = {"id": f"msg_{number}", "type": "message", "role": "assistant", "model": body.get("model"),
                   "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": 100, "output_tokens": 1}}
        if block["type"] == "tool_use":
            start, delta = {**block, "input": {}}, {"type": "input_json_delta",
                                                    "partial_json": json.dumps(block["input"])}
        else:
            start, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
        stop = "tool_use" if block["type"] == "tool_use" else "end_turn"
        return [("message_start", {"type": "message_start", "message": message}),
                ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": start}),
                ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
                ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                   "usage": {"output_tokens": 10}}),
                ("message_stop", {"type": "message_stop"})]

    def whole(self, body: dict, number: int) -> dict:
        block = self.block(body, number)
        return {"id": f"msg_{number}", "type": "message", "role": "assistant", "model": body.get("model"),
                "content": [block], "stop_reason": "tool_use" if block["type"] == "tool_use" else "end_turn",
                "stop_sequence": None, "usage": {"input_tokens": 100, "output_tokens": 10}}


def _blocks(message: dict) -> list[dict]:
    content = message.get("content")
    return [c for c in content if isinstance(c, dict)] if isinstance(content, list) else []


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        model: _ScriptedModel = self.server.model  # type: ignore[attr-defined]
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = self.path.split("?", 1)[0].rstrip("/")
        if path.endswith("/count_tokens"):
            return self._json(200, {"input_tokens": 100})
        if path != model.PATH:
            return self._json(404, {"error": {"type": "not_found_error", "message": f"No route {path}."}})
        try:
            body = json.loads(raw)
            assert isinstance(body, dict)
        except (ValueError, AssertionError):
            return self._json(400, {"error": {"type": "invalid_request_error", "message": "Not a JSON object."}})
        number = model.record(body)
        if not body.get("stream"):
            return self._json(200, model.whole(body, number))
        data = b"".join(f"event: {name}\ndata: {json.dumps(event)}\n\n".encode()
                        for name, event in model.events(body, number))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._json(404, {"error": {"type": "not_found_error", "message": "Not found."}})

    def _json(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass
