"""models/describe_data and the approval card: what a monitor's row reads from other tables (a link's hits, an
approval's state, an event source's last event), and the owner's pages that show them."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest

from models import utcnow
from models.approvals import approval_cards
from models.describe_data import NONE, Facts, facts_for, monitor_facts
from models.tables import CommandRun, Monitor, RunRecord
from tests.integration.helpers import db, login, tool


@pytest.fixture(autouse=True)
def fresh_pool(postgres):
    """Pooled connections go after each test: a delivery leaves its prepared statement on the connection it used,
    and tests/integration/test_prepared.py expects to find none there."""
    yield
    postgres.close_idle()


def create(client, token, source: dict, conversation: str = "conv-1", **arguments) -> str:
    body = tool(client, token, "monitor_create", {"description": f"watch {source['type']}", "source": source,
                                                  **arguments}, conversation=conversation).json()
    assert body["ok"], body
    return body["result"]


def monitors(*ids: str) -> list[Monitor]:
    return list(Monitor.select().where(Monitor.id.in_(ids)))


def form_nonce(html: str) -> str:
    return re.search(r'name="nonce" value="([0-9a-f]+)"', html).group(1)


def test_webhook_facts_count_hits_and_the_last_delivery(client, owner, drain):
    result = create(client, owner[1], {"type": "webhook", "max_hits": 5}, max_wakes=5)
    with db():
        [monitor] = monitors(result["monitor_id"])
        assert facts_for(monitor, utcnow()).hits == 0
        assert facts_for(monitor, utcnow()).last_event_at is None
    before = utcnow() - timedelta(seconds=1)
    path = result["url"][result["url"].index("/api/triggers/"):]
    for n in range(2):
        assert client.post(path, json={"n": n}).status_code == 202
    drain()
    with db():
        facts = facts_for(monitor, utcnow())
    assert facts.hits == 2 and facts.approval is None
    assert before <= facts.last_event_at <= utcnow()


def test_approval_facts_and_card_follow_the_decision(client, owner, settings):
    import tasks.runtime as runtime

    result = create(client, owner[1], {"type": "approval", "question": "Ship v2?"})
    with db():
        [monitor] = monitors(result["monitor_id"])
        assert facts_for(monitor, utcnow()) == Facts(approval="open")
        [card] = approval_cards([monitor], runtime.current().keyring, "http://127.0.0.1:8000", utcnow()).values()
    assert card["url"] == result["approval_url"], "the card shows the very link the agent was given"
    assert (card["state"], card["word"], card["options"]) == ("open", "open", ["Approve", "Reject"])
    assert card["decision"] is None and card["question"] == "Ship v2?"

    path = result["approval_url"][result["approval_url"].index("/approve/"):]
    nonce = form_nonce(client.get(path).text)
    assert client.post(path, data={"decision": "Approve", "comment": "go", "nonce": nonce}).status_code == 200
    with db():
        [monitor] = monitors(result["monitor_id"])
        facts = facts_for(monitor, utcnow())
        [card] = approval_cards([monitor], runtime.current().keyring, "http://x", utcnow()).values()
    assert facts.approval == "approved" and facts.last_event_at is not None
    assert (card["state"], card["word"], card["decision"], card["comment"]) == ("decided", "approved", "Approve", "go")


def test_approval_facts_say_expired_and_ended(client, owner):
    expired = create(client, owner[1], {"type": "approval", "question": "Q1?"})["monitor_id"]
    cancelled = create(client, owner[1], {"type": "approval", "question": "Q2?"})["monitor_id"]
    assert tool(client, owner[1], "monitor_cancel", {"monitor_id": cancelled}).json()["ok"]
    with db():
        facts = monitor_facts(monitors(expired, cancelled), utcnow() + timedelta(days=8))
    assert facts[expired].approval == "expired" and facts[cancelled].approval == "ended"


def test_document_and_ingest_facts_are_the_last_write(client, owner):
    doc = create(client, owner[1], {"type": "document", "item_type": "ct:orders", "item_id": "o-1"},
                 check={"type": "cel", "expr": "has(doc.done)"})["monitor_id"]
    ingest = create(client, owner[1], {"type": "ingest", "item_id": "up-1"})["monitor_id"]
    unwritten = create(client, owner[1], {"type": "document", "item_type": "ct:orders", "item_id": "o-2"},
                       check={"type": "cel", "expr": "has(doc.done)"})["monitor_id"]
    auth = {"Authorization": f"Bearer {owner[1]}"}
    assert client.put("/api/documents/ct:orders/o-1", headers=auth, json={"done": False}).status_code == 201
    assert client.put("/api/documents/ingest_jobs/up-1", headers=auth, json={"status": "running"}).status_code == 201
    with db():
        facts = monitor_facts(monitors(doc, ingest, unwritten), utcnow())
    assert facts[doc].last_event_at is not None and facts[ingest].last_event_at is not None
    assert facts[unwritten].last_event_at is None


def test_stream_facts_are_the_last_printed_lines(client, owner):
    with db():
        [monitor] = monitors(create(client, owner[1], {"type": "time", "delay": "1h"})["monitor_id"])
        stream = Monitor.create(**{**monitor.__data__, "id": uuid.uuid4().hex, "source": {
            "type": "command", "device": "laptop", "command": "tail -f log", "mode": "stream"}})
        run = CommandRun.create(id=uuid.uuid4().hex, device=_device(owner[0]), monitor=stream.id, kind="stream",
                                command="tail -f log")
        at = utcnow().replace(microsecond=0)
        RunRecord.create(run=run.id, seq=1, kind="started", received_at=at + timedelta(seconds=9))
        RunRecord.create(run=run.id, seq=2, kind="lines", lines=3, received_at=at)
        facts = monitor_facts([stream, monitor], utcnow())
    assert facts[stream.id].last_event_at == at, "the last lines, not the start record"
    assert facts[monitor.id].last_event_at is None, "a time watch's event is its firing"


def test_polled_monitors_need_no_facts(client, owner, pages):
    url = pages.set("/quiet", "<p>quiet</p>")
    monitor_id = create(client, owner[1], {"type": "page", "url": url})["monitor_id"]
    with db():
        assert monitor_facts(monitors(monitor_id), utcnow()) == {}
        assert facts_for(monitors(monitor_id)[0], utcnow()) == NONE


def test_owner_pages_show_rows_and_the_approval_card(client, owner, drain):
    hook = create(client, owner[1], {"type": "webhook", "signature": "standard_webhooks"}, conversation="c-7")
    approval = create(client, owner[1], {"type": "approval", "question": "Ship v2?"}, conversation="c-7")
    login(client)
    page = client.get("/settings/monitors").text
    assert "trigger link (standard_webhooks) · 0 of 1000 hits" in page and "on delivery" in page
    assert "approval: Ship v2? · open" in page and "on decision" in page
    assert "last event: none yet" in page and "None" not in page.split("<tbody", 1)[1].split(">", 1)[1]
    assert f'href="/monitors/{hook["monitor_id"]}"' in page
    conversation_id = re.search(r'href="/conversations/(\d+)"', page).group(1)
    conversation = client.get(f"/conversations/{conversation_id}").text
    assert f'id="approval-{approval["monitor_id"]}"' in conversation
    assert approval["approval_url"] in conversation and "Approve · Reject" in conversation


def _device(user):
    from models.tables import Device

    return Device.create(user=user, name="laptop", token_digest=uuid.uuid4().hex, created_at=utcnow()).id
