"""GET /api/tool/schema?format=…: the monitor tool rendered for OpenAI, Anthropic, MCP and seed 002 has each vendor's
own shape, its parameters are a valid JSON Schema (2020-12) that takes the documented calls and refuses others, no
token is needed, and an unknown format is a 400 that names the formats there are."""

from __future__ import annotations

import re

import jsonschema
import pytest
from anthropic.types import ToolParam
from jsonschema import Draft202012Validator
from mcp import types
from openai.types.chat import ChatCompletionToolParam
from openai.types.responses import FunctionToolParam
from openai.types.shared_params import FunctionDefinition
from pydantic import TypeAdapter

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
    "openai-responses": {
        "type": "object", "additionalProperties": False,
        "required": ["type", "name", "description", "parameters", "strict"],
        "properties": {"type": {"const": "function"}, "name": {"type": "string", "pattern": TOOL_NAME.pattern},
                       "description": {"type": "string", "minLength": 1}, "strict": {"const": False},
                       "parameters": {"type": "object", "required": ["type"],
                                      "properties": {"type": {"const": "object"}}}}},
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
    return {"openai": lambda: body["function"]["parameters"], "openai-responses": lambda: body["parameters"],
            "anthropic": lambda: body["input_schema"],
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


@pytest.mark.parametrize("format", ["openai", "openai-responses", "anthropic", "mcp"])
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
    for name in ("openai", "openai-responses", "anthropic", "mcp", "seed002"):
        assert name in detail, detail


#: each format as the vendor's own SDK types it (TypedDicts and a pydantic model), checked strictly
VENDOR_TYPES = {"openai": ChatCompletionToolParam, "openai-responses": FunctionToolParam, "anthropic": ToolParam,
                "mcp": types.Tool}


@pytest.mark.parametrize("format", list(VENDOR_TYPES))
def test_tool_schema_format_is_accepted_by_the_vendors_sdk_type(client, format):
    body = client.get("/api/tool/schema", params={"format": format}).json()
    vendor = VENDOR_TYPES[format]
    if format == "mcp":
        tool = vendor.model_validate(body, strict=True)
        assert tool.model_dump(by_alias=True, exclude_none=True) == body
    else:
        TypeAdapter(vendor).validate_python(body, strict=True)
        assert set(body) <= set(vendor.__annotations__), "a key the vendor's type does not have"
    if format == "openai":
        TypeAdapter(FunctionDefinition).validate_python(body["function"], strict=True)
        assert set(body["function"]) <= set(FunctionDefinition.__annotations__)


def test_tool_schema_openai_formats_are_told_apart_by_the_sdk(client):
    chat = client.get("/api/tool/schema?format=openai").json()
    flat = client.get("/api/tool/schema?format=openai-responses").json()
    assert flat["name"] == chat["function"]["name"] and flat["parameters"] == chat["function"]["parameters"]
    with pytest.raises(ValueError):  # Chat Completions' nested shape is not a Responses function tool
        TypeAdapter(FunctionToolParam).validate_python(chat, strict=True)


def _type_lists(schema: object, where: str = "") -> list[str]:
    """Where a schema says `"type": [...]`, which Gemini-style clients reject."""
    if isinstance(schema, dict):
        found = [where or "/"] if isinstance(schema.get("type"), list) else []
        return found + [hit for key, value in schema.items() for hit in _type_lists(value, f"{where}/{key}")]
    if isinstance(schema, list):
        return [hit for index, value in enumerate(schema) for hit in _type_lists(value, f"{where}[{index}]")]
    return []


@pytest.mark.parametrize("format", list(SHAPES))
def test_tool_schema_has_no_type_lists(client, format):
    body = client.get("/api/tool/schema", params={"format": format}).json()
    assert _type_lists(body) == []


def test_tool_schema_durations_are_strings_and_status_values_text(client):
    schema = parameters("openai", client.get("/api/tool/schema").json())
    create = next(a for a in schema["properties"]["arguments"]["anyOf"] if "source" in a.get("properties", {}))
    for name in ("interval", "expires_in"):
        assert create["properties"][name]["type"] == "string"
        assert "'900'" in create["properties"][name]["description"] or "'86400'" in create["properties"][name][
            "description"]
    validator = Draft202012Validator(schema)
    call = {"action": "monitor_create", "arguments": {
        "description": "the build ends", "source": {"type": "json", "url": "https://ci.example.com/run.json"},
        "check": {"type": "status", "value_path": "data.status", "values": ["success", "200"]},
        "interval": "900", "expires_in": "2h"}}
    assert validator.is_valid(call)
    assert not validator.is_valid({**call, "arguments": {**call["arguments"], "interval": 900}})
