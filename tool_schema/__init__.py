"""The monitor tool's schema: one JSON file, rendered for OpenAI (Chat Completions and Responses), Anthropic and MCP."""

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


def for_openai_responses() -> dict:
    """OpenAI's Responses API takes the function flat, beside `type`; not strict (the schema has optional fields)."""
    schema = load()
    return {"type": "function", "name": schema["name"], "description": schema["description"],
            "parameters": arguments_schema(), "strict": False}


def for_anthropic() -> dict:
    schema = load()
    return {"name": schema["name"], "description": schema["description"], "input_schema": arguments_schema()}


def for_mcp() -> dict:
    schema = load()
    return {"name": schema["name"], "description": schema["description"], "inputSchema": arguments_schema()}


#: seed 002's shape of the same tool: a watcher over a shell command, action start | stop | list
WATCH_DESCRIPTION = (
    "Run a shell command as a long-lived background watcher on one of the user's paired devices. Each line the "
    "command prints (stdout or stderr) is delivered to you as a notification, prefixed with the label; lines "
    "emitted close together are batched. The watch ends when the command exits. Use it to react to events "
    "without polling: fswatch <path> or inotifywait -m <path> for file changes, tail -F <log> | grep "
    "--line-buffered <pattern> for log signals, or a poll loop for remote state. action=start begins a watch and "
    "returns its id; action=stop ends the watch with that id; action=list shows active watches. On a device "
    "that asks its owner first, start says so and gives the link the user approves it at.")


def for_watch() -> dict:
    """The start/stop/list tool of seed 002, as one flat parameter object (the shape Codex and Claude Code use)."""
    actions = load()["actions"]
    start, stop = actions["start"]["properties"], actions["stop"]["properties"]
    return {"name": "monitor", "description": WATCH_DESCRIPTION, "parameters": {
        "type": "object", "required": ["action"],
        "properties": {"action": {"type": "string", "enum": ["start", "stop", "list"]},
                       "command": start["command"], "description": start["description"],
                       "device": start["device"], "id": stop["id"]}}}
