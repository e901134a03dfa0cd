"""engine/pushes.py, with `now` passed in: the body and headers of a pushed wake verify with the Standard Webhooks
reference library (`standardwebhooks`), with either secret during a rotation; what each answer means for the next
attempt (Svix's schedule with ±10% jitter, 2xx delivered, 410 and five failing days disable, the eighth failure
gives up, 429/503 Retry-After honoured in seconds or as an HTTP date and capped at 10 h); and a huge wake is cut
to a body under 20 KB that is still valid JSON with its cursor intact."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from engine.pushes import (
    DELIVERED, DISABLE, GIVE_UP, MAX_BODY_BYTES, MAX_RETRY_AFTER_SECONDS, RETRY, SCHEDULE, answer_summary, body,
    headers, judge_answer, retry_after_seconds, webhook_id,
)
from engine.signatures import new_secret

NOW = datetime(2026, 3, 1, 12, 0, 0)
#: Svix's retry schedule, as https://docs.svix.com/retries publishes it: immediately, 5 s, 5 min, 30 min, 2 h,
#: 5 h, 10 h, 10 h
SVIX = (0, 5, 5 * 60, 30 * 60, 2 * 3600, 5 * 3600, 10 * 3600, 10 * 3600)
FAILED_ANSWERS = [None, 301, 302, 307, 400, 401, 403, 404, 408, 413, 429, 500, 502, 503, 504]


def wake_message(message_id: int = 41, content: str = "The price is now 88 (it was 95).", **metadata) -> dict:
    """A wake message as models.conversations.message_json gives it."""
    return {"id": message_id, "role": "wake", "content": content, "created_at": "2026-03-01T12:00:00.123456Z",
            "metadata": {"wake": {"source": "check", "ref_id": "mon_1", "dedupe_key": "check:1",
                                  "description": "the price drops"}, "on_match": "notify", **metadata}}


def delay_of(verdict) -> float:
    return (verdict.next_at - NOW).total_seconds()


# --- the body and its signatures --------------------------------------------------------------------------

def test_pushed_wake_verifies_with_the_standard_webhooks_library():
    secret = new_secret("standard_webhooks")
    raw = body("conv-1", wake_message())
    sent = headers(41, [secret], raw, time.time())
    assert sent["webhook-id"] == webhook_id(41) == "wake_41"
    assert sent["content-type"] == "application/json" and sent["webhook-signature"].count("v1,") == 1
    payload = Webhook(secret).verify(raw, sent)
    assert payload == {"type": "vigil.wake", "timestamp": "2026-03-01T12:00:00.123456Z",
                       "data": {"conversation_id": "conv-1", "message": wake_message(), "cursor": "41"}}


def test_pushed_wake_does_not_verify_with_another_secret_or_a_changed_body():
    secret = new_secret("standard_webhooks")
    raw = body("conv-1", wake_message())
    sent = headers(41, [secret], raw, time.time())
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret("standard_webhooks")).verify(raw, sent)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(raw.replace(b"88", b"87"), sent)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(raw, {**sent, "webhook-id": "wake_42"})


def test_pushed_wake_timestamp_is_the_send_time_given():
    secret = new_secret("standard_webhooks")
    raw = body("conv-1", wake_message())
    sent = headers(41, [secret], raw, 1_700_000_000.9)
    assert sent["webhook-timestamp"] == "1700000000"
    with pytest.raises(WebhookVerificationError, match="too old"):  # a receiver refuses a replay days later
        Webhook(secret).verify(raw, sent)


def test_pushed_wake_during_rotation_verifies_with_either_secret():
    old, new = new_secret("standard_webhooks"), new_secret("standard_webhooks")
    raw = body("conv-1", wake_message())
    sent = headers(41, [new, old], raw, time.time())
    signatures = sent["webhook-signature"].split(" ")
    assert len(signatures) == 2 and all(s.startswith("v1,") for s in signatures)
    assert Webhook(old).verify(raw, sent) == Webhook(new).verify(raw, sent) == json.loads(raw)
    # each signature alone verifies with exactly one of the two secrets
    for signature, right, wrong in ((signatures[0], new, old), (signatures[1], old, new)):
        alone = {**sent, "webhook-signature": signature}
        Webhook(right).verify(raw, alone)
        with pytest.raises(WebhookVerificationError):
            Webhook(wrong).verify(raw, alone)


# --- the schedule -----------------------------------------------------------------------------------------

def test_push_schedule_is_svix():
    assert SCHEDULE == SVIX


@pytest.mark.parametrize("attempts", range(1, len(SVIX)))
@pytest.mark.parametrize("rand", [0.0, 0.25, 0.5, 0.999999, None])
def test_push_retry_waits_svix_delay_within_ten_percent(attempts, rand):
    verdict = judge_answer(500, None, attempts, NOW - timedelta(seconds=1), NOW, rand=rand)
    assert verdict.kind == RETRY and verdict.why == ""
    assert SVIX[attempts] * 0.9 <= delay_of(verdict) <= SVIX[attempts] * 1.1


def test_push_retry_jitter_spans_both_sides():
    delays = [delay_of(judge_answer(503, None, 2, None, NOW, rand=r)) for r in (0.0, 0.5, 1.0)]
    assert delays == [270.0, 300.0, 330.0]
    randomised = {delay_of(judge_answer(503, None, 2, None, NOW)) for _ in range(200)}
    assert len(randomised) > 100 and min(randomised) >= 270 and max(randomised) <= 330


@pytest.mark.parametrize("status", [200, 201, 202, 204, 299])
def test_push_answered_2xx_is_delivered(status):
    assert judge_answer(status, None, 1, None, NOW).kind == DELIVERED
    # a success ends the failing run, however long it was and however many attempts it took
    assert judge_answer(status, None, 8, NOW - timedelta(days=30), NOW).kind == DELIVERED


@pytest.mark.parametrize("status", FAILED_ANSWERS)
def test_push_answered_3xx_4xx_5xx_or_nothing_is_retried(status):
    verdict = judge_answer(status, None, 1, None, NOW, rand=0.5)
    assert verdict.kind == RETRY and delay_of(verdict) == 5.0


def test_push_answered_410_disables_the_endpoint():
    verdict = judge_answer(410, None, 1, None, NOW)
    assert verdict.kind == DISABLE and verdict.next_at is None and "410" in verdict.why


@pytest.mark.parametrize("status", FAILED_ANSWERS)
def test_push_failing_five_days_disables_the_endpoint(status):
    since = NOW - timedelta(days=5)
    verdict = judge_answer(status, None, 3, since, NOW)
    assert verdict.kind == DISABLE and verdict.next_at is None
    assert "2026-02-24 12:00" in verdict.why and "5 days" in verdict.why
    assert judge_answer(status, None, 3, since + timedelta(seconds=1), NOW).kind == RETRY


def test_push_gives_up_after_eight_attempts():
    last_retry = judge_answer(500, None, 7, NOW - timedelta(hours=1), NOW, rand=0.5)
    assert last_retry.kind == RETRY and delay_of(last_retry) == 10 * 3600
    for status in FAILED_ANSWERS:
        verdict = judge_answer(status, "60", 8, NOW - timedelta(days=1), NOW)
        assert verdict.kind == GIVE_UP and verdict.next_at is None and "8" in verdict.why


def test_push_schedule_walked_through_is_eight_attempts_over_a_day_and_a_half():
    """Every attempt failing, from the first: seven retries at Svix's times, then the push is given up."""
    now, since, verdicts = NOW, None, []
    for attempt in range(1, 9):
        verdict = judge_answer(503, None, attempt, since, now, rand=0.5)
        verdicts.append(verdict.kind)
        since = since or now
        if verdict.next_at:
            now = verdict.next_at
    assert verdicts == [RETRY] * 7 + [GIVE_UP]
    assert now - NOW == timedelta(seconds=sum(SVIX)) < timedelta(days=5)


# --- Retry-After ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("status", [429, 503])
def test_push_retry_after_seconds_is_honoured(status):
    verdict = judge_answer(status, "3600", 1, None, NOW, rand=0.5)
    assert verdict.kind == RETRY and delay_of(verdict) == 3600


@pytest.mark.parametrize("status", [429, 503])
def test_push_retry_after_http_date_is_honoured(status):
    when = format_datetime((NOW + timedelta(hours=2)).replace(tzinfo=timezone.utc), usegmt=True)
    assert when.endswith("GMT")
    assert delay_of(judge_answer(status, when, 1, None, NOW, rand=0.5)) == 7200
    other_zone = (NOW + timedelta(hours=2)).replace(tzinfo=timezone(timedelta(hours=2))).strftime(
        "%a, %d %b %Y %H:%M:%S +0200")  # the same wall time two hours east: the same moment as NOW
    assert delay_of(judge_answer(status, other_zone, 1, None, NOW, rand=0.5)) == 5


@pytest.mark.parametrize("status", [429, 503])
@pytest.mark.parametrize("value", ["86400", "36001", "999999999999",
                                   format_datetime((NOW + timedelta(days=3)).replace(tzinfo=timezone.utc),
                                                   usegmt=True)])
def test_push_retry_after_is_capped_at_ten_hours(status, value):
    assert delay_of(judge_answer(status, value, 1, None, NOW, rand=0.5)) == MAX_RETRY_AFTER_SECONDS == 36000


@pytest.mark.parametrize("value", ["10", "0", "", "soon", "-5", "1.5e3", "³", "٣٠",
                                   format_datetime((NOW - timedelta(hours=1)).replace(tzinfo=timezone.utc),
                                                   usegmt=True)])
def test_push_retry_after_shorter_or_unusable_keeps_the_schedule(value):
    verdict = judge_answer(429, value, 3, None, NOW, rand=0.5)
    assert verdict.kind == RETRY and delay_of(verdict) == 1800


@pytest.mark.parametrize("status", [500, 502, 504, 400, 302])
def test_push_retry_after_on_other_statuses_is_ignored(status):
    assert delay_of(judge_answer(status, "3600", 1, None, NOW, rand=0.5)) == 5


def test_push_retry_after_does_not_outlive_the_rules():
    assert judge_answer(429, "3600", 8, None, NOW).kind == GIVE_UP
    assert judge_answer(503, "3600", 2, NOW - timedelta(days=6), NOW).kind == DISABLE


def test_retry_after_seconds_reads_both_forms():
    assert retry_after_seconds("120", NOW) == retry_after_seconds(" 120 ", NOW) == 120.0
    assert retry_after_seconds("Sun, 01 Mar 2026 12:01:30 GMT", NOW) == 90.0
    assert retry_after_seconds("Sun, 01 Mar 2026 11:00:00 GMT", NOW) == 0.0  # in the past
    for nonsense in ("", "soon", "-1", "12s", "Sun, 99 Foo 2026"):
        assert retry_after_seconds(nonsense, NOW) == 0.0


# --- the body's size ----------------------------------------------------------------------------------------

def test_push_body_of_an_ordinary_wake_is_whole():
    message = wake_message(snapshot={"price": 88})
    raw = body("conv-1", message)
    parsed = json.loads(raw)
    assert parsed["data"]["message"] == message and "truncated" not in parsed["data"]["message"]["metadata"]


@pytest.mark.parametrize("text", ["x" * 200_000, "é" * 60_000, "🔔 " * 40_000, "a\"\\\n<>&" * 20_000])
def test_push_body_of_a_huge_wake_is_cut_under_20_kb(text):
    message = wake_message(987654, text, snapshot={"items": ["y" * 1000] * 40})
    raw = body("conv-1", message)
    assert len(raw) <= MAX_BODY_BYTES == 20 * 1024
    parsed = json.loads(raw)
    sent = parsed["data"]["message"]
    assert parsed["type"] == "vigil.wake" and parsed["data"]["conversation_id"] == "conv-1"
    assert parsed["data"]["cursor"] == "987654" and sent["id"] == 987654 and sent["role"] == "wake"
    assert sent["created_at"] == message["created_at"] == parsed["timestamp"]
    assert sent["metadata"] == {"wake": message["metadata"]["wake"], "truncated": True}
    assert sent["content"].endswith("…") and text.startswith(sent["content"][:-1])
    assert len(sent["content"]) > 1000, "the cut keeps as much of the text as fits"
    secret = new_secret("standard_webhooks")
    assert Webhook(secret).verify(raw, headers(987654, [secret], raw, time.time())) == parsed


def test_push_body_cut_keeps_the_longest_start_that_fits():
    raw = body("conv-1", wake_message(7, "z" * 100_000))
    longer = json.loads(raw)
    longer["data"]["message"]["content"] = "z" + longer["data"]["message"]["content"]
    assert len(json.dumps(longer, separators=(",", ":")).encode()) > MAX_BODY_BYTES


def test_push_body_with_huge_metadata_drops_it_but_keeps_the_text_whole():
    message = wake_message(8, "short text", snapshot={"blob": "q" * 50_000})
    raw = body("conv-1", message)
    parsed = json.loads(raw)
    assert len(raw) <= MAX_BODY_BYTES
    assert parsed["data"]["message"]["content"] == "short text", "a text that fits is not marked as cut"
    assert parsed["data"]["message"]["metadata"] == {"wake": message["metadata"]["wake"], "truncated": True}


# --- the owner's one line -------------------------------------------------------------------------------------

def test_answer_summary_is_one_short_line():
    assert answer_summary(200, "", b"") == "200"
    assert answer_summary(500, "", b"  Internal\n\n  error  " + b"x" * 1000).startswith("500: Internal error x")
    assert len(answer_summary(500, "", b"x" * 5000)) <= len("500: ") + 200
    assert "redirect" in answer_summary(302, "", b"Found") and "not followed" in answer_summary(301, "", b"")
    assert answer_summary(None, "The url points to a loopback address", b"") == "The url points to a loopback address"
    assert answer_summary(200, "", b"\xff\xfe ok").endswith("ok")
