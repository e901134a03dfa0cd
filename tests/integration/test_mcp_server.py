"""/mcp, Vigil's own MCP server, driven by the official SDK's ClientSession over real HTTP against `vigil web`
(with `vigil worker` and `vigil scheduler` where a wake is needed) on PostgreSQL and Redis: it lists four tools
whose input schemas are the monitor tool's own plus conversation_id; a page monitor is created, listed, fires when
the page changes, its wake is read once with wakes_read, and it is cancelled; a wrong or missing token is 401 and
the client can't even initialize; a bad call is an error result that says what to fix and stores nothing; one
account's token never sees or cancels another's monitor; a Host not on the allowlist is 421."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time

import anyio
import jsonschema
import pytest
import requests
from mcp import types
from mcp.client import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.shared.exceptions import MCPError

import tool_schema
from app import mcp_server
from models.tables import Conversation, Monitor
from tests.integration.helpers import db, run_coroutine, running_stack
from tests.npm_tools import npm_bin
from tests.reliability.stack import Stack

TOOLS = ["monitor_create", "monitor_list", "monitor_cancel", "wakes_read"]


def running(tmp_path, *, wakes: bool = False, **settings: str):
    """`vigil web`, and for wakes a worker and the scheduler."""
    return running_stack(tmp_path, worker=wakes, scheduler=wakes, **settings)


@pytest.fixture()
def web(postgres, tmp_path):
    with running(tmp_path) as stack:
        yield stack


@pytest.fixture()
def full(postgres, tmp_path):
    with running(tmp_path, wakes=True) as stack:
        yield stack


def session(base: str, token: str | None, steps, statuses: list | None = None):
    """steps(session) in an initialized ClientSession of the official SDK on {base}/mcp; its return value. The
    HTTP status of every answer goes to `statuses`."""
    async def record(response) -> None:
        if statuses is not None:
            statuses.append(response.status_code)

    async def main():
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        with anyio.fail_after(60):
            async with create_mcp_http_client(headers=headers) as http:
                http.event_hooks["response"].append(record)
                async with streamable_http_client(f"{base}/mcp", http_client=http) as streams:
                    async with ClientSession(streams[0], streams[1]) as client:
                        await client.initialize()
                        return await steps(client)
    return run_coroutine(main())


async def call(client: ClientSession, name: str, arguments: dict) -> dict:
    """One tool call's reply: the JSON text (the one content), which is also the structured content; is_error
    exactly when ok is false."""
    result = await client.call_tool(name, arguments)
    [text] = result.content
    assert text.type == "text"
    reply = json.loads(text.text)
    assert result.structured_content == reply
    assert result.is_error is (not reply["ok"]), reply
    return reply


async def until(probe, what: str, stack: Stack, timeout: float = 30):
    """The first truthy value of the coroutine probe(), asked every 0.2 s until `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{stack.log_tails()}")
        await asyncio.sleep(0.2)


def raw_post(base: str, token: str | None, host: str | None = None) -> requests.Response:
    """An MCP initialize as a plain HTTP POST."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if host:
        headers["Host"] = host
    return requests.post(f"{base}/mcp", headers=headers, timeout=30, json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": types.LATEST_PROTOCOL_VERSION, "capabilities": {},
                   "clientInfo": {"name": "vigil-test", "version": "1"}}})


def test_mcp_lists_four_tools_with_annotations_and_the_monitor_tools_schemas(web, owner):
    async def steps(client):
        return (await client.list_tools()).tools

    listed = session(web.base, owner[1], steps)
    assert [tool.name for tool in listed] == TOOLS
    tools = {tool.name: tool for tool in listed}
    for tool in listed:
        assert tool.description and tool.input_schema["type"] == "object"
        assert "conversation_id" in tool.input_schema["required"], tool.name
        assert tool.input_schema["properties"]["conversation_id"]["type"] == "string"
        jsonschema.Draft202012Validator.check_schema(tool.input_schema)
    hints = {name: (t.annotations.read_only_hint, t.annotations.destructive_hint, t.annotations.idempotent_hint)
             for name, t in tools.items()}
    assert hints == {"monitor_create": (False, False, False), "monitor_list": (True, None, None),
                     "monitor_cancel": (False, True, True), "wakes_read": (True, None, None)}

    actions = tool_schema.load()["actions"]
    for name in ("monitor_create", "monitor_list", "monitor_cancel"):
        schema = tools[name].input_schema
        own = dict(schema["properties"])
        assert set(own.pop("conversation_id")) >= {"type", "description"}
        assert own.pop("woken_by")["type"] == "string"
        assert own.pop("coalesce_seconds") | {"description": ""} == {"type": "integer", "minimum": 0,
                                                                     "maximum": 3600, "description": ""}
        assert own == actions[name]["properties"], name
        assert schema["required"] == ["conversation_id", *actions[name].get("required", [])]
        assert schema["additionalProperties"] is False
    assert set(tools["wakes_read"].input_schema["properties"]) == {"conversation_id", "after", "limit"}

    create = jsonschema.Draft202012Validator(tools["monitor_create"].input_schema)
    assert create.is_valid({"conversation_id": "c-1", "description": "a deploy hook", "source": {"type": "webhook"}})
    assert not create.is_valid({"description": "a deploy hook", "source": {"type": "webhook"}})


def test_mcp_page_monitor_is_created_listed_woken_read_once_and_cancelled(full, owner, pages):
    url = pages.set("/release", "<h1>Release</h1><p>version 1.0</p>")
    chat = {"conversation_id": "chat-7"}

    async def steps(client):
        created = await call(client, "monitor_create", {
            **chat, "description": "the release page changes", "source": {"type": "page", "url": url},
            "interval": "1s", "max_wakes": 2})
        assert created["ok"] and created["result"]["status"] == "active", created
        monitor_id = created["result"]["monitor_id"]
        listed = await call(client, "monitor_list", chat)
        assert [(m["monitor_id"], m["status"]) for m in listed["result"]["monitors"]] == [(monitor_id, "active")]
        nothing = await call(client, "wakes_read", {**chat, "after": "0"})
        assert nothing == {"ok": True, "result": {"messages": [], "next_cursor": "0"}}

        pages.set("/release", "<h1>Release</h1><p>version 1.1</p>")

        async def woken():
            return (await call(client, "wakes_read", {**chat, "after": "0"}))["result"]["messages"]
        [wake] = await until(woken, "the wake of the changed page", full)
        assert wake["role"] == "wake" and wake["conversation_id"] == "chat-7"
        assert "version 1.1" in wake["content"] and wake["metadata"]["wake"]["ref_id"] == monitor_id
        page = (await call(client, "wakes_read", {**chat, "after": "0"}))["result"]
        assert page["next_cursor"] == str(wake["id"])
        again = (await call(client, "wakes_read", {**chat, "after": page["next_cursor"]}))["result"]
        assert again == {"messages": [], "next_cursor": page["next_cursor"]}

        cancelled = await call(client, "monitor_cancel", {**chat, "monitor_id": monitor_id})
        assert cancelled == {"ok": True, "result": {"monitor_id": monitor_id, "status": "cancelled"}}
        # a second cancel (a retried call: the tool says idempotentHint) answers ok with a note; it changes nothing
        twice = await call(client, "monitor_cancel", {**chat, "monitor_id": monitor_id})
        assert twice["ok"] is True and twice["result"]["status"] == "cancelled", twice
        assert "cancelled already" in twice["result"]["note"]
        listed = await call(client, "monitor_list", chat)
        assert [(m["monitor_id"], m["status"]) for m in listed["result"]["monitors"]] == [(monitor_id, "cancelled")]

    session(full.base, owner[1], steps)


def test_mcp_refuses_a_wrong_or_missing_token(web, owner):
    async def steps(client):
        raise AssertionError("the session initialized with a refused token")

    for token in ("vgl_not-a-real-token-5150", None):
        answer = raw_post(web.base, token)
        assert answer.status_code == 401 and "invalid_token" in answer.text, (token, answer.text)
        assert answer.headers["WWW-Authenticate"].startswith("Bearer")
        assert token is None or token not in answer.text
        statuses: list[int] = []
        with pytest.raises(BaseException) as caught:
            session(web.base, token, steps, statuses)
        assert any(isinstance(error, MCPError) for error in _flatten(caught.value)), caught.value
        assert statuses == [401], token
    assert raw_post(web.base, owner[1]).status_code == 200  # the same call with the account's token


def test_mcp_bad_calls_are_error_results_that_say_what_to_fix_and_create_nothing(web, owner):
    chat = {"conversation_id": "chat-9"}

    async def steps(client):
        no_source = await call(client, "monitor_create", {**chat, "description": "the deploy finishes"})
        assert no_source["ok"] is False and no_source["error"].startswith("source is required"), no_source
        no_chat = await call(client, "monitor_create", {"description": "x", "source": {"type": "webhook"}})
        assert no_chat["ok"] is False and "conversation_id is required" in no_chat["error"], no_chat
        unknown = await call(client, "monitor_delete", {**chat, "monitor_id": "m-1"})
        assert unknown["ok"] is False and "the tools are monitor_create" in unknown["error"], unknown
        return await call(client, "monitor_list", chat)

    assert session(web.base, owner[1], steps) == {"ok": True, "result": {"monitors": []}}
    with db():
        assert Monitor.select().count() == 0


def test_mcp_sets_the_conversations_coalescing_window_and_refuses_a_bad_one(web, owner):
    chat = {"conversation_id": "chat-coalesce"}

    async def steps(client):
        bad = await call(client, "monitor_list", {**chat, "coalesce_seconds": 7200})
        assert bad["ok"] is False and "3600" in json.dumps(bad), bad
        return await call(client, "monitor_list", {**chat, "coalesce_seconds": 30})

    assert session(web.base, owner[1], steps)["ok"] is True
    with db():
        assert Conversation.get(Conversation.external_id == "chat-coalesce").coalesce_seconds == 30


def test_mcp_wakes_read_without_a_conversation_is_an_error_result(web, owner):
    async def steps(client):
        return await call(client, "wakes_read", {"after": "0"})

    reply = session(web.base, owner[1], steps)
    assert reply["ok"] is False and "conversation_id" in reply["error"], reply


def test_mcp_one_accounts_token_never_lists_or_cancels_anothers_monitor(web, owner, stranger):
    chat = {"conversation_id": "same-id-on-both-runtimes"}

    async def create(client):
        return await call(client, "monitor_create", {**chat, "description": "the owner's deploy hook",
                                                     "source": {"type": "webhook"}})
    created = session(web.base, owner[1], create)
    assert created["ok"], created
    monitor_id = created["result"]["monitor_id"]

    async def trespass(client):
        listed = await call(client, "monitor_list", chat)
        cancelled = await call(client, "monitor_cancel", {**chat, "monitor_id": monitor_id})
        return listed, cancelled
    listed, cancelled = session(web.base, stranger[1], trespass)
    assert listed == {"ok": True, "result": {"monitors": []}}
    assert cancelled["ok"] is False and f"There is no monitor {monitor_id!r}" in cancelled["error"], cancelled

    async def look(client):
        return await call(client, "monitor_list", chat)
    mine = session(web.base, owner[1], look)["result"]["monitors"]
    assert [(m["monitor_id"], m["status"]) for m in mine] == [(monitor_id, "active")]


def test_mcp_answers_localhost_and_the_public_host_only(postgres, tmp_path, owner):
    with running(tmp_path, PUBLIC_API_BASE_URL="https://vigil.example.com") as stack:
        assert raw_post(stack.base, owner[1]).status_code == 200
        assert raw_post(stack.base, owner[1], host="vigil.example.com").status_code == 200
        refused = raw_post(stack.base, owner[1], host="attacker.example")
        assert refused.status_code == 421, refused.text
        assert raw_post(stack.base, owner[1], host="vigil.example.com.attacker.example").status_code == 421


def _flatten(error: BaseException):
    """The error and the members of its exception groups."""
    yield error
    for member in getattr(error, "exceptions", ()):
        yield from _flatten(member)


def test_mcp_initialize_instructions_tell_the_agent_how_to_use_vigil(web, owner):
    async def main():
        headers = {"Authorization": f"Bearer {owner[1]}"}
        async with create_mcp_http_client(headers=headers) as http:
            async with streamable_http_client(f"{web.base}/mcp", http_client=http) as streams:
                async with ClientSession(streams[0], streams[1]) as client:
                    return await client.initialize()

    instructions = run_coroutine(main()).instructions
    assert instructions and len(instructions) < 1500, instructions
    assert instructions != mcp_server.WAKES_DESCRIPTION
    for words in ("monitor_create", "end your turn", "conversation_id", "vigil watch --conversation new",
                  "wakes_read", "push", "monitor_cancel"):
        assert words in instructions, words


def test_mcp_tool_schemas_have_no_type_lists(web, owner):
    """Gemini-style clients reject `"type": [...]`; durations are strings, a status value text."""
    async def steps(client):
        return (await client.list_tools()).tools

    tools = {tool.name: tool for tool in session(web.base, owner[1], steps)}
    for name, tool in tools.items():
        assert _type_lists(tool.input_schema) == [], name
    create = tools["monitor_create"].input_schema["properties"]
    assert create["interval"]["type"] == create["expires_in"]["type"] == "string"


def test_mcp_interval_as_seconds_in_a_string_or_a_number_is_taken(web, owner):
    chat = {"conversation_id": "chat-durations"}

    async def steps(client):
        made = []
        for interval in ("900", 900, "15m"):
            made.append(await call(client, "monitor_create", {
                **chat, "description": "a deploy hook", "source": {"type": "webhook"}, "expires_in": interval}))
        return made

    for created in session(web.base, owner[1], steps):
        assert created["ok"], created
    with db():
        spans = [(m.expires_at - m.created_at).total_seconds() for m in Monitor.select()]
    assert len(spans) == 3 and all(abs(span - 900) < 5 for span in spans), spans


def test_mcp_monitor_cancel_of_an_unknown_id_is_still_an_error(web, owner):
    async def steps(client):
        return await call(client, "monitor_cancel", {"conversation_id": "chat-x", "monitor_id": "no-such-id"})

    reply = session(web.base, owner[1], steps)
    assert reply["ok"] is False and "There is no monitor 'no-such-id'" in reply["error"], reply


def test_mcp_monitor_list_is_compact_unless_verbose(web, owner):
    chat = {"conversation_id": "chat-list"}

    async def steps(client):
        created = await call(client, "monitor_create", {**chat, "description": "the deploy calls back",
                                                        "source": {"type": "webhook"}})
        assert created["ok"], created
        short = await call(client, "monitor_list", chat)
        full = await call(client, "monitor_list", {**chat, "verbose": True})
        return created["result"]["monitor_id"], short, full

    monitor_id, short, full = session(web.base, owner[1], steps)
    [listed] = short["result"]["monitors"]
    assert listed["monitor_id"] == monitor_id and listed["conversation_id"] == "chat-list"
    assert listed["source"] == {"type": "webhook", "signature": "none", "max_hits": listed["source"]["max_hits"]}
    assert None not in _values(listed), listed
    [record] = full["result"]["monitors"]
    assert record["source"]["url"] is None and "selector" in record["source"] and "lineage" in record
    assert len(json.dumps(listed)) * 2 < len(json.dumps(record))


def _values(item: object) -> list:
    if isinstance(item, dict):
        return [v for value in item.values() for v in _values(value)]
    return [item]


def _type_lists(schema: object) -> list:
    if isinstance(schema, dict):
        return ([schema] if isinstance(schema.get("type"), list) else []) + [
            hit for value in schema.values() for hit in _type_lists(value)]
    if isinstance(schema, list):
        return [hit for value in schema for hit in _type_lists(value)]
    return []


def test_mcp_tools_pass_the_inspector_cli_strict_check(web, owner):
    """The MCP Inspector CLI's --strict portability check (type lists, and whatever else it knows) finds nothing.
    The Inspector is installed from npm at its pinned version (tests/npm_tools.py)."""
    checked = subprocess.run(
        [str(npm_bin() / "mcp-inspector"), "--cli", f"{web.base}/mcp", "--transport", "http",
         "--header", f"Authorization: Bearer {owner[1]}", "--method", "tools/list", "--strict"],
        capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, (checked.returncode, checked.stderr[-3000:])
    assert [tool["name"] for tool in json.loads(checked.stdout)["tools"]] == TOOLS
    assert "warn" not in checked.stderr.lower() and "error" not in checked.stderr.lower(), checked.stderr[-3000:]
