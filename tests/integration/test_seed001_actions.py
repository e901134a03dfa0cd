"""Seed 001's Create Monitor and Cancel Monitor actions, end to end: POST /api/actions/monitors/create|cancel in the
seed's own field names, the wake they arm, and GET /api/monitors/{id} with monitorState; every bad field is a 400
naming it with nothing created, and the limits are 409s."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from models import utcnow
from models.guardrails import ONE_MORE
from models.tables import Conversation, Monitor
from tests.integration.helpers import db, login, tool, wakes

DONE = {"expr": "has(doc.status) && doc.status == 'done'"}


def auth(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def create(client, token, **fields):
    return client.post("/api/actions/monitors/create", headers=auth(token),
                       json={"conversationId": "conv-1", **fields})


def armed(client, token, **fields) -> dict:
    answer = create(client, token, **fields)
    assert answer.status_code == 200, answer.text
    return answer.json()


def reminder(client, token, conversation: str = "conv-1", **fields) -> dict:
    return armed(client, token, watchType="time", delayMinutes=60, conversationId=conversation, **fields)


def cancel(client, token, monitor_id):
    return client.post("/api/actions/monitors/cancel", headers=auth(token), json={"monitorId": monitor_id})


def state(client, token, monitor_id: str) -> dict:
    answer = client.get(f"/api/monitors/{monitor_id}", headers=auth(token))
    assert answer.status_code == 200, answer.text
    return answer.json()


def monitor_count() -> int:
    with db():
        return Monitor.select().count()


def minutes_from_now(iso: str) -> float:
    when = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return (when - datetime.now(timezone.utc)).total_seconds() / 60


def test_a_document_watch_is_armed_fires_on_the_write_that_matches_and_reads_fired(client, owner, drain):
    answer = armed(client, owner[1], watchType="dynadata_doc", itemType="transcription_jobs", itemId="job-9",
                   condition=DONE, note="Send the transcript to the user.\nThen offer a summary.")
    assert answer["monitorState"] == "armed" and set(answer) == {"monitorId", "monitorState", "expiresAtIso", "notes"}
    assert 1439 < minutes_from_now(answer["expiresAtIso"]) <= 1440  # ttlMinutes defaults to a day
    assert any("no document transcription_jobs/job-9 yet" in note for note in answer["notes"])
    monitor_id = answer["monitorId"]
    assert state(client, owner[1], monitor_id)["monitorState"] == "armed"

    client.put("/api/documents/transcription_jobs/job-9", headers=auth(owner[1]), json={"status": "running"})
    drain()
    assert wakes() == [] and state(client, owner[1], monitor_id)["monitorState"] == "armed"
    client.put("/api/documents/transcription_jobs/job-9", headers=auth(owner[1]),
               json={"status": "done", "outputs": {"txt": "s3://b/job-9.txt"}})
    drain()
    [wake] = wakes(monitor_id)
    assert wake.content.endswith("Send the transcript to the user.\nThen offer a summary.")
    assert wake.metadata["document"]["doc"]["outputs"] == {"txt": "s3://b/job-9.txt"}
    with db():
        assert Conversation.get_by_id(wake.conversation_id).external_id == "conv-1"
    shown = state(client, owner[1], monitor_id)
    assert shown["monitorState"] == "fired" and shown["fire_count"] == 1
    assert shown["description"] == "Send the transcript to the user."  # the note's first line, without one given


def test_a_time_watch_with_delay_minutes_fires_on_the_sweeper_after_it(client, owner, run_due_checks):
    answer = armed(client, owner[1], watchType="time", delayMinutes=2, note="Call the dentist back.")
    assert answer["monitorState"] == "armed"
    run_due_checks(60)
    assert wakes() == [] and state(client, owner[1], answer["monitorId"])["monitorState"] == "armed"
    run_due_checks(90)
    [wake] = wakes(answer["monitorId"])
    assert wake.metadata["wake"]["source"] == "time" and wake.content.endswith("Call the dentist back.")
    assert state(client, owner[1], answer["monitorId"])["monitorState"] == "fired"
    run_due_checks(3600)
    assert len(wakes()) == 1


def test_a_time_watch_with_fire_at_fires_at_that_time(client, owner, run_due_checks):
    fire_at = (utcnow() + timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    answer = armed(client, owner[1], watchType="time", fireAt=fire_at)
    run_due_checks(9 * 60)
    assert wakes() == []
    run_due_checks(2 * 60)
    [wake] = wakes(answer["monitorId"])
    assert wake.metadata["fire_at"] == fire_at
    assert state(client, owner[1], answer["monitorId"])["monitorState"] == "fired"


def test_ttl_minutes_sets_the_lifetime_up_to_seven_days_and_past_it_the_watch_expires(client, owner,
                                                                                     run_due_checks):
    longest = armed(client, owner[1], watchType="dynadata_doc", itemType="ct:orders", itemId="o-1",
                    condition=DONE, ttlMinutes=10080)
    assert 10079 < minutes_from_now(longest["expiresAtIso"]) <= 10080
    short = armed(client, owner[1], watchType="dynadata_doc", itemType="ct:orders", itemId="o-2",
                  condition=DONE, ttlMinutes=2)
    assert 1 < minutes_from_now(short["expiresAtIso"]) <= 2
    run_due_checks(3 * 60)
    assert state(client, owner[1], short["monitorId"])["monitorState"] == "expired"
    assert state(client, owner[1], longest["monitorId"])["monitorState"] == "armed"
    client.put("/api/documents/ct:orders/o-2", headers=auth(owner[1]), json={"status": "done"})
    run_due_checks(0)
    assert not any(w.metadata["wake"]["source"] == "monitor" for w in wakes(short["monitorId"]))  # never fired


def test_cancel_frees_an_armed_slot_at_the_ten_per_conversation_boundary(client, owner, stranger):
    ids = [reminder(client, owner[1])["monitorId"] for _ in range(10)]
    refused = create(client, owner[1], watchType="time", delayMinutes=60)
    assert refused.status_code == 409
    assert "already has 10 armed monitors" in refused.json()["detail"]
    assert "Cancel Monitor" in refused.json()["detail"]  # the seed's name for the way out, not the tool's
    assert monitor_count() == 10
    assert reminder(client, owner[1], "conv-2")["monitorState"] == "armed"  # another conversation has its own

    cancelled = cancel(client, owner[1], ids[0])
    assert cancelled.status_code == 200 and cancelled.json() == {"monitorId": ids[0], "monitorState": "cancelled"}
    assert state(client, owner[1], ids[0])["monitorState"] == "cancelled"
    assert reminder(client, owner[1])["monitorState"] == "armed"
    assert create(client, owner[1], watchType="time", delayMinutes=60).status_code == 409  # full again

    again = cancel(client, owner[1], ids[0])
    assert again.status_code == 409 and "can't be cancelled" in again.json()["detail"]
    assert cancel(client, owner[1], "no-such-monitor").status_code == 404
    assert cancel(client, stranger[1], ids[1]).status_code == 404
    assert state(client, owner[1], ids[1])["monitorState"] == "armed"
    missing = client.post("/api/actions/monitors/cancel", headers=auth(owner[1]), json={})
    assert missing.status_code == 400 and "monitorId" in missing.json()["detail"]


def test_the_account_limit_is_a_409_across_conversations(client, owner, reconfigure):
    reconfigure(MONITOR_MAX_ARMED_PER_ACCOUNT=3)
    for n in range(3):
        reminder(client, owner[1], f"c{n}")
    refused = create(client, owner[1], watchType="time", delayMinutes=60, conversationId="c9")
    assert refused.status_code == 409 and "This account already has 3 armed monitors" in refused.json()["detail"]
    assert monitor_count() == 3


def test_a_woken_run_arms_one_more_and_the_next_level_is_refused_with_409(client, owner, run_due_checks):
    first = armed(client, owner[1], watchType="time", delayMinutes=1)
    run_due_checks(120)
    [wake] = wakes(first["monitorId"])
    child = armed(client, owner[1], watchType="time", delayMinutes=1, wokenBy=wake.id)
    assert state(client, owner[1], child["monitorId"])["lineage"] == {"depth": 1, "woken_by": wake.id}
    assert state(client, owner[1], first["monitorId"])["lineage"] == {"depth": 0, "woken_by": None}
    run_due_checks(120)
    [child_wake] = wakes(child["monitorId"])
    refused = create(client, owner[1], watchType="time", delayMinutes=1, wokenBy=str(child_wake.id))
    assert refused.status_code == 409 and "chain one level deep" in refused.json()["detail"]
    assert monitor_count() == 2


def test_a_second_monitor_from_the_same_wake_is_a_409_in_the_seeds_words(client, owner, run_due_checks):
    first = armed(client, owner[1], watchType="time", delayMinutes=1)
    run_due_checks(120)
    [wake] = wakes(first["monitorId"])
    armed(client, owner[1], watchType="time", delayMinutes=1, wokenBy=wake.id)
    again = create(client, owner[1], watchType="dynadata_doc", itemType="transcription_jobs", itemId="job-9",
                   condition=DONE, wokenBy=str(wake.id))
    assert again.status_code == 409, again.text
    assert ONE_MORE in again.json()["detail"] and f"wokenBy {wake.id}" in again.json()["detail"]
    assert monitor_count() == 2


def test_woken_by_naming_no_wake_of_this_account_is_a_400_naming_woken_by(client, owner, stranger,
                                                                        run_due_checks):
    first = armed(client, owner[1], watchType="time", delayMinutes=1)
    run_due_checks(120)
    [wake] = wakes(first["monitorId"])
    theirs = create(client, stranger[1], watchType="time", delayMinutes=60, wokenBy=wake.id)
    assert theirs.status_code == 400, theirs.text
    assert "wokenBy" in theirs.json()["detail"]
    with db():
        assert Monitor.select().where(Monitor.user == stranger[0].id).count() == 0


def test_a_workflow_step_wakes_the_chat_conversation_it_names(client, owner, run_due_checks):
    reminder(client, owner[1], "chat-7")  # the chat conversation exists
    answer = armed(client, owner[1], watchType="time", delayMinutes=1, channel="workflow", conversationId="chat-7",
                   note="The export finished; tell the user.")
    run_due_checks(120)
    [wake] = wakes(answer["monitorId"])
    with db():
        assert Conversation.get_by_id(wake.conversation_id).external_id == "chat-7"


def test_a_workflow_step_without_a_chat_conversation_to_wake_is_refused(client, owner, stranger):
    reminder(client, stranger[1], "theirs")
    tool(client, owner[1], "monitor_list", conversation="widget-1", channel="widget")  # a widget conversation
    cases = [
        ({}, "conversationId"),
        ({"conversationId": "never-seen"}, "conversationId 'never-seen' is not a chat conversation of this account"),
        ({"conversationId": "theirs"}, "conversationId 'theirs' is not a chat conversation of this account"),
        ({"conversationId": "widget-1"}, "conversationId 'widget-1' is not a chat conversation of this account"),
    ]
    before = monitor_count()
    for fields, says in cases:
        answer = client.post("/api/actions/monitors/create", headers=auth(owner[1]),
                             json={"watchType": "time", "delayMinutes": 5, "channel": "workflow", **fields})
        assert answer.status_code == 400 and says in answer.json()["detail"], (fields, answer.text)
    assert monitor_count() == before
    with db():
        assert not Conversation.select().where(Conversation.external_id == "never-seen").exists()


def test_agent_tool_names_whose_tool_it_is_and_an_unregistered_one_is_refused(client, owner):
    answer = create(client, owner[1], watchType="agent_tool", toolName="check_price",
                    condition={"expr": "data.atingiu == true"}, intervalMinutes=5)
    assert answer.status_code == 400 and "Say whose tool it is with agentId" in answer.json()["detail"]
    unknown = create(client, owner[1], watchType="agent_tool", toolName="check_price", agentId="pricing",
                     condition={"expr": "data.atingiu == true"}, intervalMinutes=5)
    assert unknown.status_code == 400 and "has no tool 'check_price'" in unknown.json()["detail"]
    assert monitor_count() == 0


def test_an_agent_tool_watch_awaiting_approval_says_so_and_carries_the_owners_approve_url(client, owner,
                                                                                       reconfigure):
    from tests.integration.test_tool_sources import AGENT, approval_tool, registered

    reconfigure(PUBLIC_APP_URL="https://vigil.example.com")
    registered(client, owner[1], approval_tool("http://127.0.0.1:9"))
    answer = armed(client, owner[1], watchType="agent_tool", agentId=AGENT, toolName="order_status",
                   toolArgs={"order": "A-1"}, condition={"expr": "data.reached == true"})
    assert answer["monitorState"] == "awaiting_approval"
    assert answer["approveUrl"] == f"https://vigil.example.com/commands/{answer['monitorId']}"
    assert any("approveUrl" in note for note in answer["notes"]) and "approve_url" not in str(answer["notes"])
    assert state(client, owner[1], answer["monitorId"])["monitorState"] == "awaiting_approval"
    login(client)
    page = client.get(answer["approveUrl"].removeprefix("https://vigil.example.com"))
    assert page.status_code == 200 and "order_status" in page.text  # the owner's page where it is approved


DOC = {"watchType": "dynadata_doc", "itemType": "transcription_jobs", "itemId": "j-1", "condition": DONE}
LATER = (datetime.now(timezone.utc) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
BAD_FIELDS = [
    ({"watchType": "cron"}, "watchType must be one of dynadata_doc, time, agent_tool"),
    ({}, "watchType must be one of"),
    ({**DOC, "colour": "red"}, "Unknown field 'colour'"),
    ({**DOC, "condition": None}, "condition is required for dynadata_doc"),
    ({**DOC, "condition": "doc.status == 'done'"}, "condition is required for dynadata_doc"),
    ({**DOC, "condition": {"expr": "doc.status == 'done'", "lang": "cel"}}, "condition is required"),
    ({**DOC, "condition": {"expr": "doc.status =="}}, "condition.expr is not valid CEL"),
    ({**DOC, "itemType": "users"}, "itemType must be one of transcription_jobs"),
    ({**DOC, "itemType": None}, "itemType must be one of"),
    ({**DOC, "itemId": None}, "itemId is required"),
    ({**DOC, "itemId": " j-1"}, "itemId must be printable text"),
    ({**DOC, "fireAt": LATER}, "fireAt belongs to time watches"),
    ({"watchType": "time", "delayMinutes": 5, "itemId": "j-1"}, "itemId belongs to dynadata_doc watches"),
    ({"watchType": "time", "delayMinutes": 5, "condition": DONE}, "condition belongs to dynadata_doc watches"),
    ({"watchType": "time"}, "fireAt (an ISO 8601 time) or delayMinutes, not both and not neither"),
    ({"watchType": "time", "delayMinutes": 5, "fireAt": LATER}, "not both"),
    ({"watchType": "time", "delayMinutes": 0}, "delayMinutes must be a number of minutes above 0"),
    ({"watchType": "time", "delayMinutes": -5}, "delayMinutes must be a number of minutes above 0"),
    ({"watchType": "time", "delayMinutes": "10"}, "delayMinutes must be a number of minutes above 0"),
    ({"watchType": "time", "delayMinutes": True}, "delayMinutes must be a number of minutes above 0"),
    ({"watchType": "time", "delayMinutes": 1440}, "delayMinutes (1440) is past the watch's lifetime, ttlMinutes"),
    ({"watchType": "time", "fireAt": "next tuesday"}, "fireAt"),
    ({"watchType": "time", "fireAt": "2020-01-01T00:00:00Z"}, "fireAt 2020-01-01T00:00:00Z has already passed"),
    ({**DOC, "ttlMinutes": 10081}, "ttlMinutes may be at most 10080 (7 days)"),
    ({**DOC, "ttlMinutes": 0}, "ttlMinutes must be a number of minutes above 0"),
    ({**DOC, "ttlMinutes": "1d"}, "ttlMinutes must be a number of minutes above 0"),
    ({**DOC, "note": 42}, "note must be text"),
    ({**DOC, "note": "x" * 4001}, "note is too long"),
    ({**DOC, "conversationId": None}, "conversationId is required"),
    ({**DOC, "conversationId": ""}, "conversationId must be text of 1 to 200 characters"),
    ({**DOC, "channel": 7}, "channel must be text"),
    ({**DOC, "wokenBy": "the last one"}, "wokenBy must be the id of the wake message"),
    ({**DOC, "channel": "widget", "conversationId": "widget-1"},
     "Monitors can't be created in conversations in the embedded widget"),
]


def test_each_bad_field_is_a_400_naming_it_and_nothing_is_created(client, owner):
    for fields, says in BAD_FIELDS:
        body = {"conversationId": "conv-1", **fields}
        body = {name: value for name, value in body.items() if value is not None}
        answer = client.post("/api/actions/monitors/create", headers=auth(owner[1]), json=body)
        assert answer.status_code == 400 and says in answer.json()["detail"], (fields, answer.text)
    for not_an_object in ([DOC], "dynadata_doc", 7):
        answer = client.post("/api/actions/monitors/create", headers=auth(owner[1]), json=not_an_object)
        assert answer.status_code == 400 and "JSON object" in answer.json()["detail"], answer.text
    assert monitor_count() == 0


def test_a_fire_at_past_the_lifetime_names_ttl_minutes_and_its_seven_day_maximum(client, owner):
    in_three_days = (utcnow() + timedelta(days=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    answer = create(client, owner[1], watchType="time", fireAt=in_three_days)
    assert answer.status_code == 400
    detail = answer.json()["detail"]
    assert "past the monitor's lifetime" in detail and "ttlMinutes" in detail
    assert "30d" not in detail and "10080" in detail, detail
    assert monitor_count() == 0
    fits = create(client, owner[1], watchType="time", fireAt=in_three_days, ttlMinutes=10080)
    assert fits.status_code == 200 and fits.json()["monitorState"] == "armed"


def test_without_a_runtime_token_create_and_cancel_are_401(client, owner):
    assert client.post("/api/actions/monitors/create", json={"conversationId": "c", **DOC}).status_code == 401
    assert client.post("/api/actions/monitors/create", headers=auth("not-a-token"),
                       json={"conversationId": "c", **DOC}).status_code == 401
    assert client.post("/api/actions/monitors/cancel", json={"monitorId": "x"}).status_code == 401
    assert monitor_count() == 0


def test_another_accounts_monitor_is_404(client, owner, stranger):
    monitor_id = reminder(client, owner[1])["monitorId"]
    assert client.get(f"/api/monitors/{monitor_id}", headers=auth(stranger[1])).status_code == 404
    assert client.get(f"/api/monitors/{monitor_id}").status_code == 401
    assert client.get("/api/monitors/no-such-monitor", headers=auth(owner[1])).status_code == 404
    assert state(client, owner[1], monitor_id)["monitorState"] == "armed"


def test_an_owner_paused_monitor_reads_paused_and_can_still_be_cancelled(client, owner):
    monitor_id = reminder(client, owner[1])["monitorId"]
    client.post(f"/api/monitors/{monitor_id}/pause", headers=auth(owner[1]))
    assert state(client, owner[1], monitor_id)["monitorState"] == "paused"
    assert cancel(client, owner[1], monitor_id).json()["monitorState"] == "cancelled"


def test_delay_minutes_may_be_fractional_or_long_within_the_ttl(client, owner):
    for minutes in (0.5, 90, 1439):
        answer = armed(client, owner[1], watchType="time", delayMinutes=minutes)
        with db():
            due = Monitor.get_by_id(answer["monitorId"]).next_check_at
        assert abs((due - utcnow()).total_seconds() - minutes * 60) < 5, minutes
