"""Declared tools (engine/tools.py): what registration accepts and refuses, the arguments a watch may pass, which
tools may be watched, the fingerprint that ends a watch when its tool is edited, and one headless run against real
HTTP servers on 127.0.0.1 through the real Fetcher."""

from __future__ import annotations

import json
import re
import socket
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from engine.errors import ContentError, SpecError
from engine.http import FetchError, Fetcher, FetchPolicy
from engine.placeholders import values as placeholder_values
from engine.sources import tool as tool_source
from engine.sources.base import SourcePolicy
from engine.tools import (
    RUN_SECONDS, check_arguments, fingerprint, is_read_only, output_data, output_text, parse_tool, run_tool,
)
from tests.httpd import Handler, serve

NOW = datetime(2025, 3, 1, 12, 0, 0)
SECRET = "Bearer sk-test-SECRET"


def definition() -> dict:
    """A two-step tool as a runtime registers it: a GET with a credential, then a search API that takes POST."""
    return {
        "description": "Whether an order has shipped",
        "parameters": {"type": "object", "properties": {"order": {"type": "string"}, "limit": {"type": "integer"}},
                       "required": ["order"]},
        "steps": [
            {"kind": "http", "method": "GET", "url": "https://api.example.com/orders/{{args.order}}",
             "headers": {"Authorization": SECRET}, "query": {"fields": "status"}},
            {"kind": "http", "method": "POST", "url": "https://api.example.com/search",
             "body": {"q": "{{args.order}}"}, "read_only": True},
        ],
        "output": {"main": "steps[0].body.status == 'shipped'"},
    }


def edited(change) -> dict:
    raw = definition()
    change(raw)
    return raw


# --- the fingerprint: the executable surface, no more and no less ---------------------------------------------

def _set(path: list, value):
    def change(raw: dict) -> None:
        target = raw
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return change


SURFACE_EDITS = {
    "a parameter added": _set(["parameters", "properties", "extra"], {"type": "string"}),
    "a parameter's type": _set(["parameters", "properties", "limit"], {"type": "number"}),
    "the required list": _set(["parameters", "required"], ["order", "limit"]),
    "a step's method": _set(["steps", 0, "method"], "HEAD"),
    "a step's url": _set(["steps", 0, "url"], "https://api.example.com/v2/orders/{{args.order}}"),
    "a step's query": _set(["steps", 0, "query"], {"fields": "status,eta"}),
    "a step's body": _set(["steps", 1, "body"], {"q": "{{args.order}}", "exact": True}),
    "a step's read_only": _set(["steps", 1, "read_only"], False),
    "a header added": _set(["steps", 0, "headers"], {"Authorization": SECRET, "X-Tenant": "acme"}),
    "a header renamed": _set(["steps", 0, "headers"], {"X-Api-Key": SECRET}),
    "a step removed": lambda raw: raw["steps"].pop(),
    "a step added": lambda raw: raw["steps"].append({"kind": "http", "method": "GET",
                                                     "url": "https://api.example.com/health"}),
    "output.main": _set(["output", "main"], "steps[0].body.status == 'delivered'"),
}


@pytest.mark.parametrize("edit", SURFACE_EDITS.values(), ids=SURFACE_EDITS.keys())
def test_fingerprint_changes_with_each_part_of_the_executable_surface(edit):
    assert fingerprint(parse_tool("order_status", edited(edit))) != fingerprint(parse_tool("order_status",
                                                                                              definition()))


def test_fingerprint_changes_with_the_tools_name():
    assert fingerprint(parse_tool("order_status_v2", definition())) != fingerprint(parse_tool("order_status",
                                                                                               definition()))


COSMETIC_EDITS = {
    # seed 001: "Cosmetic edits (the description, hiding the tool) do not end the watch"
    "the description": _set(["description"], "Has my parcel left the warehouse?"),
    # a rotated credential is not an edit: header values are secrets, left out of the surface
    "a header value": _set(["steps", 0, "headers"], {"Authorization": "Bearer sk-test-ROTATED"}),
    "a header name's case": _set(["steps", 0, "headers"], {"authorization": SECRET}),
    # engine/tools.py leaves requires_approval out: the approval a watch was armed with is bound at create
    "requires_approval": _set(["requires_approval"], True),
    "the order of the parameters' keys": _set(["parameters"], {"required": ["order"], "properties": {
        "limit": {"type": "integer"}, "order": {"type": "string"}}, "type": "object"}),
}


@pytest.mark.parametrize("edit", COSMETIC_EDITS.values(), ids=COSMETIC_EDITS.keys())
def test_fingerprint_ignores_what_is_not_the_executable_surface(edit):
    assert fingerprint(parse_tool("order_status", edited(edit))) == fingerprint(parse_tool("order_status",
                                                                                              definition()))


def test_fingerprint_never_carries_a_header_value():
    print_ = fingerprint(parse_tool("order_status", definition()))
    assert re.fullmatch(r"[0-9a-f]{64}", print_) and "sk-test" not in print_


# --- what registration refuses, each with the sentence that says what to fix ---------------------------------

GET = {"kind": "http", "method": "GET", "url": "https://api.example.com/x"}


def minimal(**changes) -> dict:
    return {"steps": [GET], "output": {"main": "steps[0].body"}, **changes}


REFUSALS = [
    (minimal(steps=[GET] * 6), "steps must be a list of 1 to 5 HTTP steps (got 6)."),
    (minimal(steps=[]), "steps must be a list of 1 to 5 HTTP steps (got 0)."),
    (minimal(steps=None), "steps must be a list of 1 to 5 HTTP steps"),
    (minimal(steps=[{**GET, "method": "FETCH"}]),
     "steps[0].method must be one of GET, HEAD, POST, PUT, PATCH, DELETE."),
    (minimal(steps=[{**GET, "body": {"q": 1}}]), "steps[0] is a GET, which takes no body."),
    (minimal(steps=[{**GET, "method": "HEAD", "body": "x"}]), "steps[0] is a HEAD, which takes no body."),
    (minimal(steps=[GET, {**GET, "url": "https://api.example.com/{{args.order}}"}]),
     "steps[1] uses {{args.order}}, which parameters don't declare."),
    (minimal(steps=[{**GET, "query": {"q": "{{args.term}}"}}]), "steps[0] uses {{args.term}}, which parameters don't"),
    (minimal(steps=[{**GET, "headers": {"X-Key": "{{args.key}}"}}]), "steps[0] uses {{args.key}}"),
    (minimal(steps=[{**GET, "method": "POST", "read_only": True, "body": {"a": ["{{args.q}}"]}}]),
     "steps[0] uses {{args.q}}"),
    (minimal(parameters={"type": "object", "properties": {"ids": {"type": "array"}}}),
     "parameters.properties.ids must declare a scalar type (string, number, integer, boolean); a watched tool "
     "takes scalar arguments only."),
    (minimal(parameters={"type": "object", "properties": {"filter": {"type": "object"}}}),
     "parameters.properties.filter must declare a scalar type"),
    (minimal(parameters={"type": "object", "properties": {"x": {}}}), "parameters.properties.x must declare a scalar"),
    (minimal(parameters={"type": "object", "properties": {}, "required": ["x"]}),
     "parameters.required must list names from parameters.properties."),
    (minimal(output={"main": "steps[0].body +"}), "output.main is not valid CEL: at column 16: Syntax error"),
    (minimal(output={"main": "steps[0]..body"}), "output.main is not valid CEL: at column 10:"),
    (minimal(output={"main": "x", "extra": "y"}), 'output must be {"main": "<CEL over args and steps>"}.'),
    (minimal(output={"main": "  "}), "output.main must be a CEL expression over args and steps"),
    (minimal(colour="red"), "Unknown field 'colour'; a tool takes description, output, parameters, requires_approval, "
                            "steps."),
    (minimal(steps=[{**GET, "timeout": 5}]), "steps[0] has an unknown field 'timeout'; a step takes body, headers, "
                                            "kind, method, query, read_only, url."),
    (minimal(steps=[{**GET, "kind": "shell"}]), "steps[0] must be an HTTP step"),
    (minimal(steps=[{**GET, "url": "file:///etc/passwd"}]),
     "steps[0].url can't be called: The url must start with http:// or https:// (got 'file')."),
    (minimal(steps=[{**GET, "url": "https://user:pw@api.example.com/"}]), "steps[0].url can't be called: The url must "
                                                                          "not contain a user name or password"),
    (minimal(steps=[{**GET, "url": ""}]), "steps[0].url is required"),
    (minimal(steps=[{**GET, "headers": {"X-Key": ["a"]}}]), "steps[0].headers must be an object of text values."),
    (minimal(steps=[{**GET, "read_only": "yes"}]), "steps[0].read_only must be true or false."),
    (minimal(requires_approval="yes"), "requires_approval must be true or false."),
    (minimal(description="x" * 2001), "description must be text of at most 2000 characters."),
    (["not", "an", "object"], "The body must be a JSON object"),
]


@pytest.mark.parametrize("raw, sentence", REFUSALS, ids=[s[:40] for _, s in REFUSALS])
def test_parse_tool_refuses_saying_what_to_fix(raw, sentence):
    with pytest.raises(SpecError) as refused:
        parse_tool("check_order", raw)
    assert sentence in str(refused.value)


def test_parse_tool_refuses_a_bad_name():
    with pytest.raises(SpecError, match="The tool's name must be 1–64 letters, digits"):
        parse_tool("check order!", minimal())


def test_parse_tool_accepts_declared_args_and_placeholders_everywhere():
    tool = parse_tool("search", {
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        "steps": [{"method": "post", "url": "https://api.example.com/s/{{args.q}}?since={{last_checked_at}}",
                   "headers": {"X-Q": "{{args.q}}"}, "query": {"q": "{{ args.q }}"},
                   "body": {"q": "{{args.q}}", "at": "{{now}}"}, "read_only": True}],
        "output": {"main": "steps[0].body"}})
    assert tool.steps[0].method == "POST" and tool.output_main == "steps[0].body" and not tool.requires_approval


def test_parse_tool_without_output_is_registered_but_has_no_main():
    """A tool may be registered without output.main (an LLM tool); only watching it is refused (models/tools.py)."""
    assert parse_tool("plain", {"steps": [GET]}).output_main == ""


# --- the arguments of a watch -----------------------------------------------------------------------------------

TYPED = parse_tool("typed", minimal(parameters={"type": "object", "required": ["order"], "properties": {
    "order": {"type": "string"}, "limit": {"type": "integer"}, "ratio": {"type": "number"},
    "open": {"type": "boolean"}}}))


@pytest.mark.parametrize("arguments, sentence", [
    ({"order": "A-1", "colour": "red"},
     "The tool 'typed' has no parameter 'colour'; its parameters are limit, open, order, ratio."),
    ({"order": 7}, "Argument 'order' must be string (got 7)."),
    ({"order": "A-1", "limit": "3"}, "Argument 'limit' must be integer (got '3')."),
    ({"order": "A-1", "limit": True}, "Argument 'limit' must be integer (got True)."),
    ({"order": "A-1", "limit": 2.5}, "Argument 'limit' must be integer (got 2.5)."),
    ({"order": "A-1", "ratio": False}, "Argument 'ratio' must be number (got False)."),
    ({"order": "A-1", "open": 1}, "Argument 'open' must be boolean (got 1)."),
    ({"order": ["A-1"]}, "Argument 'order' must be a scalar (text, number or true/false), not list."),
    ({"order": {"id": "A-1"}}, "Argument 'order' must be a scalar (text, number or true/false), not dict."),
    ({"order": None}, "Argument 'order' must be a scalar (text, number or true/false), not null."),
    ({}, "The tool 'typed' needs the argument 'order'."),
    (["A-1"], "source.arguments must be an object of the tool's arguments."),
])
def test_check_arguments_refuses_saying_which_and_why(arguments, sentence):
    with pytest.raises(SpecError) as refused:
        check_arguments(TYPED, arguments)
    assert str(refused.value) == sentence


def test_check_arguments_accepts_each_declared_type():
    arguments = {"order": "A-1", "limit": 3, "ratio": 1, "open": False}
    assert check_arguments(TYPED, arguments) == arguments
    assert check_arguments(TYPED, {"order": "A-1", "ratio": 0.5}) == {"order": "A-1", "ratio": 0.5}


def test_check_arguments_of_a_tool_without_parameters():
    plain = parse_tool("plain", minimal())
    assert check_arguments(plain, None) == {}
    with pytest.raises(SpecError, match="its parameters are none"):
        check_arguments(plain, {"x": 1})


# --- which tools may be watched -----------------------------------------------------------------------------------

def steps_of(*methods, read_only=False) -> dict:
    return minimal(steps=[{"method": m, "url": "https://api.example.com/x",
                           **({"read_only": True} if read_only and m not in ("GET", "HEAD") else {})}
                          for m in methods])


@pytest.mark.parametrize("raw, expected", [
    (steps_of("GET"), True),
    (steps_of("HEAD", "GET"), True),
    (steps_of("POST", read_only=True), True),
    (steps_of("GET", "POST"), False),
    (steps_of("POST"), False),
    (steps_of("PUT"), False),
    (steps_of("DELETE"), False),
], ids=["get", "head-get", "post-marked", "get-then-unmarked-post", "post", "put", "delete"])
def test_is_read_only_every_step_reads(raw, expected):
    assert is_read_only(parse_tool("t", raw)) is expected


# --- one headless run, against real servers -----------------------------------------------------------------------

class Api:
    """A JSON API on 127.0.0.1 for any method: answers what a test sets per path, and records every request."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[int, bytes]] = {}
        self.seen: list[dict] = []
        api = self

        class Handle(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                api.seen.append({"method": self.command, "path": parts.path, "raw_path": self.path,
                                 "query": parse_qs(parts.query), "headers": dict(self.headers), "body": body})
                status, payload = api.routes.get(parts.path, (404, b'{"error": "no such thing"}'))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_HEAD = _answer

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handle)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        self.base = f"http://127.0.0.1:{self._server.server_address[1]}"

    def set(self, path: str, body: object, status: int = 200) -> None:
        self.routes[path] = (status, json.dumps(body).encode())

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture()
def api():
    server = Api()
    yield server
    server.stop()


@pytest.fixture()
def fetcher():
    client = Fetcher(FetchPolicy(allow_loopback=True, timeout=5))
    yield client
    client.close()


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on: connecting to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def order_tool(base: str, main: str = "{'shipped': steps[0].body.status == 'shipped', 'order': args.order, "
                                      "'hits': steps[1].body.hits}", **changes):
    return parse_tool("order_status", {
        "parameters": {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]},
        "steps": [{"method": "GET", "url": base + "/orders/{{args.order}}", "headers": {"Authorization": SECRET},
                   "query": {"fields": "status"}},
                  {"method": "POST", "url": base + "/search", "body": {"q": "{{args.order}}"}, "read_only": True}],
        "output": {"main": main}, **changes})


def run(tool, arguments, fetcher, **kw) -> dict:
    return json.loads(run_tool(tool, arguments, fetcher, placeholder_values(NOW), **kw))


def test_run_tool_two_steps_then_output_main_over_the_first_body_and_args(api, fetcher):
    api.set("/orders/A-1", {"status": "shipped", "eta": "2025-03-02"})
    api.set("/search", {"hits": 2})
    result = run(order_tool(api.base), {"order": "A-1"}, fetcher)
    assert result == {"output": {"shipped": True, "order": "A-1", "hits": 2},
                      "steps": [{"ok": True, "status": 200, "error": None}, {"ok": True, "status": 200, "error": None}]}
    first, second = api.seen
    assert (first["method"], first["path"], first["query"]) == ("GET", "/orders/A-1", {"fields": ["status"]})
    assert first["headers"]["Authorization"] == SECRET, "the step's credential is sent"
    assert (second["method"], json.loads(second["body"])) == ("POST", {"q": "A-1"})


def test_run_tool_a_404_step_is_completed_data_and_the_run_returns(api, fetcher):
    api.set("/search", {"hits": 0})  # /orders/… is not set: 404
    result = run(order_tool(api.base, main="{'first': steps[0].status, 'hits': steps[1].body.hits}"),
                 {"order": "A-1"}, fetcher)
    assert result["steps"][0] == {"ok": False, "status": 404, "error": None}
    assert result["steps"][1] == {"ok": True, "status": 200, "error": None}
    assert result["output"] == {"first": 404, "hits": 0}
    assert len(api.seen) == 2, "a 4xx step does not end the chain"


def test_run_tool_a_5xx_step_is_data_too(api, fetcher):
    api.set("/orders/A-1", {"error": "down"}, status=503)
    api.set("/search", {"hits": 1})
    result = run(order_tool(api.base, main="steps[0].status"), {"order": "A-1"}, fetcher)
    assert result == {"output": 503, "steps": [{"ok": False, "status": 503, "error": None},
                                               {"ok": True, "status": 200, "error": None}]}


def test_run_tool_steps_expose_only_ok_status_and_error(api, fetcher):
    api.set("/orders/A-1", {"status": "shipped", "private": "PAYLOAD-not-for-the-condition"})
    api.set("/search", {"hits": 1, "private": "PAYLOAD-2"})
    body = run_tool(order_tool(api.base, main="steps[0].body.status"), {"order": "A-1"}, fetcher,
                    placeholder_values(NOW))
    assert b"PAYLOAD" not in body, "only what output.main projects leaves the run"
    result = json.loads(body)
    assert [set(step) for step in result["steps"]] == [{"ok", "status", "error"}] * 2
    content = tool_source.normalize(tool_source.parse({"type": "tool", "tool": "order_status"}, SourcePolicy()),
                                    body, 1000)
    assert set(content.variables) == {"output", "outputText", "steps"}
    assert content.variables["steps"] == result["steps"] and content.variables["output"] == "shipped"


def test_run_tool_connection_refused_on_the_first_step_is_a_fetch_error(fetcher):
    tool = order_tool(f"http://127.0.0.1:{closed_port()}")
    with pytest.raises(FetchError) as failed:
        run(tool, {"order": "A-1"}, fetcher)
    assert failed.value.message.startswith("No step of the tool 'order_status' could run: ")
    assert not failed.value.unreachable, "a tool that can't run counts as a strike, not a skipped check"


def test_run_tool_a_later_step_that_cannot_run_leaves_the_earlier_data(api, fetcher):
    """seed 001: one completed step means the poll parks as not-met, so steps[i].ok can watch the later one."""
    api.set("/orders/A-1", {"status": "packing"})
    tool = parse_tool("two_hosts", {
        "steps": [{"url": api.base + "/orders/A-1"}, {"url": f"http://127.0.0.1:{closed_port()}/x"},
                  {"url": api.base + "/never"}],
        "output": {"main": "steps[0].body.status"}})
    result = run(tool, {}, fetcher)
    assert result["output"] == "packing"
    assert result["steps"][0] == {"ok": True, "status": 200, "error": None}
    assert result["steps"][1]["ok"] is False and result["steps"][1]["status"] is None and result["steps"][1]["error"]
    assert result["steps"][2] == {"ok": False, "status": None, "error": "not run: an earlier step could not run"}
    assert [seen["path"] for seen in api.seen] == ["/orders/A-1"], "the chain ends at the step that could not run"


def test_run_tool_output_main_that_fails_is_a_content_error(api, fetcher):
    api.set("/orders/A-1", {"status": "shipped"})
    api.set("/search", {"hits": 1})
    with pytest.raises(ContentError, match="the tool's output.main could not be evaluated"):
        run(order_tool(api.base, main="steps[0].body.tracking.carrier"), {"order": "A-1"}, fetcher)


def test_run_tool_private_addresses_are_refused_when_it_runs(fetcher):
    """Registration checks a url's form only (engine/http.check_url); the address is decided by the Fetcher."""
    tool = parse_tool("metadata", {"steps": [{"url": "http://169.254.169.254/latest/meta-data/"}],
                                   "output": {"main": "steps[0].body"}})
    with pytest.raises(FetchError, match="the cloud metadata address"):
        run(tool, {}, fetcher)
    private = parse_tool("lan", {"steps": [{"url": "http://10.0.0.1/admin"}], "output": {"main": "steps[0].body"}})
    with pytest.raises(FetchError, match="a private address"):
        run(private, {}, fetcher)


def test_run_tool_fills_args_encoded_in_the_url_and_plain_in_query_and_json_body(api, fetcher):
    api.set("/search", {"hits": 3})
    order = 'a b/c&d?"x"'
    tool = parse_tool("fill", {
        "parameters": {"type": "object", "properties": {"order": {"type": "string"}, "n": {"type": "integer"}}},
        "steps": [{"url": api.base + "/orders/{{args.order}}", "query": {"q": "{{args.order}}", "n": "{{args.n}}",
                                                                          "since": "{{last_checked_at}}"}},
                  {"method": "POST", "read_only": True, "url": api.base + "/search",
                   "body": {"q": "{{args.order}}", "nested": ["{{args.n}}"], "kept": 7}}],
        "output": {"main": "steps[1].body.hits"}})
    result = run(tool, {"order": order, "n": 3}, fetcher)
    assert result["output"] == 3
    first, second = api.seen
    assert first["raw_path"].split("?")[0] == "/orders/a%20b%2Fc%26d%3F%22x%22", "one path segment, percent-encoded"
    assert first["query"] == {"q": [order], "n": ["3"], "since": ["2025-03-01T12:00:00Z"]}
    assert json.loads(second["body"]) == {"q": order, "nested": ["3"], "kept": 7}, "the JSON stays JSON"


def test_run_tool_fills_placeholders_inside_string_arguments(api, fetcher):
    """seed 000: string arguments may hold {{now}}, {{last_checked_at}}, {{last_changed_at}} and
    {{last_checked_date}}, filled in on every check (the approval covers the placeholder, not its value)."""
    api.set("/search", {"hits": 1})
    tool = parse_tool("mail", {"parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
                               "steps": [{"url": api.base + "/search", "query": {"q": "{{args.q}}"}}],
                               "output": {"main": "steps[0].body.hits"}})
    run(tool, {"q": "from:bank after:{{last_checked_date}}"}, fetcher)
    assert api.seen[0]["query"] == {"q": ["from:bank after:2025/03/01"]}


def test_run_tool_an_argument_cannot_inject_a_header(api, fetcher):
    tool = parse_tool("hdr", {"parameters": {"type": "object", "properties": {"o": {"type": "string"}}},
                              "steps": [{"url": api.base + "/x", "headers": {"X-Order": "{{args.o}}"}}],
                              "output": {"main": "steps[0].status"}})
    with pytest.raises(FetchError):
        run(tool, {"o": "A-1\r\nX-Evil: 1"}, fetcher)
    assert all("X-Evil" not in seen["headers"] for seen in api.seen)


class Redirects(Handler):
    """GET /to/<n> answers 302 to the address a test set as `targets[n]`; GET /capture/<x> records its headers."""

    targets: list = []
    captured: list = []

    def route_to(self, n: str) -> None:
        self.send(302, b"", (("Location", self.targets[int(n)]),))

    def route_capture(self, _: str) -> None:
        self.captured.append(dict(self.headers))
        self.send(200, b'{"ok": true}', (("Content-Type", "application/json"),))


def test_run_tool_keeps_a_steps_headers_on_a_same_origin_redirect(fetcher):
    handler = type("SameOrigin", (Redirects,), {"targets": [], "captured": []})
    with serve(handler) as base:
        handler.targets.append(base + "/capture/here")
        tool = parse_tool("moved", {"steps": [{"url": base + "/to/0", "headers": {"X-Api-Key": "sk-test-SECRET"}}],
                                    "output": {"main": "steps[0].body.ok"}})
        assert run(tool, {}, fetcher)["output"] is True
    assert handler.captured[0]["X-Api-Key"] == "sk-test-SECRET"


def test_run_tool_never_forwards_a_steps_header_values_to_another_origin_on_a_redirect(fetcher):
    """Every header value of a tool is a secret (stored encrypted, answered masked), whatever its name: a redirect
    to another origin must not carry any of them there."""
    other = type("Elsewhere", (Redirects,), {"targets": [], "captured": []})
    with serve(other) as elsewhere:
        origin = type("Origin", (Redirects,), {"targets": [elsewhere + "/capture/there"], "captured": []})
        with serve(origin) as base:
            tool = parse_tool("moved", {"steps": [{"url": base + "/to/0", "headers": {
                "X-Api-Key": "sk-test-SECRET", "Authorization": SECRET}}], "output": {"main": "steps[0].status"}})
            run(tool, {}, fetcher)
    sent = json.dumps(other.captured)
    assert "sk-test" not in sent, f"a tool's secret header reached another origin: {sent}"


# --- the whole call's budget (seed 001: 25 s per poll), on a clock of the test's own -------------------------------

class FakeClock:
    """time.monotonic as the test scripts it: each call returns the next reading (the last one repeats)."""

    def __init__(self, *readings: float) -> None:
        self.readings = list(readings)

    def __call__(self) -> float:
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]


class Spy:
    """The real Fetcher, remembering the timeout each step was given."""

    def __init__(self, fetcher: Fetcher) -> None:
        self.fetcher, self.timeouts = fetcher, []

    def call(self, method, url, headers=None, body=None, timeout=None):
        self.timeouts.append(timeout)
        return self.fetcher.call(method, url, headers, body, timeout=timeout)


def test_run_tool_budget_is_25_seconds_for_the_whole_call(api, fetcher):
    assert RUN_SECONDS == 25
    api.set("/orders/A-1", {"status": "shipped"})
    api.set("/search", {"hits": 1})
    # started at 0; the first step starts at 1; the second would start at 26, past the budget
    with pytest.raises(FetchError, match=r"took longer than 25 s, the most a watched tool may take for one poll"):
        run(order_tool(api.base), {"order": "A-1"}, fetcher, clock=FakeClock(0, 1, 26))
    assert [seen["path"] for seen in api.seen] == ["/orders/A-1"], "no step starts once the budget is spent"


def test_run_tool_each_step_gets_only_what_is_left_of_the_budget(api, fetcher):
    api.set("/orders/A-1", {"status": "shipped"})
    api.set("/search", {"hits": 1})
    spy = Spy(fetcher)
    result = run(order_tool(api.base), {"order": "A-1"}, spy, clock=FakeClock(100, 100, 120, 120))
    assert result["output"]["shipped"] is True
    assert spy.timeouts == [25, 5]


def test_run_tool_a_step_failing_after_the_budget_ran_out_is_an_overrun(fetcher):
    """A step that timed out on the budget is reported as the tool overrunning, not as a step that could not run."""
    tool = order_tool(f"http://127.0.0.1:{closed_port()}")
    with pytest.raises(FetchError, match=r"took longer than 10 s") as failed:
        run(tool, {"order": "A-1"}, fetcher, seconds=10, clock=FakeClock(0, 0, 10))
    assert not failed.value.unreachable


def test_run_tool_within_a_custom_budget_runs_every_step(api, fetcher):
    api.set("/orders/A-1", {"status": "shipped"})
    api.set("/search", {"hits": 1})
    result = run(order_tool(api.base), {"order": "A-1"}, fetcher, seconds=10, clock=FakeClock(0, 4, 9.5, 9.9))
    assert len(result["steps"]) == 2 and all(step["ok"] for step in result["steps"])


# --- output, outputText and data as the condition reads them --------------------------------------------------------

def test_output_text_and_data():
    assert output_text({"b": 1, "a": "é"}) == '{"a": "é", "b": 1}'
    assert output_text("shipped") == "shipped" and output_text(None) == "" and output_text(12) == "12"
    assert output_data({"reached": True}) == {"reached": True} and output_data([1]) == [1]
    assert output_data('{"reached": true}') == {"reached": True}, "a JSON object in a string is parsed"
    assert output_data("shipped") is None and output_data('"x"') is None and output_data("{broken") is None
    assert output_data(12) is None and output_data(None) is None


def test_normalize_data_is_parsed_from_the_whole_output_when_the_text_is_cut():
    output = {"reached": True, "filler": "x" * 500}
    body = json.dumps({"output": output, "steps": [{"ok": True, "status": 200, "error": None}]}).encode()
    content = tool_source.normalize(tool_source.parse({"type": "tool", "tool": "t"}, SourcePolicy()), body, 50)
    assert len(content.text) == 50 and content.data == output and content.is_json
    assert content.variables["outputText"] == output_text(output)


def test_tool_source_parse_refuses_bad_fields():
    policy = SourcePolicy()
    with pytest.raises(SpecError, match="source.tool must be 1–64"):
        tool_source.parse({"type": "tool", "tool": ""}, policy)
    with pytest.raises(SpecError, match="source.arguments must be an object"):
        tool_source.parse({"type": "tool", "tool": "t", "arguments": [1]}, policy)
    with pytest.raises(SpecError, match="source.agent_id must be"):
        tool_source.parse({"type": "tool", "tool": "t", "agent_id": " "}, policy)
    spec = tool_source.parse({"type": "tool", "tool": "t", "arguments": {"a": 1}, "agent_id": "agent-7"}, policy)
    assert (spec.tool, spec.arguments, spec.agent_id) == ("t", {"a": 1}, "agent-7")



# --- a watch's poll: unchanged answers skip output.main ---------------------------------------------------------

def test_poll_tool_with_the_same_answers_returns_no_body_and_evaluates_nothing(api, fetcher):
    from engine.tools import poll_tool

    api.set("/orders/A-1", {"status": "packed"})
    api.set("/search", {"hits": 1})
    tool = order_tool(api.base)
    digest, body = poll_tool(tool, {"order": "A-1"}, fetcher, placeholder_values(NOW), None)
    assert json.loads(body)["output"]["shipped"] is False
    again, nothing = poll_tool(tool, {"order": "A-1"}, fetcher, placeholder_values(NOW), digest)
    assert again == digest and nothing is None and len(api.seen) == 4, "the steps ran; output.main did not"
    api.set("/orders/A-1", {"status": "shipped"})
    changed, body = poll_tool(tool, {"order": "A-1"}, fetcher, placeholder_values(NOW), digest)
    assert changed != digest and json.loads(body)["output"]["shipped"] is True
    api.set("/orders/B-2", {"status": "shipped"})  # the same answers as A-1's
    other, body = poll_tool(tool, {"order": "B-2"}, fetcher, placeholder_values(NOW), changed)
    assert other != changed and body is not None, "other arguments are another call"


def test_poll_tool_counts_the_headers_only_when_output_main_reads_them(api, fetcher):
    from engine.tools import answers_digest, StepResult

    plain = order_tool(api.base)
    reading = order_tool(api.base, main="steps[0].headers['date']")
    one = [StepResult(True, 200, None, {"status": "packed"}, {"date": "Mon"})]
    two = [StepResult(True, 200, None, {"status": "packed"}, {"date": "Tue"})]
    assert answers_digest(plain, {}, one) == answers_digest(plain, {}, two)
    assert answers_digest(reading, {}, one) != answers_digest(reading, {}, two)
