"""Input the fuzzer found breaking the API, each pinned: a clear 4xx that says what to fix, and nothing stored.

PostgreSQL text can't hold NUL (U+0000); before these fixes such a character anywhere in a tool call, or in a
conversation id in a URL, reached the database and came back as a 500.
"""

from __future__ import annotations

import pytest

from models.tables import Conversation, Monitor
from tests.integration.helpers import db, tool

NUL = "\x00"


def counts() -> tuple[int, int]:
    with db():
        return Conversation.select().count(), Monitor.select().count()


@pytest.mark.parametrize("context, arguments", [
    ({"conversation_id": f"conv{NUL}1"}, {}),
    ({"conversation_id": "conv-1", "channel": f"chat{NUL}"}, {}),
    ({"conversation_id": "conv-1", "agent_id": f"agent{NUL}"}, {}),
    ({"conversation_id": "conv-1"}, {"description": f"price{NUL}", "source": {"type": "webhook"}}),
    ({"conversation_id": "conv-1"}, {"description": "price", "source": {"type": "webhook"}, f"x{NUL}": 1}),
])
@pytest.mark.parametrize("action", ["monitor_create", "monitor_list"])
def test_tool_call_with_nul_is_400_and_stores_nothing(client, owner, context, arguments, action):
    response = client.post("/api/tool/monitor", headers={"Authorization": f"Bearer {owner[1]}"},
                           json={"action": action, "arguments": arguments, "context": context})
    assert response.status_code == 400, response.text
    assert "NUL" in response.json()["detail"]
    assert counts() == (0, 0)


def test_tool_call_without_nul_still_works(client, owner):
    body = tool(client, owner[1], "monitor_create", {"description": "deploys", "source": {"type": "webhook"}}).json()
    assert body["ok"] is True and counts() == (1, 1)


def test_conversation_id_with_nul_in_urls_finds_nothing(client, owner):
    headers = {"Authorization": f"Bearer {owner[1]}"}
    tool(client, owner[1], "monitor_create", {"description": "deploys", "source": {"type": "webhook"}})
    listed = client.get("/api/monitors", params={"conversation_id": f"conv-1{NUL}"}, headers=headers)
    assert listed.status_code == 200 and listed.json() == {"monitors": []}
    messages = client.get("/api/conversations/conv-1%00/messages", headers=headers)
    assert messages.status_code == 404 and "No conversation" in messages.json()["detail"]
    assert len(client.get("/api/monitors", params={"conversation_id": "conv-1"}, headers=headers).json()["monitors"]) == 1


def test_approval_json_twin_refuses_our_own_fetchers_in_json(client, owner):
    """The JSON API answers every refusal in JSON (it sent our own fetchers text/plain, against its schema)."""
    result = tool(client, owner[1], "monitor_create", {"description": "ok?", "source": {
        "type": "approval", "question": "Ship it?"}}).json()["result"]
    api = "/api/approvals/" + result["approval_url"].rsplit("/", 1)[1]
    ours = {"User-Agent": "Vigil/0.1 (+monitor)"}
    for response in (client.get(api, headers=ours), client.post(api, json={"decision": "Approve"}, headers=ours)):
        assert response.status_code == 403
        assert response.json() == {"detail": "Vigil's own clients can't open approval links."}
    assert client.get(api).status_code == 200


@pytest.mark.parametrize("cursor", ["³", "²⁰", "٣", "1³"])
@pytest.mark.parametrize("path", ["/api/wakes", "/api/conversations/conv-1/messages"])
def test_a_cursor_of_non_ascii_digits_is_400_not_500(client, owner, path, cursor):
    """The fuzzer's find: "³" is a digit to str.isdigit() but not to int(), and answered 500."""
    tool(client, owner[1], "monitor_list", {})  # the conversation exists, so the cursor is what is checked
    response = client.get(path, params={"after": cursor}, headers={"Authorization": f"Bearer {owner[1]}"})
    assert response.status_code == 400, response.text
    assert "after must be a cursor" in response.json()["detail"]
