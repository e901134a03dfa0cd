"""POST /api/tool/monitor: what an agent runtime gets back, and that bad calls change nothing."""

from __future__ import annotations

import json

import pytest

from models import utcnow
from models.devices import add_device
from models.tables import Conversation, Device, Monitor, MonitorRun
from tests.integration.helpers import db, tool
from tool_schema import load

QUOTE = "<html><body><h1>ACMEB</h1><p id='price'>Price: $95.10</p><p>Volume 1,200</p></body></html>"


def create_args(url: str, **extra) -> dict:
    return {"description": "ACMEB drops below $90", "source": {"type": "page", "url": url, "selector": "#price"},
            "check": {"type": "threshold", "op": "below", "value": 90}, **extra}


def count_monitors() -> int:
    with db():
        return Monitor.select().count()


def test_create_returns_baseline_and_schedule(client, owner, pages):
    url = pages.set("/quote", QUOTE)
    body = tool(client, owner[1], "monitor_create", create_args(url, interval="20m")).json()
    assert body["ok"] is True, body
    result = body["result"]
    assert result["baseline"] == "currently 95.10"
    assert result["status"] == "active" and result["wakes_left"] == 1 and result["notes"] == []
    assert result["next_check_at"].endswith("Z") and result["expires_at"].endswith("Z")
    with db():
        monitor = Monitor.get_by_id(result["monitor_id"])
        assert monitor.interval_seconds == 1200
        assert monitor.conversation.external_id == "conv-1" and monitor.user_id == owner[0].id
        [run] = MonitorRun.select()
        assert run.kind == "baseline" and run.detail == "currently 95.10" and run.check_count == 1


def test_create_clamps_with_notes(client, owner, pages, reconfigure):
    settings = reconfigure(MONITOR_MIN_INTERVAL_SECONDS=300)
    url = pages.set("/quote", QUOTE)
    args = create_args(url, interval="1m", expires_in="400d", max_wakes=500)
    result = tool(client, owner[1], "monitor_create", args).json()["result"]
    notes = " ".join(result["notes"])
    assert "interval was raised" in notes and "expires_in was capped" in notes and "max_wakes was capped" in notes
    assert result["wakes_left"] == settings.MONITOR_MAX_WAKES


def test_create_json_source_reads_value_path(client, owner, pages):
    url = pages.set_json("/run.json", json.dumps({"jobs": [{"remaining": 3}], "name": "ci"}))
    args = {"description": "CI done", "source": {"type": "json", "url": url},
            "check": {"type": "threshold", "value_path": "data.jobs[0].remaining", "op": "==", "value": 0}}
    body = tool(client, owner[1], "monitor_create", args).json()
    assert body == {"ok": True, "result": body["result"]} and body["result"]["baseline"] == "currently 3"


@pytest.mark.parametrize("arguments, fix", [
    ({"description": "x", "source": {"type": "page"}}, "source.url is required"),
    ({"description": "x", "source": {"type": "page", "url": "ftp://example.com/a"}}, "http:// or https://"),
    ({"description": "x", "source": {"type": "page", "url": "URL"}, "check": {"type": "x"}}, "source.url"),
    ({"description": "x", "source": {"type": "page", "url": "{url}"}, "check": {"type": "sparkle"}}, "check.type"),
    ({"description": "x", "source": {"type": "page", "url": "{url}"},
      "check": {"type": "threshold", "op": "roughly", "value": 1}}, "check.op"),
    ({"description": "x", "source": {"type": "page", "url": "{url}"},
      "check": {"type": "threshold", "op": "<", "value": "ninety"}}, "check.value must be a number"),
    ({"description": "x", "source": {"type": "page", "url": "{url}"}, "interval": "whenever"}, "interval must look"),
    ({"source": {"type": "page", "url": "{url}"}}, "description is required"),
    ({"description": "x"}, "source is required"),
])
def test_create_bad_argument_says_what_to_fix_and_creates_nothing(client, owner, pages, arguments, fix):
    url = pages.set("/quote", QUOTE)
    arguments = json.loads(json.dumps(arguments).replace("{url}", url))
    response = tool(client, owner[1], "monitor_create", arguments)
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is False and fix in body["error"], body
    assert body["error"].endswith(".")
    assert count_monitors() == 0
    assert pages.hits.get("/quote", 0) == 0


@pytest.mark.parametrize("url", [
    "http://169.254.169.254/latest/meta-data/",
    "http://10.0.0.1/",
    "http://[::1]:{port}/quote",
    "http://2130706433:{port}/quote",
    "http://localhost:{port}/quote",
])
def test_create_refuses_non_public_addresses(client, owner, pages, reconfigure, url):
    reconfigure(FETCH_ALLOW_LOOPBACK=False)
    pages.set("/quote", QUOTE)
    port = pages.base.rsplit(":", 1)[1]
    body = tool(client, owner[1], "monitor_create", create_args(url.replace("{port}", port))).json()
    assert body["ok"] is False and "no monitor was created" in body["error"]
    assert count_monitors() == 0 and pages.hits.get("/quote", 0) == 0


@pytest.mark.parametrize("channel", ["v1_api", "api_key", "widget", "shared_link", "workflow", "scheduled",
                                     "continuation"])
def test_create_refused_where_a_wake_cannot_arrive(client, owner, pages, channel):
    url = pages.set("/quote", QUOTE)
    body = tool(client, owner[1], "monitor_create", create_args(url), channel=channel).json()
    assert body["ok"] is False and "can't be created" in body["error"]
    assert count_monitors() == 0 and pages.hits.get("/quote", 0) == 0


def test_create_unreachable_source_creates_nothing(client, owner, pages):
    body = tool(client, owner[1], "monitor_create", create_args(pages.url("/missing"))).json()
    assert body["ok"] is False and "404" in body["error"]
    assert count_monitors() == 0


def test_selector_matching_nothing_creates_nothing(client, owner, pages):
    url = pages.set("/quote", QUOTE)
    args = create_args(url)
    args["source"]["selector"] = "#no-such-part"
    body = tool(client, owner[1], "monitor_create", args).json()
    assert body["ok"] is False and "#no-such-part" in body["error"]
    assert count_monitors() == 0


def test_missing_or_unknown_token_is_401(client, pages):
    url = pages.set("/quote", QUOTE)
    body = {"action": "monitor_create", "arguments": create_args(url), "context": {"conversation_id": "c"}}
    assert client.post("/api/tool/monitor", json=body).status_code == 401
    headers = {"Authorization": "Bearer vgl_not-a-real-token"}
    assert client.post("/api/tool/monitor", json=body, headers=headers).status_code == 401
    assert count_monitors() == 0


@pytest.mark.parametrize("body", [
    [],
    {"action": "monitor_explode", "arguments": {}, "context": {"conversation_id": "c"}},
    {"action": "monitor_list", "arguments": [], "context": {"conversation_id": "c"}},
    {"action": "monitor_list", "arguments": {}},
    {"action": "monitor_list", "arguments": {}, "context": {"conversation_id": ""}},
    {"action": "monitor_list", "arguments": {}, "context": {"conversation_id": "c", "channel": 7}},
])
def test_body_of_wrong_shape_is_400(client, owner, body):
    response = client.post("/api/tool/monitor", json=body, headers={"Authorization": f"Bearer {owner[1]}"})
    assert response.status_code == 400
    with db():
        assert Conversation.select().count() == 0


def test_body_not_json_is_400(client, owner):
    response = client.post("/api/tool/monitor", content=b"{not json", headers={
        "Authorization": f"Bearer {owner[1]}", "Content-Type": "application/json"})
    assert response.status_code == 400


def test_conversation_id_is_per_account(client, owner, stranger, pages):
    """Two accounts' runtimes may both name a conversation conv-1; each sees only its own."""
    url = pages.set("/quote", QUOTE)
    mine = tool(client, owner[1], "monitor_create", create_args(url)).json()["result"]["monitor_id"]
    assert tool(client, stranger[1], "monitor_list").json() == {"ok": True, "result": {"monitors": []}}
    refused = tool(client, stranger[1], "monitor_cancel", {"monitor_id": mine}).json()
    assert refused["ok"] is False and "no monitor" in refused["error"]
    theirs = tool(client, stranger[1], "monitor_create", create_args(url)).json()["result"]["monitor_id"]
    assert [m["monitor_id"] for m in tool(client, owner[1], "monitor_list").json()["result"]["monitors"]] == [mine]
    assert [m["monitor_id"] for m in tool(client, stranger[1], "monitor_list").json()["result"]["monitors"]] == [theirs]
    with db():
        conversations = {(c.user_id, c.external_id) for c in Conversation.select()}
        assert conversations == {(owner[0].id, "conv-1"), (stranger[0].id, "conv-1")}
        assert Monitor.get_by_id(mine).status == "active"
    messages = client.get("/api/conversations/conv-1/messages?after=0",
                          headers={"Authorization": f"Bearer {stranger[1]}"})
    assert messages.status_code == 200


def test_list_and_cancel_act_on_this_conversation_only(client, owner, pages):
    url = pages.set("/quote", QUOTE)
    first = tool(client, owner[1], "monitor_create", create_args(url)).json()["result"]["monitor_id"]
    other = tool(client, owner[1], "monitor_create", create_args(url), conversation="conv-2").json()
    listed = tool(client, owner[1], "monitor_list").json()["result"]["monitors"]
    assert [m["monitor_id"] for m in listed] == [first]
    refused = tool(client, owner[1], "monitor_cancel", {"monitor_id": other["result"]["monitor_id"]}).json()
    assert refused["ok"] is False and "monitor_list" in refused["error"]
    done = tool(client, owner[1], "monitor_cancel", {"monitor_id": first}).json()
    assert done == {"ok": True, "result": {"monitor_id": first, "status": "cancelled"}}
    again = tool(client, owner[1], "monitor_cancel", {"monitor_id": first}).json()
    assert again["ok"] is True and again["result"]["status"] == "cancelled", again
    assert "cancelled already" in again["result"]["note"]
    with db():
        assert Monitor.get_by_id(other["result"]["monitor_id"]).status == "active"


def test_schema_examples_are_accepted(client, owner, pages):
    pages.set("/quote.html", QUOTE)
    pages.set_json("/run.json", json.dumps({"jobs": [{"remaining": 2}]}))
    pages.set("/notes.html", "<h1>Notes</h1><p>v1.0</p>")
    pages.set("/releases.xml", "<?xml version='1.0'?><rss version='2.0'><channel><title>r</title>"
              "<item><title>v1.0</title><link>https://example.com/v1.0</link><guid>v1.0</guid></item>"
              "</channel></rss>", "application/rss+xml")
    with db():  # the command examples run on a paired device named laptop, one that needs no approval
        device, _ = add_device(owner[0], "laptop", utcnow())
        Device.update(approval_mode="full").where(Device.id == device.id).execute()
    for n, example in enumerate(load()["examples"]):
        arguments = json.loads(json.dumps(example["arguments"]).replace("{base}", pages.base))
        body = tool(client, owner[1], example["action"], arguments, conversation=f"example-{n}").json()
        assert body["ok"] is True, (example, body)


def test_monitor_cancel_of_an_ended_monitor_is_ok_with_a_note_and_changes_nothing(client, owner, drain):
    created = tool(client, owner[1], "monitor_create", {"description": "the job calls back",
                                                        "source": {"type": "webhook"}}).json()["result"]
    url = created["url"]
    fired = client.post(url[url.index("/api/triggers/"):], json={"fact": "done"}, headers={"Idempotency-Key": "k1"})
    assert fired.status_code == 202, fired.text
    drain()
    with db():
        assert Monitor.get_by_id(created["monitor_id"]).status == "done"
    answer = tool(client, owner[1], "monitor_cancel", {"monitor_id": created["monitor_id"]}).json()
    assert answer["ok"] is True and answer["result"]["status"] == "done", answer
    assert "had ended already (done)" in answer["result"]["note"]
    with db():
        assert Monitor.get_by_id(created["monitor_id"]).status == "done"
    unknown = tool(client, owner[1], "monitor_cancel", {"monitor_id": "no-such-monitor"}).json()
    assert unknown["ok"] is False and "There is no monitor 'no-such-monitor'" in unknown["error"]


def test_monitor_list_gives_the_fields_that_are_set_and_verbose_the_full_record(client, owner, pages):
    url = pages.set("/quote", QUOTE)
    monitor_id = tool(client, owner[1], "monitor_create", create_args(url)).json()["result"]["monitor_id"]
    [short] = tool(client, owner[1], "monitor_list").json()["result"]["monitors"]
    assert short["source"] == {"type": "page", "url": url, "selector": "#price"}
    assert short["check"] == {"type": "threshold", "op": "<", "value": 90}  # as stored
    assert (short["monitor_id"], short["status"], short["conversation_id"]) == (monitor_id, "active", "conv-1")
    assert short["description"] == "ACMEB drops below $90" and short["wakes_left"] == 1
    assert short["next_check_at"] and short["expires_at"] and short["interval_seconds"] > 0
    assert "last_error" not in short and "condition" not in short and "baseline" not in short
    [full] = tool(client, owner[1], "monitor_list", {"verbose": True}).json()["result"]["monitors"]
    assert full["source"]["path"] is None and full["source"]["metric"] is None  # every field, set or not
    assert full["baseline"] and full["lineage"] == {"depth": 0, "woken_by": None} and full["last_error"] is None
    assert len(json.dumps(short)) * 2 < len(json.dumps(full))
    bad = tool(client, owner[1], "monitor_list", {"verbose": "yes"}).json()
    assert bad["ok"] is False and "verbose must be true" in bad["error"]
