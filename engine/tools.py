"""Declared HTTP tools (an agent's own read-only tools, registered by its runtime) and one headless run of them.

A tool is 1–5 HTTP steps with `{{args.x}}` (and the source placeholders, {{now}}…) in their url, query, headers
and body, and `output.main`, a CEL expression over `args` and `steps` (each {status, body, headers}, body parsed
when it is JSON). A watch re-runs it with no model: what comes back is the output and, per step, only
{ok, status, error} (seed 001: per-step payloads are not exposed to the condition).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlencode, urlsplit, urlunsplit

from engine import placeholders
from engine.addresses import check_url
from engine.checks import cel
from engine.content import excerpt
from engine.errors import BlockedURL, ContentError, FetchError, SpecError
from engine.http import Fetcher

MAX_STEPS = 5
#: the whole call, every step included, when a watch re-runs it (seed 001)
RUN_SECONDS = 25.0
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
READ_METHODS = ("GET", "HEAD")
SCALARS = ("string", "number", "integer", "boolean")
STEP_FIELDS = frozenset({"kind", "method", "url", "headers", "query", "body", "read_only"})
TOOL_FIELDS = frozenset({"description", "parameters", "steps", "output", "requires_approval"})
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}")
_ARG = re.compile(r"\{\{\s*args\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
MAX_DESCRIPTION = 2000
MAX_STEP_BODY_CHARS = 256 * 1024


@dataclass(frozen=True)
class Step:
    method: str
    url: str
    headers: dict  # name -> value (templates); values are secrets
    query: dict
    body: object
    read_only: bool


@dataclass(frozen=True)
class ToolDef:
    name: str
    description: str
    parameters: dict
    steps: tuple[Step, ...]
    output_main: str
    requires_approval: bool


def check_name(name: object, what: str = "The tool's name") -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise SpecError(f"{what} must be 1–64 letters, digits, _ . - (got {str(name)[:40]!r}).")
    return name


def parse_tool(name: str, raw: object) -> ToolDef:
    """A tool as its runtime registers it (PUT /api/agents/{agent}/tools/{name}); raises SpecError."""
    check_name(name)
    if not isinstance(raw, dict):
        raise SpecError("The body must be a JSON object with description, parameters, steps and output.")
    unknown = sorted(set(raw) - TOOL_FIELDS)
    if unknown:
        raise SpecError(f"Unknown field '{unknown[0]}'; a tool takes {', '.join(sorted(TOOL_FIELDS))}.")
    description = raw.get("description", "")
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
        raise SpecError(f"description must be text of at most {MAX_DESCRIPTION} characters.")
    parameters = _parameters(raw.get("parameters", {"type": "object", "properties": {}}))
    steps = raw.get("steps")
    if not isinstance(steps, list) or not 1 <= len(steps) <= MAX_STEPS:
        raise SpecError(f"steps must be a list of 1 to {MAX_STEPS} HTTP steps (got "
                        f"{len(steps) if isinstance(steps, list) else type(steps).__name__}).")
    parsed = tuple(_step(i, step, parameters) for i, step in enumerate(steps))
    output = raw.get("output")
    main = output.get("main") if isinstance(output, dict) else None
    if output is not None and (not isinstance(output, dict) or set(output) - {"main"}):
        raise SpecError('output must be {"main": "<CEL over args and steps>"}.')
    if main is not None:
        if not isinstance(main, str) or not main.strip():
            raise SpecError("output.main must be a CEL expression over args and steps, e.g. steps[0].body.")
        try:
            cel.cel.compile(main)
        except Exception as exc:
            raise SpecError(f"output.main is not valid CEL: {cel.syntax_message(str(exc))}.") from None
    approval = raw.get("requires_approval", False)
    if not isinstance(approval, bool):
        raise SpecError("requires_approval must be true or false.")
    return ToolDef(name, description, parameters, parsed, main or "", approval)


def _parameters(raw: object) -> dict:
    if not isinstance(raw, dict) or raw.get("type", "object") != "object":
        raise SpecError('parameters must be a JSON Schema object: {"type": "object", "properties": {…}}.')
    properties = raw.get("properties", {})
    if not isinstance(properties, dict):
        raise SpecError("parameters.properties must be an object of the tool's arguments.")
    for key, prop in properties.items():
        check_name(key, f"The parameter name {key!r}")
        if not isinstance(prop, dict) or prop.get("type") not in SCALARS:
            raise SpecError(f"parameters.properties.{key} must declare a scalar type ({', '.join(SCALARS)}); "
                            "a watched tool takes scalar arguments only.")
    required = raw.get("required", [])
    if not isinstance(required, list) or any(name not in properties for name in required):
        raise SpecError("parameters.required must list names from parameters.properties.")
    return {"type": "object", "properties": properties, "required": required}


def _step(index: int, raw: object, parameters: dict) -> Step:
    where = f"steps[{index}]"
    if not isinstance(raw, dict) or raw.get("kind", "http") != "http":
        raise SpecError(f'{where} must be an HTTP step: {{"kind": "http", "method": "GET", "url": "https://…"}}.')
    unknown = sorted(set(raw) - STEP_FIELDS)
    if unknown:
        raise SpecError(f"{where} has an unknown field '{unknown[0]}'; a step takes {', '.join(sorted(STEP_FIELDS))}.")
    method = str(raw.get("method", "GET")).upper()
    if method not in METHODS:
        raise SpecError(f"{where}.method must be one of {', '.join(METHODS)}.")
    url = raw.get("url")
    if not isinstance(url, str) or not url.strip():
        raise SpecError(f"{where}.url is required: the http(s) address the step calls.")
    try:
        check_url(_fill(url.strip(), _sample_args(parameters), encode=True))
    except BlockedURL as exc:
        raise SpecError(f"{where}.url can't be called: {exc.message}") from None
    headers, query = raw.get("headers", {}), raw.get("query", {})
    for name, mapping in (("headers", headers), ("query", query)):
        if not isinstance(mapping, dict) or not all(isinstance(k, str) and isinstance(v, (str, int, float, bool))
                                                    for k, v in mapping.items()):
            raise SpecError(f"{where}.{name} must be an object of text values.")
    for key, value in headers.items():  # the value is a secret: the refusal names the header, never quotes it
        if not _HEADER_NAME.fullmatch(key):
            raise SpecError(f"{where}.headers has a name that is not a valid header name: {key[:40]!r}.")
        if not str(value).isprintable():
            raise SpecError(f"{where}.headers.{key} holds a line break or another control character; send the "
                            "value on one line.")
    read_only = raw.get("read_only", False)
    if not isinstance(read_only, bool):
        raise SpecError(f"{where}.read_only must be true or false.")
    body = raw.get("body")
    if body is not None and method in READ_METHODS:
        raise SpecError(f"{where} is a {method}, which takes no body.")
    for text in _texts([url, headers, query, body]):
        for arg in _ARG.findall(text):
            if arg not in parameters["properties"]:
                raise SpecError(f"{where} uses {{{{args.{arg}}}}}, which parameters don't declare.")
    return Step(method, url.strip(), {k: str(v) for k, v in headers.items()},
                {k: str(v) for k, v in query.items()}, body, read_only)


def is_read_only(tool: ToolDef) -> bool:
    """Every step reads: a GET or HEAD, or marked read_only by the runtime that registered it (a search API
    that takes POST, say)."""
    return all(step.method in READ_METHODS or step.read_only for step in tool.steps)


def vouched_writes(tool: ToolDef) -> list[int]:
    """The steps whose method may change something (POST, PUT, PATCH, DELETE) that only the runtime's read_only mark
    calls readers. A runtime token can't lift an approval, so a watch of such a tool waits for the owner's (as a
    device command does), however the tool is marked."""
    return [i for i, step in enumerate(tool.steps) if step.method not in READ_METHODS and step.read_only]


def fingerprint(tool: ToolDef) -> str:
    """The tool's executable surface: name, parameters, steps and output expression. Header values (secrets) are
    left out, so rotating a credential is not an edit; the description is cosmetic."""
    surface = {"name": tool.name, "parameters": tool.parameters, "output": tool.output_main,
               "steps": [{"method": s.method, "url": s.url, "headers": sorted(name.lower() for name in s.headers),
                          "query": s.query, "body": s.body, "read_only": s.read_only} for s in tool.steps]}
    return hashlib.sha256(json.dumps(surface, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def check_arguments(tool: ToolDef, arguments: object) -> dict:
    """The call's arguments, checked against the declared parameters: scalars only, declared, of their type."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise SpecError("source.arguments must be an object of the tool's arguments.")
    properties = tool.parameters.get("properties", {})
    for name, value in arguments.items():
        if name not in properties:
            declared = ", ".join(sorted(properties)) or "none"
            raise SpecError(f"The tool {tool.name!r} has no parameter {name!r}; its parameters are {declared}.")
        if isinstance(value, (dict, list)) or value is None:
            raise SpecError(f"Argument {name!r} must be a scalar (text, number or true/false), not "
                            f"{'null' if value is None else type(value).__name__}.")
        if not _fits(properties[name]["type"], value):
            raise SpecError(f"Argument {name!r} must be {properties[name]['type']} (got {value!r}).")
    missing = [name for name in tool.parameters.get("required", []) if name not in arguments]
    if missing:
        raise SpecError(f"The tool {tool.name!r} needs the argument {missing[0]!r}.")
    return arguments


def _fits(kind: str, value: object) -> bool:
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, str)


@dataclass(frozen=True)
class StepResult:
    ok: bool
    status: int | None
    error: str | None
    body: object = None
    headers: dict | None = None

    def projected(self) -> dict:
        """What the condition sees of a step: no payload."""
        return {"ok": self.ok, "status": self.status, "error": self.error}


def run_tool(tool: ToolDef, arguments: dict, fetcher: Fetcher, values: dict[str, str],
             seconds: float = RUN_SECONDS, clock=time.monotonic) -> bytes:
    """Run the steps in order, then output.main over args and steps: the body a watch's checks read.

    A step that answers (any status) is completed; one that can't run (DNS, refused, timeout) ends the chain.
    FetchError when no step completed or the whole call overran `seconds`; ContentError when output.main fails."""
    return _finish(tool, arguments, _run_steps(tool, arguments, fetcher, values, seconds, clock))


def poll_tool(tool: ToolDef, arguments: dict, fetcher: Fetcher, values: dict[str, str], previous: str | None,
              seconds: float = RUN_SECONDS, clock=time.monotonic) -> tuple[str, bytes | None]:
    """A watch's poll: the digest of what the steps answered, and the run's body, or None when the answers are
    those of `previous` (the last poll's digest). output.main reads only the arguments and the answers, so the
    same answers give the same output, and an unchanged poll never pays for evaluating it."""
    results = _run_steps(tool, arguments, fetcher, values, seconds, clock)
    digest = answers_digest(tool, arguments, results)
    return digest, None if digest == previous else _finish(tool, arguments, results)


def answers_digest(tool: ToolDef, arguments: dict, results: list["StepResult"]) -> str:
    """What output.main can see of a run: the arguments and each step's status, error and body, and its headers
    only when the expression reads them (a Date header changes on every answer)."""
    with_headers = "headers" in tool.output_main
    seen = [[r.status, r.error, r.body, r.headers if with_headers else None] for r in results]
    text = json.dumps([arguments, seen], sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()  # raw_hash holds it: 64 characters


def _run_steps(tool: ToolDef, arguments: dict, fetcher: Fetcher, values: dict[str, str], seconds: float,
               clock) -> list["StepResult"]:
    start = clock()
    # a string argument may hold the source placeholders too ({{last_checked_date}}…), filled before it is used
    filled = {**values, **{f"args.{k}": _fill(_text(v), values) for k, v in arguments.items()}}
    results: list[StepResult] = []
    for step in tool.steps:
        left = seconds - (clock() - start)
        if left <= 0:
            raise FetchError(f"The tool {tool.name!r} took longer than {seconds:g} s, the most a watched tool may "
                             "take for one poll.", unreachable=False)
        headers = {k: _fill(v, filled) for k, v in step.headers.items()}
        bad = next((k for k, v in headers.items() if not v.isprintable()), None)
        if bad is not None:  # an argument put a line break into a header: refused, the value never quoted
            results.append(StepResult(False, None, f"header {bad} would hold a control character"))
            break
        try:
            response = fetcher.call(step.method, _url(step, filled), headers, _body(step, filled), timeout=left)
        except FetchError as exc:
            if clock() - start >= seconds:
                raise FetchError(f"The tool {tool.name!r} took longer than {seconds:g} s, the most a watched tool "
                                 "may take for one poll.", unreachable=False) from None
            results.append(StepResult(False, None, _without(exc.message, headers.values())))
            break
        results.append(StepResult(200 <= response.status < 300, response.status, None,
                                  _parsed(response.body, response.headers), response.headers))
    if not any(r.status is not None for r in results):
        raise FetchError(f"No step of the tool {tool.name!r} could run: {results[0].error}", unreachable=False)
    return results


def _finish(tool: ToolDef, arguments: dict, results: list["StepResult"]) -> bytes:
    steps = [r.projected() for r in results] + [{"ok": False, "status": None, "error": "not run: an earlier step "
                                                "could not run"} for _ in tool.steps[len(results):]]
    output = _output(tool, arguments, results)
    return json.dumps({"output": output, "steps": steps}, ensure_ascii=False, sort_keys=True).encode("utf-8")


def _without(message: str, secrets) -> str:
    """An error message with any header value in it masked: header values are secrets."""
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 4:
            message = message.replace(secret, "••••••••")
    return message


def _output(tool: ToolDef, arguments: dict, results: list[StepResult]) -> object:
    if not tool.output_main:
        return None
    variables = {"args": cel.to_cel(arguments),
                 "steps": [{"status": float(r.status) if r.status is not None else None,
                            "body": cel.to_cel(r.body), "headers": r.headers or {}} for r in results]}
    try:
        return _plain(cel.value(tool.output_main, variables))
    except ContentError as exc:
        raise ContentError(f"the tool's output.main could not be evaluated: {str(exc).removeprefix('the condition ')}"
                           ) from None


def _plain(value: object) -> object:
    """A CEL result as JSON: whole doubles read as integers again (12.0 -> 12), times as ISO text."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53:
        return int(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def output_text(output: object) -> str:
    """outputText: the output, always as a string (JSON for a map or list)."""
    if isinstance(output, str):
        return output
    return "" if output is None else json.dumps(output, ensure_ascii=False, sort_keys=True)


def output_data(output: object) -> object:
    """data: the output parsed as JSON when it is (or holds) an object or array, else None."""
    if isinstance(output, (dict, list)):
        return output
    if isinstance(output, str) and output.lstrip()[:1] in ("{", "["):
        try:
            parsed = json.loads(output)
        except ValueError:
            return None
        return parsed if isinstance(parsed, (dict, list)) else None
    return None


def _parsed(body: bytes, headers: dict) -> object:
    text = body.decode("utf-8", errors="replace")
    if "json" in headers.get("content-type", "") or text.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(text)
        except ValueError:
            pass
    return excerpt(text, MAX_STEP_BODY_CHARS) if len(text) > MAX_STEP_BODY_CHARS else text


def _url(step: Step, values: dict) -> str:
    url = _fill(step.url, values, encode=True)
    if not step.query:
        return url
    parts = urlsplit(url)
    extra = urlencode({k: _fill(v, values) for k, v in step.query.items()})
    return urlunsplit((parts.scheme, parts.netloc, parts.path, f"{parts.query}&{extra}" if parts.query else extra,
                       parts.fragment))


def _body(step: Step, values: dict) -> bytes | None:
    if step.body is None:
        return None
    return json.dumps(_fill_json(step.body, values), ensure_ascii=False).encode("utf-8")


def _fill_json(value: object, values: dict) -> object:
    if isinstance(value, str):
        return _fill(value, values)
    if isinstance(value, dict):
        return {k: _fill_json(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill_json(v, values) for v in value]
    return value


def _fill(text: str, values: dict, encode: bool = False) -> str:
    return placeholders.fill(text, values, encode=encode)


def _text(value: object) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _sample_args(parameters: dict) -> dict:
    sample = {f"args.{name}": "1" for name in parameters.get("properties", {})}
    return {**placeholders.sample_values(), **sample}


def _texts(value: object):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _texts(item)


def tool_from_record(record: dict, headers: list[dict]) -> ToolDef:
    """A stored tool, with its steps' headers (decrypted by the caller) put back."""
    steps = tuple(Step(s["method"], s["url"], headers[i] if i < len(headers) else {}, s.get("query") or {},
                       s.get("body"), bool(s.get("read_only"))) for i, s in enumerate(record["steps"]))
    return ToolDef(record["name"], record.get("description", ""), record["parameters"], steps,
                   record.get("output_main", ""), bool(record.get("requires_approval")))


def tool_to_record(tool: ToolDef) -> tuple[dict, list[dict]]:
    """The tool as stored: the steps without their header values, and the headers apart (to be encrypted)."""
    record = {"name": tool.name, "description": tool.description, "parameters": tool.parameters,
              "output_main": tool.output_main, "requires_approval": tool.requires_approval,
              "steps": [{"method": s.method, "url": s.url, "header_names": sorted(s.headers), "query": s.query,
                         "body": s.body, "read_only": s.read_only} for s in tool.steps]}
    return record, [dict(s.headers) for s in tool.steps]


__all__ = ["MAX_STEPS", "RUN_SECONDS", "Step", "ToolDef", "check_arguments", "check_name", "fingerprint",
           "is_read_only", "output_data", "output_text", "parse_tool", "poll_tool", "run_tool", "tool_from_record",
           "tool_to_record", "vouched_writes"]


# --- MCP tools (a connection's server lists them; Vigil calls them with the official client) -----------------

def mcp_fingerprint(name: str, input_schema: dict, annotations: dict) -> str:
    """An MCP tool's executable surface: its name, inputSchema and annotations (title and description are
    cosmetic)."""
    surface = {"name": name, "input_schema": input_schema or {}, "annotations": annotations or {}}
    return hashlib.sha256(json.dumps(surface, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def check_mcp_arguments(name: str, input_schema: dict, arguments: object) -> dict:
    """Arguments for an MCP tool: scalars only, each declared in its inputSchema, of the declared type when it is
    a scalar one, and the required ones present."""
    properties = (input_schema or {}).get("properties") or {}
    declared = {key: {"type": prop.get("type") if prop.get("type") in SCALARS else "string"}
                for key, prop in properties.items() if isinstance(prop, dict)}
    tool = ToolDef(name, "", {"type": "object", "properties": declared,
                              "required": [r for r in (input_schema or {}).get("required") or [] if r in declared]},
                   (), "", False)
    wrong = [key for key, prop in properties.items() if isinstance(prop, dict) and prop.get("type") in
             ("object", "array") and key in (input_schema or {}).get("required", [])]
    if wrong:
        raise SpecError(f"The tool {name!r} needs {wrong[0]!r}, an {properties[wrong[0]]['type']}; a watched tool "
                        "takes scalar arguments only.")
    return check_arguments(tool, arguments)


def mcp_run_body(is_error: bool, text: str, structured: object) -> bytes:
    """An MCP call as a watch reads it: output is the structured content (or the text), one step ok unless the
    tool said isError."""
    output = structured if structured is not None else text
    step = {"ok": not is_error, "status": None, "error": excerpt(text, 300) if is_error else None}
    return json.dumps({"output": output, "steps": [step]}, ensure_ascii=False, sort_keys=True).encode("utf-8")
