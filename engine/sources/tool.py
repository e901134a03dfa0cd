"""tool: one of the agent's own read-only tools, re-run headless on a schedule as the owner (seed 001's agent_tool).

The source names the tool and its arguments; the tool itself (steps, secrets) lives in Vigil's registry and is
resolved, checked and fingerprinted when the monitor is created (models/tools.py). Each check runs it with no
model (engine/tools.py); what a check reads is its output and its steps' {ok, status, error}.
"""

from __future__ import annotations

import json
from dataclasses import replace

from engine.content import Content, sha256_hex
from engine.errors import ContentError, SpecError
from engine.http import FetchError
from engine.sources.base import SourceIO, SourcePolicy, SourceSpec
from engine.tools import check_name, output_data, output_text

#: source.tool is checked like a declared tool's name; an MCP tool's name may hold more (e.g. slashes), so it is
#: only checked for length there
FIELDS = frozenset({"type", "tool", "arguments", "agent_id", "connection"})
MAX_ARGUMENTS_CHARS = 4000


def parse(raw: dict, policy: SourcePolicy) -> SourceSpec:
    tool = raw.get("tool")
    if raw.get("connection") is None:
        check_name(tool, "source.tool")
    elif not isinstance(tool, str) or not tool or len(tool) > 128 or not tool.isprintable():
        raise SpecError("source.tool must be the tool's name as its MCP server lists it.")
    arguments = raw.get("arguments", {})
    if not isinstance(arguments, dict):
        raise SpecError("source.arguments must be an object of the tool's arguments (scalars).")
    if len(json.dumps(arguments)) > MAX_ARGUMENTS_CHARS:
        raise SpecError(f"source.arguments is too long; keep it under {MAX_ARGUMENTS_CHARS} characters of JSON.")
    agent = raw.get("agent_id")
    if agent is not None and (not isinstance(agent, str) or not agent.strip() or len(agent) > 200):
        raise SpecError("source.agent_id must be the id of the agent whose tool it is (text, at most 200).")
    connection = raw.get("connection")
    if connection is not None:
        if agent is not None:
            raise SpecError("A tool is either an agent's (source.agent_id) or an MCP connection's "
                            "(source.connection), not both.")
        if not isinstance(connection, str) or not connection.strip() or len(connection) > 40:
            raise SpecError("source.connection must be the name of one of the owner's MCP connections "
                            "(Settings → Connections).")
    return SourceSpec(type="tool", tool=tool, arguments=arguments, agent_id=agent, connection=connection)


def read(spec: SourceSpec, io: SourceIO) -> bytes:
    raise FetchError("A tool watch runs the tool from Vigil's registry; nothing is fetched by the source itself.")


def normalize(spec: SourceSpec, body: bytes, max_text_bytes: int) -> Content:
    """The run's output as the checks read it: text is outputText, data the output parsed as JSON (or null), and a
    cel check also reads output, outputText and steps."""
    try:
        run = json.loads(body)
        output, steps = run["output"], run["steps"]
    except (ValueError, KeyError, TypeError):
        raise ContentError("the tool's run could not be read back") from None
    text = output_text(output)
    data = output_data(output)
    content = Content(text=text[:max_text_bytes], data=data, is_json=data is not None,
                      variables={"output": output, "outputText": text, "steps": steps})
    return replace(content, fingerprint="tool:" + sha256_hex(body))
