"""Tool sources end to end: a runtime registers its agent's declared HTTP tool (PUT /api/agents/{agent}/tools/{name}),
an agent watches it (monitor_create with a tool source, or seed 001's agent_tool), and the scheduler re-runs it
headless against real servers on 127.0.0.1. What the owner relies on: the condition over the tool's output fires once
with the note; the tool's credential never leaves the registry; a 4xx is data, a tool that can't run ends after three
strikes; an edit or a removal ends the watch; the limits, the owner's switch and the approval card hold."""

from __future__ import annotations

import hashlib
import json
import logging
import socket
import threading
from contextlib import contextmanager
from datetime import timedelta

import pytest
import redis

from models import ALL_TABLES, utcnow
from models.tables import AgentTool, Monitor
from tests.conftest import TEST_DATABASE_URL, TEST_REDIS_URL
from tests.httpd import Handler, _Server, serve
from tests.integration.helpers import db, login, monitor_row, tool, wakes

AGENT = "agent-1"
SECRET = "Bearer sk-test-SECRET"
SECRET_PART = "sk-test-SECRET"
JSON = (("Content-Type", "application/json"),)
#: robust over a 4xx answer: the verdict is computed by the tool, so the condition is just data.reached == true
MAIN = ("steps[0].status == 200 ? {'reached': steps[0].body.status == 'delivered', 'status': steps[0].body.status, "
        "'carrier': steps[1].body.name} : {'reached': false, 'status': 'unavailable', 'carrier': ''}")


# --- helpers ----------------------------------------------------------------------------------------------------

def auth(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


class Orders(Handler):
    """A JSON API of orders that wants the tool's credential: GET /orders/<id> (set by the test), GET /carrier."""

    orders: dict = {}
    credentials: list = []

    def route_orders(self, order: str) -> None:
        self.credentials.append(self.headers.get("Authorization"))
        if self.headers.get("Authorization") != SECRET:
            return self.send(401, b'{"error": "unauthorized"}', JSON)
        if order not in self.orders:
            return self.send(404, b'{"error": "no such order"}', JSON)
        self.send(200, json.dumps(self.orders[order]).encode(), JSON)

    def route_carrier(self, _: str) -> None:
        self.send(200, b'{"name": "PostNL"}', JSON)


@pytest.fixture()
def api():
    """A fresh Orders API per test: `api.orders` and `api.credentials` are its own."""
    handler = type("TestOrders", (Orders,), {"orders": {}, "credentials": []})
    with serve(handler) as base:
        handler.base = base
        yield handler


def order_tool(base: str, main: str = MAIN, **changes) -> dict:
    """The two-step declared tool: the order (with its credential), then the carrier."""
    return {"description": "Whether an order was delivered",
            "parameters": {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]},
            "steps": [{"kind": "http", "method": "GET", "url": base + "/orders/{{args.order}}",
                       "headers": {"Authorization": SECRET}},
                      {"kind": "http", "method": "GET", "url": base + "/carrier/"}],
            "output": {"main": main}, **changes}


def put_tool(client, token: str, body: dict, name: str = "order_status", agent: str = AGENT):
    return client.put(f"/api/agents/{agent}/tools/{name}", headers=auth(token), json=body)


def registered(client, token: str, body: dict, name: str = "order_status") -> dict:
    answer = put_tool(client, token, body, name)
    assert answer.status_code in (200, 201), answer.text
    return answer.json()


def watch_args(tool_name: str = "order_status", arguments: dict | None = None,
               expr: str = "data.reached == true", **extra) -> dict:
    return {"description": "order A-1 is delivered",
            "source": {"type": "tool", "tool": tool_name, "arguments": {"order": "A-1"} if arguments is None
                       else arguments},
            "check": {"type": "cel", "expr": expr}, **extra}


def watched(client, token: str, conversation: str = "conv-1", **args) -> dict:
    body = tool(client, token, "monitor_create", watch_args(**args), conversation=conversation).json()
    assert body["ok"] is True, body
    return body["result"]


def refused(client, token: str, **args) -> str:
    body = tool(client, token, "monitor_create", watch_args(**args)).json()
    assert body["ok"] is False and set(body) == {"ok", "error"}, body
    return body["error"]


def monitor_count() -> int:
    with db():
        return Monitor.select().count()


# --- a watch fires once, on the poll where the tool's output holds -----------------------------------------------

def test_tool_watch_first_poll_false_then_fires_once_with_the_note_and_the_output(client, owner, api, run_due_checks):
    api.orders["A-1"] = {"status": "in transit"}
    answer = put_tool(client, owner[1], order_tool(api.base))
    assert answer.status_code == 201 and answer.json()["watches_ended"] == 0
    result = watched(client, owner[1], note="Tell the user their parcel arrived and who delivered it.")
    assert result["status"] == "active" and result["tool"] == "order_status" and result["agent_id"] == AGENT
    assert result["arguments"] == {"order": "A-1"} and result["interval_seconds"] == 900
    assert any("first poll runs now" in note for note in result["notes"])
    monitor_id = result["monitor_id"]

    assert run_due_checks(1) == 1, "the first poll is due at once"
    assert api.credentials == [SECRET], "the step ran once, with its credential"
    monitor = monitor_row(monitor_id)
    assert monitor.status == "active" and monitor.last_error == "" and wakes(monitor_id) == []

    api.orders["A-1"] = {"status": "delivered"}
    assert run_due_checks() == 1
    [wake] = wakes(monitor_id)
    assert "Tell the user their parcel arrived and who delivered it." in wake.content
    assert "order_status(order='A-1')" in wake.content
    assert '"carrier": "PostNL"' in wake.content and '"status": "delivered"' in wake.content
    assert monitor_row(monitor_id).status == "done"

    assert run_due_checks() == 0 and len(api.credentials) == 2, "a fired watch polls no more"
    assert len(wakes(monitor_id)) == 1


def test_tool_watch_does_not_fire_again_while_the_output_stays_true(client, owner, api, run_due_checks):
    """Edge-triggered: an output that already holds fires on the first poll, then not again until it drops."""
    api.orders["A-1"] = {"status": "delivered"}
    registered(client, owner[1], order_tool(api.base))
    monitor_id = watched(client, owner[1], max_wakes=3)["monitor_id"]
    run_due_checks()
    assert len(wakes(monitor_id)) == 1, "a condition that holds on the first poll wakes then"
    run_due_checks()
    run_due_checks()
    assert len(wakes(monitor_id)) == 1 and len(api.credentials) == 3
    api.orders["A-1"] = {"status": "returned"}
    run_due_checks()
    api.orders["A-1"] = {"status": "delivered"}
    run_due_checks()
    assert len(wakes(monitor_id)) == 2


# --- the credential stays in the registry --------------------------------------------------------------------------

def test_a_header_value_never_appears_in_answers_wakes_rows_events_or_logs(client, owner, api, run_due_checks,
                                                                           caplog):
    caplog.set_level(logging.DEBUG)
    listener = redis.Redis.from_url(TEST_REDIS_URL).pubsub(ignore_subscribe_messages=True)
    # this Vigil's channels only: pub/sub is server-wide, and other Vigils (an e2e run, a bench) may share it
    listener.psubscribe(f"vigil:{hashlib.sha256(TEST_DATABASE_URL.encode()).hexdigest()[:12]}:*")
    listener.get_message(timeout=1)  # the subscription's confirmation
    answers = []

    api.orders["A-1"] = {"status": "in transit"}
    answer = put_tool(client, owner[1], order_tool(api.base))
    answers.append(answer.text)
    assert answer.json()["steps"][0]["headers"] == {"Authorization": "••••••••"}, "the name shows, masked"
    answers.append(put_tool(client, owner[1], order_tool(api.base, description="Delivered yet?")).text)
    answers.append(client.get(f"/api/agents/{AGENT}/tools", headers=auth(owner[1])).text)
    created = tool(client, owner[1], "monitor_create", watch_args(note="Tell the user."))
    answers.append(created.text)
    monitor_id = created.json()["result"]["monitor_id"]
    run_due_checks()
    api.orders.pop("A-1")  # a 404: the step's answer is data
    run_due_checks()
    api.orders["A-1"] = {"status": "delivered"}
    run_due_checks()
    answers.append(tool(client, owner[1], "monitor_list").text)
    answers.append(client.get("/api/monitors", headers=auth(owner[1])).text)
    answers.append(client.get(f"/api/monitors/{monitor_id}", headers=auth(owner[1])).text)
    login(client)
    answers.append(client.get("/settings/tools").text)
    answers.append(client.get("/settings/monitors").text)
    answers.append(client.get(f"/conversations/{monitor_row(monitor_id).conversation_id}").text)

    events = []
    while (message := listener.get_message(timeout=0.5)) is not None:
        events.append(message["data"].decode() if isinstance(message["data"], bytes) else message["data"])
    listener.close()
    with db() as database:
        rows = [str(row) for model in ALL_TABLES
                for row in database.execute_sql(f"SELECT t::text FROM {model._meta.table_name} t").fetchall()]
        stored = AgentTool.get()

    assert len(wakes(monitor_id)) == 1 and set(api.credentials) == {SECRET}, "the tool ran with its credential"
    assert stored.headers_encrypted and SECRET_PART not in stored.headers_encrypted
    assert events, "the checks published events"
    for where, texts in (("an API answer", answers), ("a wake", [w.content + json.dumps(w.metadata)
                                                                    for w in wakes()]),
                         ("a database row", rows), ("an event", events), ("a log line", [caplog.text])):
        for text in texts:
            assert SECRET_PART not in text, f"the header value leaked into {where}: {text[:300]}"


def test_a_header_value_that_cannot_be_sent_is_never_echoed(client, owner, api, run_due_checks):
    """A credential pasted with its trailing newline (read from a file, say): refused at registration, or failing
    each poll, but its value must not appear in the refusal, the monitor's last_error, an answer or the wake."""
    body = order_tool(api.base)
    body["steps"][0]["headers"] = {"Authorization": SECRET + "\n"}
    answer = put_tool(client, owner[1], body)
    texts = [answer.text]
    if answer.status_code in (200, 201):
        monitor_id = watched(client, owner[1])["monitor_id"]
        for _ in range(3):
            run_due_checks()
        texts += [monitor_row(monitor_id).last_error, client.get("/api/monitors", headers=auth(owner[1])).text,
                  tool(client, owner[1], "monitor_list").text] + [w.content for w in wakes(monitor_id)]
    else:
        assert answer.status_code == 400 and "steps[0].headers" in answer.json()["detail"]
    for text in texts:
        assert SECRET_PART not in text, f"the header value leaked: {text[:400]}"


# --- 4xx is data, a tool that can't run is a strike -----------------------------------------------------------------

def test_a_4xx_step_keeps_polling_and_a_condition_on_steps_can_watch_for_recovery(client, owner, api,
                                                                                   run_due_checks):
    registered(client, owner[1], order_tool(api.base))  # A-1 is not there yet: 404
    monitor_id = watched(client, owner[1], expr="steps[0].status == 200")["monitor_id"]
    for _ in range(4):
        run_due_checks()
    monitor = monitor_row(monitor_id)
    assert monitor.status == "active" and monitor.failure_count == 0 and monitor.last_error == ""
    assert wakes(monitor_id) == [] and len(api.credentials) == 4, "four polls, none a strike"
    api.orders["A-1"] = {"status": "in transit"}
    run_due_checks()
    [wake] = wakes(monitor_id)
    assert "order_status(order='A-1') the condition is now true: steps[0].status == 200" in wake.content
    assert '"status": "in transit"' in wake.content, "the wake carries the tool's output"


def test_output_main_that_fails_three_polls_running_ends_the_watch_in_error(client, owner, api, run_due_checks):
    api.orders["A-1"] = {"status": "in transit"}
    failing = order_tool(api.base, output={"main": "{'reached': steps[0].body.tracking.code == 'X'}"})
    registered(client, owner[1], failing)
    monitor_id = watched(client, owner[1])["monitor_id"]
    run_due_checks()
    run_due_checks()
    monitor = monitor_row(monitor_id)
    assert monitor.status == "active" and monitor.failure_count == 2
    assert "output.main could not be evaluated" in monitor.last_error
    run_due_checks()
    assert monitor_row(monitor_id).status == "error"
    [wake] = wakes(monitor_id)
    assert "Its poll failed 3 times in a row" in wake.content and "output.main" in wake.content


def test_output_main_compares_a_json_double_with_an_integer_argument(client, owner, api, run_due_checks):
    """seed 001's own example: output.main compares the body's price (a double) with the call's integer limit."""
    api.orders["A-1"] = {"status": "in transit", "price": 120.5}
    priced = order_tool(api.base, output={"main": "{'reached': steps[0].body.price < args.limit, "
                                                  "'same': steps[0].body.price != args.limit}"},
                        parameters={"type": "object", "properties": {"order": {"type": "string"},
                                                                     "limit": {"type": "integer"}},
                                    "required": ["order", "limit"]})
    registered(client, owner[1], priced)
    monitor_id = watched(client, owner[1], arguments={"order": "A-1", "limit": 100})["monitor_id"]
    run_due_checks()
    monitor = monitor_row(monitor_id)
    assert monitor.failure_count == 0 and monitor.last_error == "" and wakes(monitor_id) == []
    api.orders["A-1"] = {"status": "in transit", "price": 99.5}
    run_due_checks()
    [wake] = wakes(monitor_id)
    assert '"reached": true' in wake.content and "does not mix types" not in monitor_row(monitor_id).last_error


def test_a_condition_cannot_read_a_steps_payload(client, owner, api, run_due_checks):
    """seed 001: per-step payloads are not exposed; the condition sees what output.main projects, and steps' status."""
    api.orders["A-1"] = {"status": "delivered"}
    registered(client, owner[1], order_tool(api.base))
    monitor_id = watched(client, owner[1], expr="steps[0].body.status == 'delivered'")["monitor_id"]
    run_due_checks()
    monitor = monitor_row(monitor_id)
    assert wakes(monitor_id) == [] and monitor.failure_count == 1 and "body" in monitor.last_error


def test_steps_ok_false_is_usable_in_the_condition(client, owner, api, run_due_checks):
    registered(client, owner[1], order_tool(api.base))
    monitor_id = watched(client, owner[1], expr="steps[0].ok == false && steps[1].ok")["monitor_id"]
    run_due_checks()
    assert len(wakes(monitor_id)) == 1, "the 404 step is ok false, the carrier ok true"


class Jobs(Handler):
    """A job's status; each answer closes its connection, so a stopped server refuses the next poll at once (a
    kept-alive connection would still be answered by its handler thread)."""

    hits = 0

    def route_status(self, _: str) -> None:
        type(self).hits += 1
        self.close_connection = True
        self.send(200, b'{"state": "pending"}', (*JSON, ("Connection", "close")))


@contextmanager
def listening_on(port: int):
    """The Jobs API on a given port of 127.0.0.1 (one a test had stopped)."""
    handler = type("TestJobs", (Jobs,), {"hits": 0})
    server = _Server(("127.0.0.1", port), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield handler
    finally:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def job_tool(port: int) -> dict:
    return {"steps": [{"url": f"http://127.0.0.1:{port}/status/"}],
            "output": {"main": "{'reached': steps[0].body.state == 'done'}"}}


def test_connection_refused_counts_a_strike_and_three_end_it_in_error_with_one_wake(client, owner, run_due_checks):
    port = free_port()
    registered(client, owner[1], job_tool(port), name="job")
    monitor_id = watched(client, owner[1], tool_name="job", arguments={})["monitor_id"]
    with listening_on(port) as server:
        run_due_checks()
    assert server.hits == 1 and monitor_row(monitor_id).failure_count == 0
    run_due_checks()  # stopped: connecting is refused
    run_due_checks()
    monitor = monitor_row(monitor_id)
    assert monitor.status == "active" and monitor.failure_count == 2 and wakes(monitor_id) == []
    assert "No step of the tool 'job' could run" in monitor.last_error
    run_due_checks()
    monitor = monitor_row(monitor_id)
    assert monitor.status == "error"
    [wake] = wakes(monitor_id)
    assert "Its poll failed 3 times in a row" in wake.content and "could run" in wake.content
    assert run_due_checks() == 0 and len(wakes(monitor_id)) == 1
    answer = client.get(f"/api/monitors/{monitor_id}", headers=auth(owner[1])).json()
    assert answer["monitorState"] == "error"


def test_a_poll_that_runs_again_clears_the_strikes(client, owner, run_due_checks):
    """Three *consecutive* failed polls end a watch: a poll that runs in between starts the count again."""
    port = free_port()
    registered(client, owner[1], job_tool(port), name="job")
    monitor_id = watched(client, owner[1], tool_name="job", arguments={})["monitor_id"]
    run_due_checks()
    run_due_checks()
    assert monitor_row(monitor_id).failure_count == 2
    with listening_on(port):
        run_due_checks()
    monitor = monitor_row(monitor_id)
    assert monitor.failure_count == 0 and monitor.status == "active" and monitor.last_error == ""
    run_due_checks()
    run_due_checks()
    monitor = monitor_row(monitor_id)
    assert monitor.status == "active" and monitor.failure_count == 2 and wakes(monitor_id) == []


# --- editing or removing the tool ends its watches -----------------------------------------------------------------

def test_editing_steps_ends_the_watch_at_once_and_a_cosmetic_edit_does_not(client, owner, api, run_due_checks):
    registered(client, owner[1], order_tool(api.base))
    monitor_id = watched(client, owner[1])["monitor_id"]
    run_due_checks()

    cosmetic = registered(client, owner[1], order_tool(api.base, description="Has A-1 arrived?"))
    assert cosmetic["watches_ended"] == 0 and monitor_row(monitor_id).status == "active"
    edited_tool = order_tool(api.base)
    edited_tool["steps"][0]["headers"] = {"Authorization": "Bearer sk-test-ROTATED"}
    assert registered(client, owner[1], edited_tool)["watches_ended"] == 0, "rotating a credential is not an edit"
    assert monitor_row(monitor_id).status == "active" and wakes(monitor_id) == []

    changed = order_tool(api.base)
    changed["steps"][1]["url"] = api.base + "/carrier/v2"
    answer = registered(client, owner[1], changed)
    assert answer["watches_ended"] == 1
    monitor = monitor_row(monitor_id)
    assert monitor.status == "error"
    [wake] = wakes(monitor_id)
    assert "The tool 'order_status' was edited" in wake.content
    assert registered(client, owner[1], order_tool(api.base))["watches_ended"] == 0, "an ended watch ends once"
    polls = len(api.credentials)
    run_due_checks()
    assert len(api.credentials) == polls and len(wakes(monitor_id)) == 1


def test_deleting_the_tool_ends_its_watch(client, owner, api, run_due_checks):
    registered(client, owner[1], order_tool(api.base))
    monitor_id = watched(client, owner[1])["monitor_id"]
    deleted = client.delete(f"/api/agents/{AGENT}/tools/order_status", headers=auth(owner[1]))
    assert deleted.status_code == 204
    assert monitor_row(monitor_id).status == "error"
    [wake] = wakes(monitor_id)
    assert "The tool 'order_status' was removed" in wake.content
    assert client.get(f"/api/agents/{AGENT}/tools", headers=auth(owner[1])).json() == {"tools": []}
    assert client.delete(f"/api/agents/{AGENT}/tools/order_status", headers=auth(owner[1])).status_code == 404
    run_due_checks()
    assert api.credentials == [] and len(wakes(monitor_id)) == 1


# --- what can't be watched, each refused with nothing created -----------------------------------------------------

def test_a_tool_without_output_main_is_registered_but_refused_as_a_watch(client, owner, api):
    body = order_tool(api.base)
    del body["output"]
    assert put_tool(client, owner[1], body).status_code == 201
    error = refused(client, owner[1])
    assert error == ("The tool 'order_status' declares no output.main, so a condition on it could never become "
                     "true; it can't be watched.")
    assert monitor_count() == 0


def test_a_post_step_not_marked_read_only_is_refused_and_one_marked_waits_for_the_owner(client, owner, api,
                                                                                         run_due_checks):
    body = order_tool(api.base)
    body["steps"][1] = {"kind": "http", "method": "POST", "url": api.base + "/carrier/", "body": {"q": "x"}}
    registered(client, owner[1], body)
    error = refused(client, owner[1])
    assert error.startswith("Only read-only tools may be watched: step 1 of 'order_status' is a POST not marked "
                            "read_only")
    assert monitor_count() == 0
    body["steps"][1]["read_only"] = True  # the runtime's word only: a runtime token can't lift an approval
    registered(client, owner[1], body)
    result = watched(client, owner[1])
    assert result["status"] == "awaiting_approval" and monitor_count() == 1
    assert any("a step other than GET or HEAD is only marked read_only" in note for note in result["notes"])
    run_due_checks()
    assert api.credentials == [], "nothing runs before the owner approves"


@pytest.mark.parametrize("args, sentence", [
    ({"tool_name": "order_tracker"}, "The agent 'agent-1' has no tool 'order_tracker' (its tools: 'order_status', "
                                     "'shipping_eta'); the runtime registers tools with PUT"),
    ({"arguments": {"order": 7}}, "Argument 'order' must be string (got 7)."),
    ({"arguments": {"order": ["A-1"]}}, "Argument 'order' must be a scalar"),
    ({"arguments": {"order": "A-1", "rush": True}}, "The tool 'order_status' has no parameter 'rush'; its "
                                                    "parameters are order."),
    ({"arguments": {}}, "The tool 'order_status' needs the argument 'order'."),
    ({"expr": "data.reached =="}, "check.expr"),
], ids=["unknown-tool", "wrong-type", "non-scalar", "undeclared", "missing", "bad-condition"])
def test_a_watch_that_cannot_be_made_is_refused_with_nothing_created(client, owner, api, args, sentence):
    registered(client, owner[1], order_tool(api.base))
    registered(client, owner[1], order_tool(api.base), name="shipping_eta")
    assert sentence in refused(client, owner[1], **args)
    assert monitor_count() == 0


def test_an_invalid_tool_is_refused_at_registration_with_nothing_stored(client, owner, api):
    body = order_tool(api.base)
    body["steps"][0]["url"] = "file:///etc/passwd"
    answer = put_tool(client, owner[1], body)
    assert answer.status_code == 400
    assert "steps[0].url can't be called: The url must start with http:// or https://" in answer.json()["detail"]
    body = order_tool(api.base, output={"main": "steps[0].body +"})
    answer = put_tool(client, owner[1], body)
    assert answer.status_code == 400 and "output.main is not valid CEL: at column" in answer.json()["detail"]
    with db():
        assert AgentTool.select().count() == 0


def test_registering_needs_a_runtime_token(client, owner, api):
    assert put_tool(client, "not-a-token", order_tool(api.base)).status_code == 401
    with db():
        assert AgentTool.select().count() == 0


# --- accounts --------------------------------------------------------------------------------------------------------

def test_another_account_cant_see_delete_watch_or_replace_the_owners_tools(client, owner, stranger, api,
                                                                           run_due_checks):
    registered(client, owner[1], order_tool(api.base))
    monitor_id = watched(client, owner[1])["monitor_id"]
    assert client.get(f"/api/agents/{AGENT}/tools", headers=auth(stranger[1])).json() == {"tools": []}
    assert client.delete(f"/api/agents/{AGENT}/tools/order_status", headers=auth(stranger[1])).status_code == 404
    error = refused(client, stranger[1])
    assert "The agent 'agent-1' has no tool 'order_status' (its tools: none registered)" in error
    theirs = put_tool(client, stranger[1], order_tool(api.base, output={"main": "{'reached': true}"}))
    assert theirs.status_code == 201 and theirs.json()["watches_ended"] == 0, "a tool of their own, not the owner's"
    assert client.get(f"/api/monitors/{monitor_id}", headers=auth(stranger[1])).status_code == 404
    assert monitor_row(monitor_id).status == "active"
    [mine] = client.get(f"/api/agents/{AGENT}/tools", headers=auth(owner[1])).json()["tools"]
    assert mine["output"]["main"] == MAIN
    run_due_checks()
    assert wakes(monitor_id) == [], "the owner's watch still runs the owner's tool"


# --- limits and the owner's switch -----------------------------------------------------------------------------------

def test_the_tool_watch_limit_per_account_at_the_boundary_and_cancel_frees_the_slot(client, owner, api, settings,
                                                                                    reconfigure):
    assert settings.MONITOR_MAX_ARMED_TOOL_WATCHES_PER_ACCOUNT == 10, "seed 001's 10 per account by default"
    reconfigure(MONITOR_MAX_ARMED_TOOL_WATCHES_PER_ACCOUNT=2)
    registered(client, owner[1], order_tool(api.base))
    first = watched(client, owner[1])["monitor_id"]
    watched(client, owner[1], conversation="conv-2")
    body = tool(client, owner[1], "monitor_create", watch_args(), conversation="conv-3").json()
    assert body["ok"] is False and "already has 2 armed tool watches" in body["error"]
    seed = client.post("/api/actions/monitors/create", headers=auth(owner[1]), json={
        "conversationId": "conv-3", "watchType": "agent_tool", "agentId": AGENT, "toolName": "order_status",
        "toolArgs": {"order": "A-1"}, "condition": {"expr": "data.reached == true"}})
    assert seed.status_code == 409 and "already has 2 armed tool watches" in seed.json()["detail"]
    assert monitor_count() == 2
    cancel = tool(client, owner[1], "monitor_cancel", {"monitor_id": first})
    assert cancel.json()["ok"] is True
    assert watched(client, owner[1], conversation="conv-3")["status"] == "active", "cancelling freed the slot at once"


def test_tool_sources_off_refuses_at_create_and_pauses_an_armed_watch_at_its_next_poll(client, owner, api,
                                                                                      reconfigure, run_due_checks):
    registered(client, owner[1], order_tool(api.base))
    monitor_id = watched(client, owner[1])["monitor_id"]
    reconfigure(TOOL_SOURCES_ENABLED=False)
    error = refused(client, owner[1])
    assert error == "Tool watches are turned off on this Vigil instance (TOOL_SOURCES_ENABLED); tell the user."
    assert monitor_count() == 1
    run_due_checks()
    assert api.credentials == [], "a watch does not run while tool sources are off"
    assert monitor_row(monitor_id).status == "paused"
    [wake] = wakes(monitor_id)
    assert "TOOL_SOURCES_ENABLED" in wake.content
    run_due_checks()
    assert len(wakes(monitor_id)) == 1, "told once"

    reconfigure(TOOL_SOURCES_ENABLED=True)
    resumed = client.post(f"/api/monitors/{monitor_id}/resume", headers=auth(owner[1]))
    assert resumed.status_code == 200 and resumed.json()["status"] == "active"
    run_due_checks()
    assert len(api.credentials) == 1, "resumed, it polls again"


# --- a tool that asks its owner first --------------------------------------------------------------------------------

def approval_tool(base: str) -> dict:
    return order_tool(base, requires_approval=True)


def test_a_tool_that_requires_approval_waits_then_the_owner_approves_and_it_polls(client, owner, stranger, api,
                                                                                  run_due_checks):
    api.orders["A-1"] = {"status": "in transit"}
    registered(client, owner[1], approval_tool(api.base))
    result = watched(client, owner[1])
    monitor_id = result["monitor_id"]
    assert result["status"] == "awaiting_approval" and result["approve_url"].endswith(f"/commands/{monitor_id}")
    assert any("approve" in note and "approve_url" in note for note in result["notes"])
    run_due_checks()
    assert api.credentials == [], "nothing runs before the owner approves"

    other = login(client, "stranger@example.com", "stranger-password")
    by_stranger = client.post(f"/api/monitors/{monitor_id}/approve", headers={"X-CSRF-Token": other})
    assert by_stranger.status_code in (404, 409) and monitor_row(monitor_id).status == "awaiting_approval"
    client.cookies.clear()

    by_token = client.post(f"/api/monitors/{monitor_id}/approve", headers=auth(owner[1]))
    assert by_token.status_code == 403 and monitor_row(monitor_id).status == "awaiting_approval"
    csrf = login(client)
    assert client.post(f"/api/monitors/{monitor_id}/approve").status_code == 403, "a session needs its CSRF token"
    page = client.get(f"/commands/{monitor_id}")
    assert page.status_code == 200 and "order_status" in page.text and "A-1" in page.text
    assert SECRET_PART not in page.text

    approved = client.post(f"/api/monitors/{monitor_id}/approve", headers={"X-CSRF-Token": csrf})
    assert approved.status_code == 200 and approved.json()["status"] == "active"
    assert run_due_checks(1) == 1 and api.credentials == [SECRET], "approved, its first poll runs at once"
    again = client.post(f"/api/monitors/{monitor_id}/approve", headers={"X-CSRF-Token": csrf})
    assert again.status_code == 409


def test_deny_cancels_the_watch_and_tells_the_agent_once(client, owner, api, run_due_checks):
    registered(client, owner[1], approval_tool(api.base))
    monitor_id = watched(client, owner[1])["monitor_id"]
    csrf = login(client)
    denied = client.post(f"/api/monitors/{monitor_id}/deny", headers={"X-CSRF-Token": csrf})
    assert denied.status_code == 200 and denied.json()["status"] == "cancelled"
    [wake] = wakes(monitor_id)
    assert "The user denied re-running the tool 'order_status'" in wake.content
    assert client.post(f"/api/monitors/{monitor_id}/deny", headers={"X-CSRF-Token": csrf}).status_code == 409
    assert client.post(f"/api/monitors/{monitor_id}/approve", headers={"X-CSRF-Token": csrf}).status_code == 409
    run_due_checks()
    assert api.credentials == [] and len(wakes(monitor_id)) == 1


def test_a_watch_cancelled_before_approval_cannot_be_approved(client, owner, api, run_due_checks):
    registered(client, owner[1], approval_tool(api.base))
    monitor_id = watched(client, owner[1])["monitor_id"]
    assert tool(client, owner[1], "monitor_cancel", {"monitor_id": monitor_id}).json()["ok"] is True
    csrf = login(client)
    approve = client.post(f"/api/monitors/{monitor_id}/approve", headers={"X-CSRF-Token": csrf})
    assert approve.status_code == 409 and monitor_row(monitor_id).status == "cancelled"
    run_due_checks()
    assert api.credentials == []


def test_editing_the_tool_while_awaiting_approval_ends_the_watch_and_approve_is_refused(client, owner, api,
                                                                                        run_due_checks):
    registered(client, owner[1], approval_tool(api.base))
    monitor_id = watched(client, owner[1])["monitor_id"]
    changed = approval_tool(api.base)
    changed["steps"][0]["url"] = api.base + "/orders/{{args.order}}?all=1"
    assert registered(client, owner[1], changed)["watches_ended"] == 1
    assert monitor_row(monitor_id).status == "error" and len(wakes(monitor_id)) == 1
    csrf = login(client)
    approve = client.post(f"/api/monitors/{monitor_id}/approve", headers={"X-CSRF-Token": csrf})
    assert approve.status_code == 409 and monitor_row(monitor_id).status == "error"
    run_due_checks()
    assert api.credentials == []


# --- seed 001's agent_tool ---------------------------------------------------------------------------------------

def seed_create(client, token: str, **fields):
    return client.post("/api/actions/monitors/create", headers=auth(token),
                       json={"conversationId": "conv-1", "watchType": "agent_tool", "toolName": "order_status",
                             "toolArgs": {"order": "A-1"}, "condition": {"expr": "data.reached == true"}, **fields})


def test_seed_agent_tool_arms_the_same_watch_with_the_interval_clamped_to_five_minutes(client, owner, api,
                                                                                        run_due_checks):
    api.orders["A-1"] = {"status": "in transit"}
    registered(client, owner[1], order_tool(api.base))
    answer = seed_create(client, owner[1], agentId=AGENT, intervalMinutes=1, note="Tell the user it arrived.")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["monitorState"] == "armed"
    assert any("polled every 5m at the soonest" in note and "raised from 1m to 5m" in note for note in body["notes"])
    monitor = monitor_row(body["monitorId"])
    # 5 minutes: its jitter only delays a poll, so it is never polled sooner
    assert monitor.interval_seconds == 300 and monitor.source["type"] == "tool"
    assert monitor.source["tool"] == "order_status" and monitor.source["agent_id"] == AGENT
    assert client.get(f"/api/monitors/{body['monitorId']}", headers=auth(owner[1])).json()["monitorState"] == "armed"
    assert run_due_checks(1) == 1 and api.credentials == [SECRET]
    api.orders["A-1"] = {"status": "delivered"}
    run_due_checks()
    [wake] = wakes(body["monitorId"])
    assert "Tell the user it arrived." in wake.content
    assert client.get(f"/api/monitors/{body['monitorId']}", headers=auth(owner[1])).json()["monitorState"] == "fired"


def test_a_tool_watch_is_never_polled_sooner_than_five_minutes_after_its_last_poll(client, owner, api,
                                                                                   run_due_checks):
    """seed 001: intervalMinutes is clamped to 5–1440 and jittered — never faster than 5 minutes."""
    registered(client, owner[1], order_tool(api.base))
    ids = [armed["monitorId"] for armed in (seed_create(client, owner[1], agentId=AGENT, intervalMinutes=5).json()
                                            for _ in range(10))]
    # poll at a moment whose next due time is far from :00 and :30 (moved a minute later, off the busy minutes)
    due = utcnow() + timedelta(seconds=300)
    ahead = (10 * 60 + 30 - (due.minute % 30 * 60 + due.second)) % 1800
    assert run_due_checks(max(ahead, 1)) == 10
    for monitor_id in ids:
        monitor = monitor_row(monitor_id)
        gap = (monitor.next_check_at - monitor.last_checked_at).total_seconds()
        assert gap >= 300, f"due again {gap:.0f} s after its poll"


def test_seed_agent_tool_interval_above_a_day_is_lowered_to_1440_minutes(client, owner, api):
    registered(client, owner[1], order_tool(api.base))
    body = seed_create(client, owner[1], agentId=AGENT, intervalMinutes=2000).json()
    assert monitor_row(body["monitorId"]).interval_seconds == 86400
    assert any("once a day at the latest, so the interval was lowered from 1d9h20m to 1d" in note
               for note in body["notes"])


@pytest.mark.parametrize("minutes", [0, 2, 0.5])
def test_seed_agent_tool_interval_below_the_floor_is_raised_to_five_minutes_with_a_note(client, owner, api, minutes):
    registered(client, owner[1], order_tool(api.base))
    answer = seed_create(client, owner[1], agentId=AGENT, intervalMinutes=minutes)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["monitorState"] == "armed" and monitor_row(body["monitorId"]).interval_seconds == 300
    assert any("the interval was raised from" in note and "to 5m" in note for note in body["notes"]), body["notes"]


def test_the_tool_floor_is_an_operator_setting(client, owner, api, reconfigure):
    reconfigure(TOOL_MIN_INTERVAL_SECONDS=60)
    registered(client, owner[1], order_tool(api.base))
    body = seed_create(client, owner[1], agentId=AGENT, intervalMinutes=1).json()
    assert body["monitorState"] == "armed" and monitor_row(body["monitorId"]).interval_seconds == 60
    assert not any("raised" in note for note in body["notes"])
    raised = seed_create(client, owner[1], agentId=AGENT, intervalMinutes=0).json()
    assert monitor_row(raised["monitorId"]).interval_seconds == 60
    assert any("raised from 0s to 1m" in note for note in raised["notes"])
    direct = watched(client, owner[1], interval="30s")
    assert direct["interval_seconds"] == 60 and any("raised from 30s to 1m" in note for note in direct["notes"])


def test_seed_agent_tool_negative_interval_is_refused_with_nothing_created(client, owner, api):
    registered(client, owner[1], order_tool(api.base))
    answer = seed_create(client, owner[1], agentId=AGENT, intervalMinutes=-1)
    assert answer.status_code == 400 and "intervalMinutes must be a number of minutes, 0 or more" in \
        answer.json()["detail"]
    assert monitor_count() == 0


def test_seed_agent_tool_refusals_name_seed_fields_with_nothing_created(client, owner, api):
    registered(client, owner[1], order_tool(api.base))
    unknown = seed_create(client, owner[1], agentId=AGENT, toolName="nope")
    assert unknown.status_code == 400 and "has no tool 'nope' (its tools: 'order_status')" in unknown.json()["detail"]
    wrong = seed_create(client, owner[1], agentId=AGENT, toolArgs={"order": 7})
    assert wrong.status_code == 400 and "Argument 'order' must be string" in wrong.json()["detail"]
    nobody = seed_create(client, owner[1], conversationId="fresh-conversation")
    assert nobody.status_code == 400 and "agentId" in nobody.json()["detail"]
    assert monitor_count() == 0
