"""GET /api/tool/schema?format=…: the monitor tool rendered for OpenAI, Anthropic, MCP and seed 002 has each vendor's
own shape, its parameters are a valid JSON Schema (2020-12) that takes the documented calls and refuses others, no
token is needed, and an unknown format is a 400 that names the formats there are."""

from __future__ import annotations

import re

import jsonschema
import pytest
from jsonschema import Draft202012Validator
from mcp import types

import tool_schema

#: what OpenAI and Anthropic accept as a tool's name
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
ACTIONS = ["monitor_create", "monitor_list", "monitor_cancel", "start", "stop", "list"]

#: the shape of each vendor's tool definition, as JSON Schemas
SHAPES = {
    "openai": {
        "type": "object", "additionalProperties": False, "required": ["type", "function"],
        "properties": {
            "type": {"const": "function"},
            "function": {"type": "object", "additionalProperties": False,
                         "required": ["name", "description", "parameters"],
                         "properties": {"name": {"type": "string", "pattern": TOOL_NAME.pattern},
                                        "description": {"type": "string", "minLength": 1},
                                        "parameters": {"type": "object", "required": ["type"],
                                                       "properties": {"type": {"const": "object"}}}}}}},
    "anthropic": {
        "type": "object", "additionalProperties": False, "required": ["name", "description", "input_schema"],
        "properties": {"name": {"type": "string", "pattern": TOOL_NAME.pattern},
                       "description": {"type": "string", "minLength": 1},
                       "input_schema": {"type": "object", "required": ["type"],
                                        "properties": {"type": {"const": "object"}}}}},
    "mcp": {
        "type": "object", "additionalProperties": False, "required": ["name", "description", "inputSchema"],
        "properties": {"name": {"type": "string", "minLength": 1}, "description": {"type": "string", "minLength": 1},
                       "inputSchema": {"type": "object", "required": ["type"],
                                       "properties": {"type": {"const": "object"}}}}},
    "seed002": {
        "type": "object", "additionalProperties": False, "required": ["name", "description", "parameters"],
        "properties": {"name": {"const": "monitor"}, "description": {"type": "string", "minLength": 1},
                       "parameters": {"type": "object", "required": ["type", "properties"],
                                      "properties": {"type": {"const": "object"}}}}},
}


def parameters(format: str, body: dict) -> dict:
    """The JSON Schema of the tool's arguments, wherever the format keeps it."""
    return {"openai": lambda: body["function"]["parameters"], "anthropic": lambda: body["input_schema"],
            "mcp": lambda: body["inputSchema"], "seed002": lambda: body["parameters"]}[format]()


@pytest.mark.parametrize("format", list(SHAPES))
def test_tool_schema_format_has_the_vendors_shape_without_a_token(client, format):
    answer = client.get("/api/tool/schema", params={"format": format})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    jsonschema.validate(body, SHAPES[format])
    Draft202012Validator.check_schema(parameters(format, body))


def test_tool_schema_default_format_is_openai(client):
    assert client.get("/api/tool/schema").json() == client.get("/api/tool/schema?format=openai").json()


def test_tool_schema_mcp_format_is_an_mcp_tool(client):
    tool = types.Tool.model_validate(client.get("/api/tool/schema?format=mcp").json())
    assert tool.name == "monitor" and tool.description
    assert tool.input_schema["type"] == "object" and tool.input_schema["required"] == ["action", "arguments"]


@pytest.mark.parametrize("format", ["openai", "anthropic", "mcp"])
def test_tool_schema_parameters_take_the_documented_calls_and_refuse_others(client, format):
    schema = parameters(format, client.get(f"/api/tool/schema?format={format}").json())
    assert schema["properties"]["action"]["enum"] == ACTIONS
    validator = Draft202012Validator(schema)
    for example in tool_schema.load()["examples"]:
        errors = [error.message for error in validator.iter_errors(example)]
        assert errors == [], (example, errors)
    assert validator.is_valid({"action": "monitor_cancel", "arguments": {"monitor_id": "abc"}})
    for wrong in ({"action": "monitor_delete", "arguments": {}}, {"action": "monitor_list"},
                  {"action": "monitor_create", "arguments": {"description": "no source"}},
                  {"action": "monitor_cancel", "arguments": {"monitor_id": 7}}):
        assert not validator.is_valid(wrong), wrong


def test_tool_schema_seed002_is_a_flat_start_stop_list_tool(client):
    schema = client.get("/api/tool/schema?format=seed002").json()["parameters"]
    assert schema["required"] == ["action"]
    assert schema["properties"]["action"] == {"type": "string", "enum": ["start", "stop", "list"]}
    assert set(schema["properties"]) == {"action", "command", "description", "device", "id"}
    validator = Draft202012Validator(schema)
    assert validator.is_valid({"action": "start", "command": "tail -F /var/log/app.log", "description": "app log"})
    assert validator.is_valid({"action": "stop", "id": "mon_abc"})
    assert not validator.is_valid({"action": "restart"})
    assert not validator.is_valid({"command": "ls"})


def test_tool_schema_unknown_format_is_400_naming_the_formats(client):
    answer = client.get("/api/tool/schema?format=xml")
    assert answer.status_code == 400
    detail = answer.json()["detail"]
    for name in ("openai", "anthropic", "mcp", "seed002"):
        assert name in detail, detail
