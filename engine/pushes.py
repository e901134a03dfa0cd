"""Wakes pushed to a runtime as Standard Webhooks messages: the body, the signature headers, and what an
attempt's answer means for the next one (Svix's schedule). Pure: the send itself goes through engine/http.py."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime

from engine.signatures import sign

#: seconds to wait before each attempt (Svix's schedule): the first at once, the eighth 10 h after the seventh
SCHEDULE = (0, 5, 5 * 60, 30 * 60, 2 * 3600, 5 * 3600, 10 * 3600, 10 * 3600)
#: a receiver that has failed this long (no success in between) is disabled, and its owner told why
DISABLE_AFTER = timedelta(days=5)
#: the most a body may be; a wake's text is cut to fit (the cursor still reads the whole message)
MAX_BODY_BYTES = 20 * 1024
#: the most a Retry-After may push the next attempt out
MAX_RETRY_AFTER_SECONDS = 10 * 3600
#: what an answer's body is kept to, for the owner's list of attempts
MAX_ANSWER_CHARS = 200

DELIVERED, RETRY, GIVE_UP, DISABLE = "delivered", "retry", "give_up", "disable"


@dataclass(frozen=True)
class Verdict:
    """What one attempt's answer means: delivered; tried again at `next_at`; given up (the schedule is spent);
    or the receiver disabled (410 Gone, or failing past DISABLE_AFTER), with why."""
    kind: str
    next_at: datetime | None = None
    why: str = ""


def webhook_id(message_id: int) -> str:
    """The message's id as the receiver dedupes on it: the same on every attempt and every endpoint."""
    return f"wake_{message_id}"


def body(conversation_id: str, message: dict) -> bytes:
    """The JSON body of one wake, under MAX_BODY_BYTES: the text is cut (and said so) when it would not fit."""
    def encoded(msg: dict) -> bytes:
        return json.dumps({"type": "vigil.wake", "timestamp": msg["created_at"],
                           "data": {"conversation_id": conversation_id, "message": msg,
                                    "cursor": str(msg["id"])}}, separators=(",", ":")).encode()
    raw = encoded(message)
    if len(raw) <= MAX_BODY_BYTES:
        return raw
    slim = {**message, "metadata": {"wake": (message.get("metadata") or {}).get("wake", {}), "truncated": True}}
    if len(encoded(slim)) <= MAX_BODY_BYTES:  # the metadata was what did not fit
        return encoded(slim)
    text, low, high = slim["content"], 0, len(slim["content"])
    while low < high:  # the longest start of the text that fits (rare: the found text is capped already)
        middle = (low + high + 1) // 2
        if len(encoded({**slim, "content": text[:middle] + "…"})) <= MAX_BODY_BYTES:
            low = middle
        else:
            high = middle - 1
    slim["content"] = text[:low] + "…"
    return encoded(slim)


def headers(message_id: int, secrets: list[str], raw: bytes, now: float) -> dict[str, str]:
    """The Standard Webhooks headers: one `v1,` signature per secret (two during a rotation)."""
    signed = [sign("standard_webhooks", secret, raw, now, webhook_id(message_id)) for secret in secrets]
    first = signed[0]
    return {"content-type": "application/json", "webhook-id": first["webhook-id"],
            "webhook-timestamp": first["webhook-timestamp"],
            "webhook-signature": " ".join(s["webhook-signature"] for s in signed)}


def judge_answer(status: int | None, retry_after: str | None, attempts: int, failing_since: datetime | None,
                 now: datetime, rand: float | None = None) -> Verdict:
    """What an answer means after `attempts` attempts (this one included). `status` None: no answer at all
    (refused, timed out, blocked). `failing_since`: when the receiver's current run of failures began."""
    if status is not None and 200 <= status < 300:
        return Verdict(DELIVERED)
    if status == 410:
        return Verdict(DISABLE, why="The receiver answered 410 Gone, which means it wants no more wakes.")
    if failing_since is not None and now - failing_since >= DISABLE_AFTER:
        return Verdict(DISABLE, why=f"Every attempt has failed since {failing_since:%Y-%m-%d %H:%M} UTC "
                                    f"({DISABLE_AFTER.days} days).")
    if attempts >= len(SCHEDULE):
        return Verdict(GIVE_UP, why=f"All {len(SCHEDULE)} attempts failed.")
    delay = jittered(SCHEDULE[attempts], random.random() if rand is None else rand)
    if status in (429, 503) and retry_after:
        delay = max(delay, min(retry_after_seconds(retry_after, now), MAX_RETRY_AFTER_SECONDS))
    return Verdict(RETRY, next_at=now + timedelta(seconds=delay))


def jittered(seconds: float, rand: float) -> float:
    """±10% of the wait, so receivers that failed together are not retried together."""
    return seconds * (0.9 + 0.2 * rand)


def retry_after_seconds(value: str, now: datetime) -> float:
    """A Retry-After header, seconds or an HTTP date; 0 when it says nothing usable."""
    value = value.strip()
    if value.isascii() and value.isdigit():  # not isdigit() alone: "³" is a digit int() refuses
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return 0.0
    if when.tzinfo is not None:
        when = when.replace(tzinfo=None) - (when.utcoffset() or timedelta())
    return max(0.0, (when - now).total_seconds())


def answer_summary(status: int | None, error: str, text: bytes) -> str:
    """One line for the owner's list of attempts: the status and the start of what came back, or the error."""
    if status is None:
        return error[:MAX_ANSWER_CHARS]
    snippet = " ".join(text[:MAX_ANSWER_CHARS * 2].decode("utf-8", "replace").split())[:MAX_ANSWER_CHARS]
    if 300 <= status < 400:
        return f"{status}: a redirect, which is not followed; register the final URL"
    return f"{status}" + (f": {snippet}" if snippet else "")
