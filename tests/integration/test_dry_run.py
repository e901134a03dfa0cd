"""monitor_create with dry_run (issue 18) through POST /api/tool/monitor and MCP: it reads the source as a create
would and says whether the check would fire on what is there now, with the value, an excerpt and a cost forecast
(checks a day, judge calls at the change rate the account's monitors of that source saw, wakes left within the
daily cap); a limit that would refuse arming is reported, not refused; and it stores nothing at all — no monitor,
run, event, link, approval, message or wake, not even the conversation."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from models import ALL_TABLES, utcnow
from models.tables import Monitor, MonitorRun
from tests.integration.helpers import db, tool, wakes

QUOTE = "<html><body><p id='price'>Price: $85.00</p></body></html>"


def rows() -> dict[str, int]:
    """The row count of every table."""
    with db():
        return {model._meta.table_name: model.select().count() for model in ALL_TABLES}


def dry(client, token: str, arguments: dict, conversation: str = "conv-1") -> dict:
    return tool(client, token, "monitor_create", {**arguments, "dry_run": True}, conversation=conversation).json()


def below_90(url: str, **extra) -> dict:
    return {"description": "ACME drops below $90", "source": {"type": "page", "url": url, "selector": "#price"},
            "check": {"type": "threshold", "op": "below", "value": 90}, "interval": "15m", **extra}


def test_dry_run_of_a_threshold_that_holds_says_it_would_fire_and_stores_nothing(client, owner, pages):
    url = pages.set("/quote", QUOTE)
    before = rows()
    body = dry(client, owner[1], below_90(url, max_wakes=3))
    assert body["ok"] is True, body
    result = body["result"]
    assert result["dry_run"] is True and result["would_fire"] is True
    assert result["value"] == 85.0 and result["baseline"] == "currently 85" and result["excerpt"] == "Price: $85.00"
    assert result["forecast"]["checks_per_day"] == 96 and result["forecast"]["judge_calls_per_day"] == 0
    assert result["forecast"]["wakes_left"] == 3 and result["forecast"]["ends_at"].endswith("Z")
    assert result["limits"].startswith("within the limits")
    assert any("this reading would be its baseline" in note for note in result["notes"])
    assert pages.hits["/quote"] == 1  # read once, as a create reads it
    assert rows() == before  # not even the conversation


def test_dry_run_of_a_change_check_would_not_fire_and_says_it_fires_on_the_next_change(client, owner, pages):
    url = pages.set("/p", "<p>v1</p>")
    changes = {"description": "the page changes", "source": {"type": "page", "url": url}}
    result = dry(client, owner[1], changes)["result"]
    assert result["would_fire"] is False and result["value"] is None and result["excerpt"] == "v1"
    assert any("fires on the next change" in note for note in result["notes"])


def test_dry_run_of_a_webhook_creates_no_link_and_stores_nothing(client, owner):
    before = rows()
    body = dry(client, owner[1], {"description": "the deploy finishes", "source": {"type": "webhook"},
                                  "condition": "the deploy failed"})
    assert body["ok"] is True, body
    result = body["result"]
    assert result["would_fire"] is False and result["excerpt"] == "" and "url" not in result
    assert any("would create a trigger link" in note for note in result["notes"])
    assert result["forecast"]["checks_per_day"] == 0 and result["forecast"]["judge_calls_per_day"] is None
    assert rows() == before


def test_dry_run_of_an_approval_and_a_time_watch_store_nothing(client, owner):
    before = rows()
    approval = dry(client, owner[1], {"description": "ship it?", "source": {"type": "approval",
                                                                           "question": "Ship v2?"}})["result"]
    assert any("approval link" in note for note in approval["notes"]) and approval["forecast"]["wakes_left"] == 1
    later = dry(client, owner[1], {"description": "later", "source": {"type": "time", "delay": "2h"}})["result"]
    ends = later["forecast"]["ends_at"]
    assert later["would_fire"] is False and any(ends[:16] in note for note in later["notes"])
    assert rows() == before


def test_dry_run_of_a_document_watch_evaluates_the_stored_document(client, owner):
    auth = {"Authorization": f"Bearer {owner[1]}"}
    answer = client.put("/api/documents/transcription_jobs/j-1", headers=auth, json={"status": "done"})
    assert answer.status_code in (200, 201), answer.text
    before = rows()
    result = dry(client, owner[1], {"description": "job done",
                                    "source": {"type": "document", "item_type": "transcription_jobs", "item_id": "j-1"},
                                    "check": {"type": "cel", "expr": "doc.status == 'done'"}})["result"]
    assert result["would_fire"] is True and any("would fire at once" in note for note in result["notes"])
    assert result["forecast"]["checks_per_day"] == 288  # a sweep every 5 minutes
    assert rows() == before


def test_dry_run_of_a_declared_tool_runs_it_once_and_stores_nothing(client, owner, pages):
    url = pages.set_json("/count.json", json.dumps({"count": 3}))
    tool_body = {"description": "A counter", "parameters": {"type": "object", "properties": {}},
                 "steps": [{"kind": "http", "method": "GET", "url": url}],
                 "output": {"main": "{'count': steps[0].body.count}"}}
    put = client.put("/api/agents/agent-1/tools/counter", headers={"Authorization": f"Bearer {owner[1]}"},
                     json=tool_body)
    assert put.status_code in (200, 201), put.text
    before = rows()
    result = dry(client, owner[1], {"description": "count passes 2", "source": {"type": "tool", "tool": "counter"},
                                    "check": {"type": "cel", "expr": "data.count > 2.0"}})["result"]
    assert result["would_fire"] is True and pages.hits["/count.json"] == 1
    assert rows() == before


@pytest.mark.parametrize("value", ["yes", 1, None, "true"])
def test_dry_run_that_is_not_a_boolean_is_refused_in_one_sentence(client, owner, pages, value):
    url = pages.set("/quote", QUOTE)
    before = rows()
    body = tool(client, owner[1], "monitor_create", {**below_90(url), "dry_run": value}).json()
    assert body == {"ok": False, "error": "dry_run must be true or false."}
    assert rows() == before and pages.hits.get("/quote", 0) == 0


def test_dry_run_refuses_a_bad_source_with_the_create_message(client, owner, pages):
    url = pages.set("/gone", "nope", status=404)
    real = tool(client, owner[1], "monitor_create", below_90(url)).json()
    before = rows()
    body = dry(client, owner[1], below_90(url))
    assert body["ok"] is False and body["error"] == real["error"] and "no monitor was created" in body["error"]
    bad = dry(client, owner[1], {"description": "x", "source": {"type": "page", "url": "ftp://example.com/a"}})
    assert bad["ok"] is False and "http:// or https://" in bad["error"]
    assert rows() == before


def test_dry_run_reports_the_armed_limit_instead_of_refusing(client, owner, pages, reconfigure):
    reconfigure(MONITOR_MAX_ARMED_PER_CONVERSATION=1)
    url = pages.set("/quote", QUOTE)
    assert tool(client, owner[1], "monitor_create", {"description": "later", "source": {"type": "time",
                                                                                         "delay": "1h"}}).json()["ok"]
    refused = tool(client, owner[1], "monitor_create", below_90(url)).json()
    assert refused["ok"] is False and "already has 1 armed monitors" in refused["error"]
    before = rows()
    body = dry(client, owner[1], below_90(url))
    assert body["ok"] is True, body
    assert body["result"]["limits"].startswith("at the limit: This conversation already has 1 armed monitors")
    assert body["result"]["limits"].endswith("Arming this now would be refused.")
    assert rows() == before


def test_dry_run_forecasts_judge_calls_from_the_sources_history(client, owner, pages):
    url = pages.set("/quote", QUOTE)
    first = tool(client, owner[1], "monitor_create", below_90(url)).json()["result"]
    now = utcnow()
    with db():  # as if it had been checked for two days and seen four changes
        Monitor.update(created_at=now - timedelta(days=2), last_checked_at=now) \
            .where(Monitor.id == first["monitor_id"]).execute()
        for kind in ("changed", "changed", "fired", "changed"):
            MonitorRun.create(monitor=first["monitor_id"], kind=kind, detail="", created_at=now - timedelta(hours=3))
    forecast = dry(client, owner[1], below_90(url, condition="the drop is real"))["result"]["forecast"]
    assert forecast["judge_calls_per_day"] == 2
    assert forecast["judge_calls_basis"].startswith("2 changes a day, observed over 2d of checks by 1 monitor ")
    other = dry(client, owner[1], below_90(pages.set("/other", QUOTE), condition="the drop is real"))["result"]
    assert other["forecast"]["judge_calls_per_day"] == 96
    assert other["forecast"]["judge_calls_basis"].startswith("no history for this source")


def test_dry_run_wakes_left_counts_the_conversations_seed_001_fires_today_for_seed_001_watches_only(
        client, owner, pages, reconfigure, drain):
    from tests.integration.test_documents import DONE, put, watch

    reconfigure(MONITOR_MAX_FIRES_PER_CONVERSATION_DAY=2)
    fired = watch(client, owner[1], DONE, item_id="job-1")["monitor_id"]
    put(client, owner[1], "transcription_jobs/job-1", {"status": "done"})
    drain()
    assert len(wakes(fired)) == 1
    document = {"description": "job 2 is done", "source": {"type": "document", "item_type": "transcription_jobs",
                                                          "item_id": "job-2"},
                "check": {"type": "cel", "expr": DONE}, "max_wakes": 5}
    assert dry(client, owner[1], document)["result"]["forecast"]["wakes_left"] == 1
    assert dry(client, owner[1], document, conversation="conv-2")["result"]["forecast"]["wakes_left"] == 2
    quote = below_90(pages.set("/quote", QUOTE), max_wakes=5)  # a page: seed 000's, the daily cap is not its guard
    assert dry(client, owner[1], quote)["result"]["forecast"]["wakes_left"] == 5


def test_dry_run_over_mcp_answers_the_same_and_stores_nothing(postgres, owner, pages, tmp_path):
    from tests.integration.helpers import running_stack
    from tests.integration.test_mcp_server import call, session

    url = pages.set("/quote", QUOTE)
    with running_stack(tmp_path, worker=False) as web:
        before = rows()
        reply = session(web.base, owner[1], lambda client: call(client, "monitor_create", {
            "conversation_id": "chat-9", **below_90(url), "dry_run": True}))
        assert rows() == before
    assert reply["ok"] is True and reply["result"]["would_fire"] is True and reply["result"]["value"] == 85.0
