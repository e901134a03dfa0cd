"""The monitor tool's schema: one JSON file, rendered for OpenAI, Anthropic and MCP."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

_SOURCE = Path(__file__).with_name("monitor.json")


@cache
def load() -> dict:
    return json.loads(_SOURCE.read_text())


def arguments_schema() -> dict:
    """One object schema: `action`, and `arguments` as the schema of whichever action is named."""
    actions = load()["actions"]
    return {
        "type": "object",
        "required": ["action", "arguments"],
        "properties": {
            "action": {"type": "string", "enum": list(actions)},
            "arguments": {"anyOf": list(actions.values())},
        },
    }


def for_openai() -> dict:
    schema = load()
    return {"type": "function", "function": {"name": schema["name"], "description": schema["description"],
                                             "parameters": arguments_schema()}}


def for_anthropic() -> dict:
    schema = load()
    return {"name": schema["name"], "description": schema["description"], "input_schema": arguments_schema()}


def for_mcp() -> dict:
    schema = load()
    return {"name": schema["name"], "description": schema["description"], "inputSchema": arguments_schema()}
