"""adapters.mcp_client against a real MCP server (the official SDK's, tests/mcp_server.py) over real HTTP."""

from __future__ import annotations

import socket

import pytest

from adapters import mcp_client
from adapters.mcp_client import McpError, McpResult
from tests.mcp_server import serve_mcp

TOKEN = "s3cret-bearer-9f2c41"


@pytest.fixture(scope="module")
def server():
    with serve_mcp(("get_status", "bump", "wipe", "explode", "refuse")) as running:
        yield running


@pytest.fixture(scope="module")
def guarded():
    with serve_mcp(token=TOKEN, json_response=True) as running:
        yield running


def _list(url: str, token: str | None = None, **kwargs) -> dict[str, mcp_client.McpTool]:
    return {tool.name: tool for tool in mcp_client.list_tools(url, token, allow_loopback=True, **kwargs)}


def _call(url: str, name: str, arguments: dict, token: str | None = None, **kwargs) -> McpResult:
    return mcp_client.call_tool(url, token, name, arguments, allow_loopback=True, **kwargs)


def test_list_tools_returns_annotations_and_schemas():
    with serve_mcp() as plain:
        tools = _list(plain.url)
    assert sorted(tools) == ["bump", "get_status", "wipe"]
    status = tools["get_status"]
    assert status.annotations == {"readOnlyHint": True}
    assert status.description == "The status of a support ticket."
    assert status.input_schema["properties"]["ticket"]["type"] == "string"
    assert status.input_schema["required"] == ["ticket"]
    assert tools["bump"].annotations == {}
    assert tools["bump"].input_schema["properties"]["n"]["type"] == "integer"
    assert tools["wipe"].annotations == {"destructiveHint": True}


def test_list_tools_follows_pagination_cursors():
    with serve_mcp(("get_status", "bump", "wipe", "explode", "refuse"), page_size=2) as paged:
        names = [tool.name for tool in mcp_client.list_tools(paged.url, None, allow_loopback=True)]
    assert names == ["get_status", "bump", "wipe", "explode", "refuse"]


def test_list_tools_sees_a_changed_input_schema():
    with serve_mcp() as plain:
        before = _list(plain.url)["get_status"].input_schema
        plain.reshape_get_status()
        after = _list(plain.url)["get_status"]
    assert "verbose" not in before["properties"]
    assert after.input_schema["properties"]["verbose"]["type"] == "boolean"
    assert after.annotations == {"readOnlyHint": True}


def test_call_tool_returns_text_and_structured_content(server):
    server.status = "waiting on customer"
    result = _call(server.url, "get_status", {"ticket": "T-7"})
    assert result.is_error is False
    assert result.structured == {"ticket": "T-7", "status": "waiting on customer"}
    assert '"waiting on customer"' in result.text


def test_call_tool_counts_calls_per_tool(server):
    before = server.calls["bump"]
    first = _call(server.url, "bump", {"n": 2})
    second = _call(server.url, "bump", {"n": 3})
    assert second.structured == {"result": first.structured["result"] + 3}
    assert second.text == str(second.structured["result"])
    assert server.calls["bump"] == before + 2


def test_call_tool_that_raises_is_an_error_result(server):
    result = _call(server.url, "explode", {"reason": "maintenance"})
    assert result.is_error is True
    assert "the ticket system is down: maintenance" in result.text
    assert result.structured is None


def test_call_tool_protocol_error_is_mcp_error(server):
    with pytest.raises(McpError) as caught:
        _call(server.url, "refuse", {})
    assert caught.value.kind == "protocol"
    assert "refuse does not take calls today" in caught.value.message


def test_call_tool_with_the_right_bearer_token(guarded):
    guarded.status = "closed"
    result = _call(guarded.url, "get_status", {"ticket": "T-1"}, token=TOKEN)
    assert result.structured == {"ticket": "T-1", "status": "closed"}


@pytest.mark.parametrize("token", ["wrong-token-77ab", None])
def test_wrong_or_missing_bearer_token_is_an_auth_error(guarded, token):
    before = sum(guarded.calls.values())
    with pytest.raises(McpError) as caught:
        _list(guarded.url, token)
    assert caught.value.kind == "auth"
    assert "401" in caught.value.message
    assert "wrong-token-77ab" not in caught.value.message and TOKEN not in caught.value.message
    assert sum(guarded.calls.values()) == before


def test_closed_port_could_not_connect():
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    with pytest.raises(McpError) as caught:
        _list(f"http://127.0.0.1:{port}/mcp")
    assert caught.value.kind == "unreachable" and caught.value.unreachable
    assert caught.value.message.startswith(f"Could not connect to the MCP server at 127.0.0.1:{port}")


def test_plain_web_server_did_not_answer_as_mcp(pages):
    url = pages.set("/mcp", "<html><body>Not an MCP server</body></html>")
    with pytest.raises(McpError) as caught:
        _list(url)
    assert caught.value.kind == "not_mcp"
    assert "did not answer as an MCP server" in caught.value.message


def test_silent_server_times_out():
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts into the backlog, never answers
        with pytest.raises(McpError) as caught:
            _list(f"http://127.0.0.1:{silent.getsockname()[1]}/mcp", timeout=0.5)
    assert caught.value.kind == "timeout"
    assert "did not answer within 0.5 seconds" in caught.value.message


def test_ssrf_guard_refuses_loopback(server):
    before = sum(server.calls.values())
    for url in (server.url, server.url.replace("127.0.0.1", "localhost")):
        with pytest.raises(McpError) as caught:
            mcp_client.call_tool(url, TOKEN, "bump", {"n": 1}, allow_loopback=False)
        assert caught.value.kind == "blocked"
        assert "loopback" in caught.value.message and TOKEN not in caught.value.message
    assert sum(server.calls.values()) == before


def test_unusable_url_is_refused_before_any_connection():
    with pytest.raises(McpError) as caught:
        mcp_client.list_tools("file:///etc/passwd", None)
    assert caught.value.kind == "blocked"
    assert "http://" in caught.value.message


def test_oversized_answer_is_cut_off(server, monkeypatch):
    monkeypatch.setattr(mcp_client, "MAX_RESPONSE_BYTES", 1024)  # the tool listing alone is larger
    with pytest.raises(McpError) as caught:
        _list(server.url)
    assert caught.value.kind == "protocol"
    assert "Vigil stopped reading" in caught.value.message
