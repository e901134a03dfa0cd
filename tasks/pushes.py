"""Wake pushes: each wake POSTed to the account's wake endpoints as a Standard Webhooks message, at least once.

The push rows were written with the wake (models/wake_endpoints.queue_pushes). `push_message` is queued after
that commit; the scheduler's sweep queues `push_due` for retries whose time came and for pushes whose message
was lost (a worker killed between the wake and the push). A push is leased before it is sent, so two workers
never send one attempt twice; the receiver dedupes on `webhook-id` for what at-least-once still repeats.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

import dramatiq

from adapters.metrics import WAKE_PUSHES
from engine.crypto import DecryptError
from engine.errors import FetchError
from engine.http import FetchPolicy, Fetcher
from engine.pushes import DELIVERED, answer_summary, body, headers, judge_answer
from models.conversations import message_json
from models.db import utcnow
from models.wake_endpoints import Claimed, claim_push, due_pushes, pushes_for, record_attempt, signing_secrets
from tasks.runtime import current, own_endpoints

log = logging.getLogger(__name__)

#: a receiver has this long to answer (Standard Webhooks' senders use 15 s)
TIMEOUT_SECONDS = 15.0
#: what is read of an answer: enough for the owner's one line
ANSWER_BYTES = 4096

_local = threading.local()


@dramatiq.actor(queue_name="pushes", max_retries=0, time_limit=300_000)
def push_message(message_id: int) -> None:
    """A wake just written: its pushes, one per endpoint. Anything not sent here the sweep sends later."""
    for push_id in pushes_for(message_id):
        send(push_id)


@dramatiq.actor(queue_name="pushes", max_retries=0, time_limit=600_000)
def push_due(push_ids: list[int]) -> None:
    for push_id in push_ids:
        send(push_id)


ACTORS = [push_message, push_due]


def send(push_id: int) -> None:
    claimed = claim_push(push_id, utcnow(), timedelta(seconds=current().settings.WAKE_PUSH_LEASE_SECONDS))
    if claimed is None:
        return  # not due, delivered, or another worker holds it
    status, answer, latency_ms, retry_after = _post(claimed)
    now = utcnow()
    verdict = judge_answer(status, retry_after, claimed.attempts + 1, claimed.endpoint.failing_since, now)
    WAKE_PUSHES.labels(verdict.kind).inc()
    if record_attempt(claimed, status, answer, latency_ms, verdict, now) and verdict.kind != DELIVERED:
        log.info("wake push %s to endpoint %s: attempt %d %s (%s)", push_id, claimed.endpoint.id,
                 claimed.attempts + 1, verdict.kind, answer)


def _post(claimed: Claimed) -> tuple[int | None, str, int, str | None]:
    """(status or None, the owner's one line, latency in ms, Retry-After). No database connection is used."""
    runtime = current()
    message = message_json(claimed.message)
    raw = body(claimed.conversation_id, message)
    try:
        secrets = signing_secrets(claimed.endpoint, runtime.keyring, utcnow())
    except DecryptError:
        return None, "The endpoint's secret can't be decrypted with the configured keys; rotate it.", 0, None
    sent = time.monotonic()
    try:
        answer = _fetcher(runtime.settings).call(
            "POST", claimed.endpoint.url, headers(claimed.message.id, secrets, raw, time.time()), raw)
    except FetchError as exc:
        return None, exc.message, _ms(sent), None
    return (answer.status, answer_summary(answer.status, "", answer.body), _ms(sent),
            answer.headers.get("retry-after"))


def _ms(since: float) -> int:
    return int((time.monotonic() - since) * 1000)


def _fetcher(settings) -> Fetcher:
    """This thread's fetcher for pushes: the SSRF guard (never to Vigil itself), 15 s, no redirects, connections
    kept between pushes."""
    fetcher = getattr(_local, "fetcher", None)
    allow_loopback, own, egress = settings.FETCH_ALLOW_LOOPBACK, own_endpoints(settings), settings.egress
    if fetcher is None or (fetcher.policy.allow_loopback, fetcher.policy.own, fetcher.policy.egress) != (
            allow_loopback, own, egress):  # changed
        policy = FetchPolicy(timeout=TIMEOUT_SECONDS, max_bytes=ANSWER_BYTES, allow_loopback=allow_loopback,
                             max_redirects=0, own=own, egress=egress)
        fetcher = _local.fetcher = Fetcher(policy, user_agent="Vigil/0.1 (+wake push)")
    return fetcher


def queue_pushes_of(messages) -> None:
    """After the wake's commit: send what it queued (messages without endpoints queue nothing)."""
    for message in messages:
        if message is not None and getattr(message, "pushes", 0):
            push_message.send(message.id)


def sweep_pushes(now, limit: int = 200) -> int:
    """Queue the pushes due at `now` (the caller leaves the actor queued with a wake its grace first)."""
    ids = due_pushes(now, limit)
    for start in range(0, len(ids), 20):
        push_due.send(ids[start:start + 20])
    return len(ids)
