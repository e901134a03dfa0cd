"""What a penetration test sent that answered 500 or answered before asking who was calling: JSON nested past 64
levels, ids past any row's, durations and numbers past any clock's, URL forms that no parser agrees on, and API
calls without a credential. Each gets a clear answer and changes nothing."""

from __future__ import annotations

import pytest

from models.tables import Monitor, TriggerLink
from tests.integration.helpers import db, tool

DEEP = "[" * 1000 + "]" * 1000


def nested(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


@pytest.mark.parametrize("path", ["/api/tool/monitor", "/api/runner/pair", "/api/approvals/not-a-real-token",
                                  "/api/triggers/not-a-real-token", "/mcp", "/api/tokens"])
def test_json_nested_deeper_than_64_is_400_before_parsing(client, owner, path):
    answer = client.post(path, content=DEEP, headers={"Content-Type": "application/json",
                                                      "Authorization": f"Bearer {owner[1]}"})
    assert answer.status_code == 400, answer.text
    assert "nested deeper than 64" in answer.json()["detail"]


def test_json_nested_64_deep_is_parsed_and_answered_on_its_merits(client, owner):
    answer = client.post("/api/tool/monitor", content=nested(64), headers={"Content-Type": "application/json",
                                                                            "Authorization": f"Bearer {owner[1]}"})
    assert answer.status_code != 500 and "nested deeper" not in answer.text


def test_brackets_inside_strings_do_not_count_as_nesting(client, owner):
    args = {"description": "[" * 500, "source": {"type": "webhook", "signature": "none"}}
    body = tool(client, owner[1], "monitor_create", args).json()
    assert body["ok"] is True, body


@pytest.mark.parametrize("path", ["/api/tokens/99999999999999999999999", "/api/tokens/9223372036854775808",
                                  "/api/wake-endpoints/99999999999999999999/rotate",
                                  "/api/wake-endpoints/2147483648/enable", "/api/devices/99999999999999999999/revoke"])
def test_ids_past_any_row_are_404(client, owner, path):
    answer = client.post(path, headers={"Authorization": f"Bearer {owner[1]}"}) if path.count("/") > 3 \
        else client.delete(path, headers={"Authorization": f"Bearer {owner[1]}"})
    assert answer.status_code == 404, answer.text


def test_wake_endpoint_attempts_with_a_huge_id_is_404(client, owner):
    answer = client.get("/api/wake-endpoints/99999999999999999999/attempts",
                        headers={"Authorization": f"Bearer {owner[1]}"})
    assert answer.status_code == 404, answer.text


@pytest.mark.parametrize("name", ["interval", "expires_in"])
def test_huge_durations_are_capped_with_a_note(client, owner, pages, name):
    url = pages.set_json("/x.json", '{"price": 5}')
    args = {"description": "d", "source": {"type": "json", "url": url}, name: "99999999999999999d"}
    body = tool(client, owner[1], "monitor_create", args).json()
    assert body["ok"] is True and any(name in note for note in body["result"]["notes"]), body


@pytest.mark.parametrize("number", ["1e400", "-1e400", "1E999"])
def test_numbers_past_a_double_are_refused_with_a_sentence(client, owner, pages, number):
    url = pages.set_json("/x.json", '{"price": 5}')
    raw = ('{"action": "monitor_create", "context": {"conversation_id": "c1"}, "arguments": {"description": "d", '
           f'"source": {{"type": "json", "url": "{url}"}}, "check": {{"type": "threshold", "op": "below", '
           f'"value": {number}}}}}}}')
    answer = client.post("/api/tool/monitor", content=raw, headers={"Content-Type": "application/json",
                                                                     "Authorization": f"Bearer {owner[1]}"})
    assert answer.status_code == 400 and "Number out of range" in answer.json()["detail"], answer.text
    with db():
        assert Monitor.select().count() == 0


@pytest.mark.parametrize("number", [float("inf"), float("-inf"), float("nan")])
def test_a_parsed_infinity_is_refused_by_name_whatever_parsed_it(number):
    """The MCP SDK and seed 001's path parse with Python's json, which reads 1e400 as infinity."""
    from engine.spec import Limits, SpecError, parse_create

    arguments = {"description": "d", "source": {"type": "webhook"},
                 "check": {"type": "threshold", "op": "below", "value": number}}
    with pytest.raises(SpecError, match=r"check\.value is not a finite number"):
        parse_create(arguments, Limits())


@pytest.mark.parametrize("source,words", [({"type": "time", "delay": "99999999999999999d"}, "source.delay"),
                                          ({"type": "time", "fire_at": "9999-12-31T23:59:59.5Z"}, "source.fire_at")])
def test_a_huge_time_watch_delay_is_refused_with_a_sentence(client, owner, source, words):
    body = tool(client, owner[1], "monitor_create", {"description": "later", "source": source}).json()
    assert body["ok"] is False and words in body["error"], body
    seed001 = client.post("/api/actions/monitors/create", headers={"Authorization": f"Bearer {owner[1]}"},
                          json={"conversationId": "c1", "watchType": "time", "delayMinutes": 10**17})
    assert seed001.status_code == 400 and "delay" in seed001.text.lower(), seed001.text
    with db():
        assert Monitor.select().count() == 0


@pytest.mark.parametrize("url", ["http://0177.0.0.1/", "http://0x7f.1/", "http://[::ffff:127.0.0.1]:99999/",
                                 "http://%zz/", "http://exa mple.com/", "http://2130706433/"])
def test_odd_url_forms_for_an_mcp_connection_get_a_clear_error(client, owner, url):
    answer = client.post("/api/connections", headers={"Authorization": f"Bearer {owner[1]}"},
                         json={"name": "tools", "url": url})
    assert 400 <= answer.status_code < 500, answer.text
    assert answer.json()["detail"]


@pytest.mark.parametrize("method,path", [("post", "/api/tool/monitor"), ("get", "/api/wakes?limit=0"),
                                         ("post", "/api/tokens"), ("post", "/api/wake-endpoints"),
                                         ("get", "/api/conversations/c/messages?limit=-4"),
                                         ("put", "/api/documents/job/1"), ("post", "/api/connections")])
def test_no_credential_is_401_before_the_body_is_checked(client, method, path):
    answer = getattr(client, method)(path, **({} if method == "get" else {"json": {}}))
    assert answer.status_code == 401, answer.text
    assert answer.headers["www-authenticate"] == "Bearer"


def test_open_paths_still_answer_without_a_token(client, owner):
    created = tool(client, owner[1], "monitor_create", {"description": "hook",
                                                         "source": {"type": "webhook", "signature": "none"}}).json()
    link = created["result"]["url"][created["result"]["url"].index("/api/triggers/"):]
    assert client.post(link, json={"a": 1}).status_code == 202
    assert client.get("/api/tool/schema?format=openai").status_code == 200
    with db():
        assert TriggerLink.select().count() == 1


@pytest.mark.parametrize("method,path", [("get", "/login"), ("get", "/no/such/page"), ("delete", "/login"),
                                         ("post", "/api/tool/monitor"), ("get", "/static/vigil.js")])
def test_every_answer_carries_the_page_security_headers(client, method, path):
    """Pages, the router's own 404 and 405, the gate's 401 and static files alike."""
    answer = getattr(client, method)(path)
    assert "frame-ancestors 'none'" in answer.headers["content-security-policy"], (answer.status_code, path)
    assert answer.headers["x-frame-options"] == "DENY" and answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["referrer-policy"] == "no-referrer"
