"""Wake coalescing (issue 18) on PostgreSQL and Redis, woken by real trigger links: two monitors of one conversation
firing within its window reach it as one message listing both facts, pushed once to a real wake receiver on
127.0.0.1; each fact is still deduped on its own key; a held wake counts toward max_wakes when it is held; a window
that held one wake delivers it as the plain wake; off by default; a conversation's own context.coalesce_seconds
overrides the setting both ways; a bad one is 400 with nothing stored; a second scheduler skips the windows another
is delivering; and `vigil watch` prints one line per fact of a coalesced message.

The window is closed by the scheduler's tick: `run_due_checks(seconds)` ticks that far ahead of the wakes."""

from __future__ import annotations


import pytest

from models.coalesce import flush_due
from models.db import utcnow
from models.monitors import load_for_check
from models.results import write_wake
from models.tables import Conversation, HeldWake, Message, Monitor, Wake
from tests.integration.helpers import db, monitor_row, running_stack, transaction_held_elsewhere
from tests.processes import stop
from tests.integration.test_vigil_watch import Watch, fire, hook
from tests.integration.test_wake_push import Receiver, register

HEAD = "2 monitors fired; each wake follows, oldest first."


def create_hook(client, token: str, description: str, conversation: str = "conv-1", max_wakes: int = 20,
                **context) -> tuple[str, str]:
    """A webhook monitor created through the tool endpoint (context extras as given): its id and link path."""
    answer = client.post("/api/tool/monitor", headers={"Authorization": f"Bearer {token}"}, json={
        "action": "monitor_create", "context": {"conversation_id": conversation, **context},
        "arguments": {"description": description, "source": {"type": "webhook"}, "max_wakes": max_wakes}})
    body = answer.json()
    assert answer.status_code == 200 and body["ok"], body
    url = body["result"]["url"]
    return body["result"]["monitor_id"], url[url.index("/api/triggers/"):]


def post(client, drain, path: str, fact: str) -> None:
    answer = client.post(path, json={"fact": fact}, headers={"Idempotency-Key": fact})
    assert answer.status_code == 202, answer.text
    drain()


def wakes() -> list[Message]:
    """The wake messages written, oldest first (a coalesced one once, though several wakes link to it)."""
    with db():
        return list(Message.select().where(Message.role == "wake").order_by(Message.id))


def held() -> list[HeldWake]:
    with db():
        return list(HeldWake.select().order_by(HeldWake.id))


def wake_rows() -> list[Wake]:
    with db():
        return list(Wake.select().order_by(Wake.id))


@pytest.fixture()
def receiver():
    server = Receiver().start()
    yield server
    server.stop()


def test_coalesce_two_monitors_within_the_window_wake_once_with_both_facts(
        client, owner, drain, reconfigure, run_due_checks, receiver):
    reconfigure(WAKE_COALESCE_SECONDS=60)
    endpoint = register(client, owner[1], receiver.url)
    deploy, deploy_path = create_hook(client, owner[1], "deploy hook", max_wakes=1)
    tests, tests_path = create_hook(client, owner[1], "tests hook")
    post(client, drain, deploy_path, "deployed-1.2.3")
    post(client, drain, tests_path, "tests-passed-41")

    assert wakes() == [] and receiver.requests == [], "held: no message, no push while the window is open"
    assert [w.monitor_id for w in wake_rows()] == [deploy, tests] and {w.message_id for w in wake_rows()} == {None}
    assert monitor_row(deploy).status == "done", "a held wake counts toward max_wakes when it is held"
    assert len({h.due_at for h in held()}) == 1, "the second wake joined the window the first opened"

    run_due_checks(30)  # the window is not over yet
    assert wakes() == [] and receiver.requests == []
    run_due_checks(40)
    [message] = wakes()
    lines = message.content.splitlines()
    assert lines[0] == HEAD
    assert lines.index("--- 1 of 2: deploy hook ---") < lines.index("--- 2 of 2: tests hook ---")
    assert message.content.index("deployed-1.2.3") < message.content.index("tests-passed-41")
    assert message.metadata["wake"] == {"source": "coalesced", "count": 2, "description": HEAD}
    facts = message.metadata["wakes"]
    assert [f["wake"]["ref_id"] for f in facts] == [deploy, tests]
    assert [f["wake"]["description"] for f in facts] == ["deploy hook", "tests hook"]
    assert [f["wake"]["source"] for f in facts] == ["trigger", "trigger"]
    assert [f["wake"]["dedupe_key"] for f in facts] == [w.dedupe_key for w in wake_rows()]
    assert {w.message_id for w in wake_rows()} == {message.id} and held() == []

    [payload] = receiver.verified(endpoint["secret"])
    assert receiver.ids() == [f"wake_{message.id}"]
    assert payload["data"]["message"]["content"] == message.content
    assert payload["data"]["message"]["metadata"]["wake"]["source"] == "coalesced"
    run_due_checks(3600)
    assert len(wakes()) == 1 and len(receiver.requests) == 1, "delivered once"


def test_coalesce_each_fact_is_deduped_on_its_own_key(client, owner, drain, reconfigure, run_due_checks):
    reconfigure(WAKE_COALESCE_SECONDS=60)
    deploy, deploy_path = create_hook(client, owner[1], "deploy hook")
    _, tests_path = create_hook(client, owner[1], "tests hook")
    post(client, drain, deploy_path, "deployed-1.2.3")
    post(client, drain, tests_path, "tests-passed-41")
    first = wake_rows()[0]
    with db():  # the broker delivering the first fire again: its key is taken, so nothing more is held
        replayed = write_wake(load_for_check(deploy), "trigger", first.dedupe_key, "a replay", {})
    assert replayed is None and len(held()) == 2 and len(wake_rows()) == 2
    post(client, drain, deploy_path, "deployed-1.2.4")  # a new fact of the same monitor joins the window
    assert len(held()) == 3

    run_due_checks(120)
    [message] = wakes()
    assert message.content.splitlines()[0] == "2 monitors fired 3 times; each wake follows, oldest first."
    assert "a replay" not in message.content
    assert [f["wake"]["dedupe_key"] for f in message.metadata["wakes"]] == [w.dedupe_key for w in wake_rows()]
    assert len(set(f["wake"]["dedupe_key"] for f in message.metadata["wakes"])) == 3


def test_coalesce_a_window_with_one_wake_delivers_the_plain_wake(client, owner, drain, reconfigure, run_due_checks):
    _, plain_path = create_hook(client, owner[1], "deploy hook", conversation="plain")
    post(client, drain, plain_path, "deployed-1.2.3")
    [plain] = wakes()
    reconfigure(WAKE_COALESCE_SECONDS=60)
    _, held_path = create_hook(client, owner[1], "deploy hook", conversation="held")
    post(client, drain, held_path, "deployed-1.2.3")
    assert len(wakes()) == 1
    run_due_checks(120)
    [_, alone] = wakes()
    assert alone.content == plain.content
    assert {**alone.metadata, "wake": None} == {**plain.metadata, "wake": None}
    assert alone.metadata["wake"]["source"] == "trigger" and alone.metadata["wake"]["description"] == "deploy hook"


def test_coalesce_is_off_by_default(client, owner, drain, run_due_checks):
    _, deploy_path = create_hook(client, owner[1], "deploy hook")
    _, tests_path = create_hook(client, owner[1], "tests hook")
    post(client, drain, deploy_path, "deployed-1.2.3")
    post(client, drain, tests_path, "tests-passed-41")
    assert [m.metadata["wake"]["description"] for m in wakes()] == ["deploy hook", "tests hook"]
    assert held() == []


def test_coalesce_a_conversations_own_seconds_override_the_setting(client, owner, drain, reconfigure, run_due_checks):
    _, own_a = create_hook(client, owner[1], "deploy hook", conversation="own", coalesce_seconds=60)
    _, own_b = create_hook(client, owner[1], "tests hook", conversation="own")  # kept: no value given
    _, other = create_hook(client, owner[1], "other hook", conversation="other")
    for path, fact in ((own_a, "a-1"), (own_b, "b-1"), (other, "c-1")):
        post(client, drain, path, fact)
    assert [m.metadata["wake"]["description"] for m in wakes()] == ["other hook"], "the setting is 0: at once"
    run_due_checks(120)
    assert [m.metadata["wake"]["source"] for m in wakes()] == ["trigger", "coalesced"]

    reconfigure(WAKE_COALESCE_SECONDS=60)
    create_hook(client, owner[1], "later hook", conversation="own", coalesce_seconds=0)  # off for it alone
    for path, fact in ((own_a, "a-2"), (own_b, "b-2")):
        post(client, drain, path, fact)
    assert [m.metadata["wake"]["description"] for m in wakes()[2:]] == ["deploy hook", "tests hook"]
    with db():
        assert {c.external_id: c.coalesce_seconds for c in Conversation.select()} == {"own": 0, "other": None}


@pytest.mark.parametrize("bad", [-1, 3601, 1.5, "60", True, [60], {"s": 60}])
def test_coalesce_bad_context_seconds_is_400_and_stores_nothing(client, owner, bad):
    create_hook(client, owner[1], "deploy hook", conversation="kept", coalesce_seconds=30)
    for conversation in ("kept", "new"):
        answer = client.post("/api/tool/monitor", headers={"Authorization": f"Bearer {owner[1]}"}, json={
            "action": "monitor_create", "context": {"conversation_id": conversation, "coalesce_seconds": bad},
            "arguments": {"description": "tests hook", "source": {"type": "webhook"}}})
        assert answer.status_code == 400, answer.text
        assert "context.coalesce_seconds must be a whole number of seconds from 0 (off) to 3600." in answer.text
    with db():
        assert {c.external_id: c.coalesce_seconds for c in Conversation.select()} == {"kept": 30}
        assert [m.description for m in Monitor.select()] == ["deploy hook"]


def test_coalesce_a_second_scheduler_skips_a_window_another_is_delivering(client, owner, drain, reconfigure):
    reconfigure(WAKE_COALESCE_SECONDS=1)
    for description in ("deploy hook", "tests hook"):
        post(client, drain, create_hook(client, owner[1], description)[1], description)
    later = utcnow().replace(year=utcnow().year + 1)
    # the first scheduler holds the window's rows, as one delivering them does
    with transaction_held_elsewhere(lambda: list(HeldWake.select().for_update(skip_locked=True))), db():
        assert flush_due(later) == [], "the second scheduler skipped the rows the first holds"
    with db():
        [flushed] = flush_due(later)
        assert flush_due(later) == []
    assert flushed.conversation_id == "conv-1" and [m.id for m in wakes()] == [flushed.message.id]


def test_coalesce_watch_prints_one_line_per_fact(postgres, tmp_path, owner):
    with running_stack(tmp_path, scheduler=True, WAKE_COALESCE_SECONDS="5") as stack:
        stack.token = owner[1]
        deploy, release = hook(stack, "laptop-1", "deploy hook"), hook(stack, "laptop-1", "release hook")
        state = tmp_path / "watch-state"
        watch = Watch(stack, state)
        try:
            watch.wait_connected(state)
            fire(deploy, {"event": "done"})
            fire(release, {"version": "2.0"})
            lines = watch.wait_lines(2)
        finally:
            stop(watch.process)
    [message] = wakes()
    assert message.metadata["wake"]["source"] == "coalesced"
    assert lines == [fact["line"] for fact in message.metadata["wakes"]], "one line per fact, in the message's order"
    assert sorted(lines) == ['[vigil] deploy hook: { "event": "done" }', '[vigil] release hook: { "version": "2.0" }']
