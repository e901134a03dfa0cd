"""Seed 001's actions/monitors/create fields turned into monitor_create arguments (engine/actions.py)."""

import pytest

from adapters.settings import Settings, SettingsError
from engine.actions import DEFAULT_TTL_MINUTES, MAX_TTL_MINUTES, in_seed_terms, translate_create
from engine.errors import SpecError
from engine.spec import Limits, parse_create

CONDITION = {"expr": "has(doc.status) && doc.status == 'done'"}


def doc_watch(**fields):
    return {"watchType": "dynadata_doc", "itemType": "transcription_jobs", "itemId": "job-1",
            "condition": CONDITION, **fields}


def time_watch(**fields):
    return {"watchType": "time", **({"delayMinutes": 30} if "fireAt" not in fields else {}), **fields}


def refusal(body) -> str:
    with pytest.raises(SpecError) as error:
        translate_create(body)
    message = str(error.value)
    assert "\n" not in message
    return message


# --- each watch type ---------------------------------------------------------------------------------------------

def test_dynadata_doc_becomes_a_document_source_with_a_cel_check():
    call = translate_create(doc_watch(note="Send the transcript", conversationId="conv-7"))
    assert call.arguments == {
        "expires_in": DEFAULT_TTL_MINUTES * 60, "description": "Send the transcript", "note": "Send the transcript",
        "source": {"type": "document", "item_type": "transcription_jobs", "item_id": "job-1"},
        "check": {"type": "cel", "expr": CONDITION["expr"]}}
    assert (call.conversation_id, call.channel, call.agent_id, call.woken_by) == ("conv-7", "chat", "", None)


def test_dynadata_doc_arguments_are_accepted_by_monitor_create():
    spec, notes = parse_create(translate_create(doc_watch(itemType="ct:render")).arguments, Limits())
    assert (spec.source.type, spec.source.item_type, spec.check.expr) == ("document", "ct:render", CONDITION["expr"])
    assert spec.ttl_seconds == 86400 and notes == []


def test_time_with_delay_minutes_becomes_a_delay_in_seconds():
    call = translate_create(time_watch(delayMinutes=30))
    assert call.arguments["source"] == {"type": "time", "delay": 1800}
    assert call.arguments["description"] == "Reminder"
    spec, _ = parse_create(call.arguments, Limits())
    assert spec.source.delay == 1800


@pytest.mark.parametrize("minutes, seconds", [(0.5, 30), (1.25, 75), (0.001, 1)])
def test_time_fractional_delay_minutes_round_to_whole_seconds_at_least_one(minutes, seconds):
    assert translate_create(time_watch(delayMinutes=minutes)).arguments["source"]["delay"] == seconds


def test_time_with_fire_at_passes_it_on_for_monitor_create_to_check():
    call = translate_create(time_watch(fireAt="2026-12-01T17:00:00Z"))
    assert call.arguments["source"] == {"type": "time", "fire_at": "2026-12-01T17:00:00Z"}


def test_agent_tool_becomes_a_tool_source_polled_at_its_interval_with_its_condition():
    call = translate_create({"watchType": "agent_tool", "toolName": "get_ticket", "toolArgs": {"id": "T-7"},
                             "agentId": "support", "intervalMinutes": 10, "condition": {"expr": "data.done"}})
    assert call.arguments["source"] == {"type": "tool", "tool": "get_ticket", "arguments": {"id": "T-7"},
                                        "agent_id": "support"}
    assert call.arguments["check"] == {"type": "cel", "expr": "data.done"}
    assert call.arguments["interval"] == 600 and call.arguments["description"] == "the tool get_ticket"


def tool_watch(**fields):
    return {"watchType": "agent_tool", "toolName": "get_ticket", "toolArgs": {"id": "T-7"}, "agentId": "support",
            "condition": {"expr": "data.done"}, **fields}


@pytest.mark.parametrize("minutes", [0, 2, 0.001])
def test_agent_tool_interval_below_five_minutes_is_clamped_to_the_floor_with_a_note(minutes):
    spec, notes = parse_create(translate_create(tool_watch(intervalMinutes=minutes)).arguments, Limits())
    assert spec.interval_seconds == 300
    assert any("the interval was raised from" in note and "to 5m" in note for note in notes), notes


def test_agent_tool_interval_floor_follows_the_operator_setting():
    spec, notes = parse_create(translate_create(tool_watch(intervalMinutes=1)).arguments,
                               Limits(tool_min_interval=60))
    assert spec.interval_seconds == 60 and notes == []
    spec, notes = parse_create(translate_create(tool_watch(intervalMinutes=0)).arguments,
                               Limits(tool_min_interval=60))
    assert spec.interval_seconds == 60 and notes == ["A watched tool is polled every 1m at the soonest and once a "
                                                     "day at the latest, so the interval was raised from 0s to 1m."]


def test_agent_tool_interval_is_not_raised_by_the_general_monitor_floor():
    limits = Limits(min_interval=600, tool_min_interval=300)
    spec, notes = parse_create(translate_create(tool_watch(intervalMinutes=5)).arguments, limits)
    assert spec.interval_seconds == 300 and notes == []


def test_tool_min_interval_setting_is_read_and_a_bad_one_refused(tmp_path):
    env = {"VIGIL_DATA_DIR": str(tmp_path), "SECRET_KEY": "k"}
    assert Settings.from_env(env).TOOL_MIN_INTERVAL_SECONDS == 300
    assert Settings.from_env({**env, "TOOL_MIN_INTERVAL_SECONDS": "60"}).TOOL_MIN_INTERVAL_SECONDS == 60
    for bad in ("0", "86401"):
        with pytest.raises(SettingsError, match="TOOL_MIN_INTERVAL_SECONDS must be from 1 to 86400"):
            Settings.from_env({**env, "TOOL_MIN_INTERVAL_SECONDS": bad})


@pytest.mark.parametrize("minutes", [-1, "5", float("nan"), True])
def test_agent_tool_interval_that_is_not_minutes_is_refused(minutes):
    assert refusal(tool_watch(intervalMinutes=minutes)).startswith("intervalMinutes must be a number of minutes")


def test_agent_tool_without_a_condition_is_refused_with_an_example():
    message = refusal({"watchType": "agent_tool", "toolName": "get_ticket"})
    assert message.startswith("condition is required for agent_tool") and "data.reached == true" in message


@pytest.mark.parametrize("watch_type", [None, "", "document", "Time", "cron", 3])
def test_unknown_watch_type_is_refused_naming_the_three(watch_type):
    assert refusal({"watchType": watch_type}) == (f"watchType must be one of dynadata_doc, time, agent_tool "
                                                  f"(got {watch_type!r}).")


@pytest.mark.parametrize("body", [None, [], "time", 3])
def test_body_must_be_an_object(body):
    assert refusal(body) == "The body must be a JSON object with watchType and its fields."


# --- fields ------------------------------------------------------------------------------------------------------

def test_unknown_field_is_refused_listing_the_fields():
    message = refusal(time_watch(reminder="x"))
    assert message.startswith("Unknown field 'reminder'; the fields are watchType, itemType, itemId, condition")
    assert "ttlMinutes" in message and "wokenBy" in message


@pytest.mark.parametrize("body, field, owner", [
    (time_watch(itemId="job-1"), "itemId", "dynadata_doc"),
    (time_watch(itemType="transcription_jobs"), "itemType", "dynadata_doc"),
    (time_watch(condition=CONDITION), "condition", "dynadata_doc"),
    (time_watch(toolName="t"), "toolName", "agent_tool"),
    (doc_watch(fireAt="2026-12-01T17:00:00Z"), "fireAt", "time"),
    (doc_watch(delayMinutes=5), "delayMinutes", "time"),
    (doc_watch(toolArgs={}), "toolArgs", "agent_tool"),
    (doc_watch(intervalMinutes=5), "intervalMinutes", "agent_tool"),
    (doc_watch(agentId="agent-1"), "agentId", "agent_tool"),
])
def test_stray_field_of_another_watch_type_is_refused(body, field, owner):
    assert refusal(body) == f"{field} belongs to {owner} watches; take it out of a {body['watchType']} watch."


@pytest.mark.parametrize("condition", [None, "doc.status == 'done'", {}, {"expr": 3}, {"expr": None},
                                       {"expr": "true", "lang": "cel"}, ["doc.status == 'done'"]])
def test_dynadata_doc_condition_must_be_an_expr_descriptor(condition):
    body = doc_watch(condition=condition) if condition is not None else {
        k: v for k, v in doc_watch().items() if k != "condition"}
    assert refusal(body).startswith("condition is required for dynadata_doc: a CEL descriptor {\"expr\": \"…\"}")


# --- fireAt / delayMinutes -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("body", [{"watchType": "time"},
                                  {"watchType": "time", "fireAt": "2026-12-01T17:00:00Z", "delayMinutes": 5}])
def test_time_takes_fire_at_or_delay_minutes_exactly_once(body):
    assert refusal(body) == "A time watch takes fireAt (an ISO 8601 time) or delayMinutes, not both and not neither."


@pytest.mark.parametrize("delay", [0, -1, -0.5, "30", True, False, [30], {"m": 1}])
def test_time_delay_minutes_must_be_a_number_above_zero(delay):
    assert refusal(time_watch(delayMinutes=delay)) == (f"delayMinutes must be a number of minutes above 0 "
                                                       f"(got {delay!r}).")


@pytest.mark.parametrize("delay, ttl", [(1440, None), (2000, None), (600, 600), (601, 600)])
def test_time_delay_at_or_past_the_ttl_is_refused(delay, ttl):
    body = time_watch(delayMinutes=delay, **({"ttlMinutes": ttl} if ttl else {}))
    message = refusal(body)
    assert message.startswith(f"delayMinutes ({delay}) is past the watch's lifetime, ttlMinutes "
                              f"({ttl or DEFAULT_TTL_MINUTES})")
    assert f"at most {MAX_TTL_MINUTES}" in message


def test_time_delay_just_inside_the_ttl_is_kept():
    call = translate_create(time_watch(delayMinutes=2000, ttlMinutes=3000))
    assert call.arguments["source"]["delay"] == 120_000 and call.arguments["expires_in"] == 180_000


# --- ttlMinutes -----------------------------------------------------------------------------------------------------

def test_ttl_minutes_default_is_a_day():
    assert DEFAULT_TTL_MINUTES == 1440
    assert translate_create(time_watch()).arguments["expires_in"] == 86_400
    assert translate_create(doc_watch()).arguments["expires_in"] == 86_400


@pytest.mark.parametrize("ttl, seconds", [(10080, 604_800), (60, 3600), (90.5, 5430)])
def test_ttl_minutes_up_to_a_week_becomes_expires_in_seconds(ttl, seconds):
    assert translate_create(time_watch(delayMinutes=1, ttlMinutes=ttl)).arguments["expires_in"] == seconds


def test_ttl_minutes_over_a_week_is_refused_not_capped():
    assert MAX_TTL_MINUTES == 10080
    assert refusal(time_watch(ttlMinutes=10081)) == "ttlMinutes may be at most 10080 (7 days) (got 10081)."


@pytest.mark.parametrize("ttl", [0, -5, "1440", True])
def test_ttl_minutes_must_be_a_number_above_zero(ttl):
    assert refusal(time_watch(ttlMinutes=ttl)) == f"ttlMinutes must be a number of minutes above 0 (got {ttl!r})."


def test_ttl_minutes_applies_to_document_watches_too():
    assert translate_create(doc_watch(ttlMinutes=120)).arguments["expires_in"] == 7200


# --- description -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("note, description", [
    ("Send the transcript to the user\nthen summarise it", "Send the transcript to the user"),
    ("\n   \n  Post the render link  \nmore", "Post the render link"),
    ("x" * 300, "x" * 200),
])
def test_description_is_the_notes_first_line(note, description):
    call = translate_create(doc_watch(note=note))
    assert call.arguments["description"] == description
    assert call.arguments["note"] == note  # the note itself is kept verbatim


@pytest.mark.parametrize("body, description", [
    (doc_watch(), "transcription_jobs/job-1"),
    (doc_watch(note="  \n  "), "transcription_jobs/job-1"),
    (time_watch(), "Reminder"),
    (time_watch(note=""), "Reminder"),
])
def test_description_without_a_note_says_what_is_watched(body, description):
    assert translate_create(body).arguments["description"] == description


def test_description_given_wins_over_the_note():
    assert translate_create(time_watch(note="Call Ana", description="Ana's call")).arguments["description"] == \
        "Ana's call"


def test_note_absent_or_null_is_left_out():
    assert "note" not in translate_create(time_watch()).arguments
    assert "note" not in translate_create(time_watch(note=None)).arguments


# --- conversationId, channel, wokenBy ---------------------------------------------------------------------------------

@pytest.mark.parametrize("woken_by, parsed", [(None, None), ("", None), (42, 42), ("42", 42)])
def test_woken_by_is_the_waking_message_id(woken_by, parsed):
    assert translate_create(time_watch(wokenBy=woken_by)).woken_by == parsed


@pytest.mark.parametrize("woken_by", [True, False, "x", "4.2", 4.2, "-3", "٣", [1], {"id": 1}])
def test_woken_by_that_is_not_a_message_id_is_refused(woken_by):
    assert refusal(time_watch(wokenBy=woken_by)) == "wokenBy must be the id of the wake message that started this run."


def test_channel_defaults_to_chat_and_is_passed_on():
    assert translate_create(time_watch()).channel == "chat"
    assert translate_create(time_watch(channel="workflow", conversationId="c-1")).channel == "workflow"


@pytest.mark.parametrize("field", ["conversationId", "channel"])
@pytest.mark.parametrize("value", ["", "   ", 7, "x" * 201, "a\x00b"])
def test_text_fields_must_be_short_text(field, value):
    assert refusal(time_watch(**{field: value})).startswith(f"{field} must be text of 1 to 200 characters")


# --- refusals in seed 001's words ---------------------------------------------------------------------------------

@pytest.mark.parametrize("ours, theirs", [
    ("source.fire_at is not an ISO 8601 time", "fireAt is not an ISO 8601 time"),
    ("source.item_type must be one of …", "itemType must be one of …"),
    ("source.item_id is required", "itemId is required"),
    ("check.expr is not valid CEL", "condition.expr is not valid CEL"),
    ("expires_in must look like '7d'", "ttlMinutes must look like '7d'"),
    ("cancel one with monitor_cancel; see monitor_list", "cancel one with Cancel Monitor; see GET /api/monitors"),
    ("nothing to rename here", "nothing to rename here"),
])
def test_in_seed_terms_names_seed_001_fields(ours, theirs):
    assert in_seed_terms(ours) == theirs


def test_in_seed_terms_on_a_real_refusal_from_monitor_create():
    arguments = translate_create(doc_watch(itemType="people")).arguments
    with pytest.raises(SpecError) as error:
        parse_create(arguments, Limits())
    assert in_seed_terms(str(error.value)).startswith("itemType must be one of transcription_jobs")
