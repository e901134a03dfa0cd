"""A wake push survives its worker being SIGKILLed mid-send: on the real stack (web, worker, scheduler as processes
on the throwaway PostgreSQL and Redis), a webhook monitor's wake is pushed to a receiver on 127.0.0.1 that holds the
first request unanswered, so the push is in flight when the worker is killed. The worker is started again and the
receiver let go (its answer goes to a dead socket). The push's lease (WAKE_PUSH_LEASE_SECONDS, 20 s here) runs out,
the scheduler's sweep queues it again, and the new worker sends it: the wake reaches the receiver, every request
verifies with the endpoint's secret and carries the same webhook-id, so deduping on it gives the wake exactly
once; the push is recorded delivered after one attempt (the killed one never recorded an answer).

It lasts about the lease + 20 s.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta

import pytest
import requests

from tests.integration.test_wake_push import Receiver
from tests.reliability.stack import Stack

pytestmark = pytest.mark.reliability

READY = "Worker process is ready for action."  #: what Dramatiq's worker process logs once it consumes
LEASE = timedelta(seconds=20)  #: WAKE_PUSH_LEASE_SECONDS of this test's stack: its least
PUSH_GRACE_SECONDS = 2  #: tasks/scheduler.PUSH_GRACE: how long past due a push is before the sweep queues it
SETTLE_SECONDS = 25     #: bound, past the lease and the grace, for the sweep, the new worker and the send


def _wait(predicate, seconds: float, interval: float = 0.1):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()


def _start_worker(stack: Stack) -> None:
    stack.start_worker("worker")
    log = stack.logs["worker"]
    assert _wait(lambda: READY in log.read_text(errors="replace").rsplit("===== start", 1)[-1], 60), (
        f"the worker did not come up\n{stack.log_tails()}")


def _push(stack: Stack) -> tuple:
    [row] = stack.query("SELECT status, attempts, next_attempt_at, message_id FROM wake_pushes")
    return row


def test_wake_push_in_flight_when_its_worker_is_killed_is_delivered_once(stack_factory):
    began = time.monotonic()
    stack = stack_factory(WAKE_PUSH_LEASE_SECONDS=str(int(LEASE.total_seconds())))
    stack.start_web()
    _start_worker(stack)
    stack.start_scheduler()
    receiver = Receiver().start()
    try:
        receiver.hold()
        registered = requests.post(f"{stack.base}/api/wake-endpoints", headers=stack.auth, timeout=30,
                                   json={"url": receiver.url, "description": "the runtime"})
        assert registered.status_code == 201, registered.text
        secret = registered.json()["secret"]
        trigger = stack.tool("push-kill", description="the job calls back", source={"type": "webhook"},
                             max_wakes=5)["url"]
        answered = requests.post(trigger, json={"fact": "fact-survives"}, headers={"Idempotency-Key": "survives"},
                                 timeout=30)
        assert answered.status_code == 202, answered.text

        assert _wait(lambda: receiver.requests, 30), f"the push never reached the receiver\n{stack.log_tails()}"
        in_flight_at = time.monotonic()
        status, attempts, leased_until, message_id = _push(stack)
        assert (status, attempts) == ("pending", 0), "the push is held, not answered"
        stack.kill("worker")
        killed_at = time.monotonic()
        [(wake_content,)] = stack.query("SELECT content FROM messages WHERE role = 'wake'")
        assert "fact-survives" in wake_content
        _start_worker(stack)
        receiver.release()  # the killed worker's request is answered now, to a closed connection

        delivered = _wait(lambda: _push(stack)[0] == "delivered",
                          LEASE.total_seconds() + PUSH_GRACE_SECONDS + SETTLE_SECONDS, 0.2)
        delivered_at = time.monotonic()
        time.sleep(1.0)  # a second send would be on its way by now
        print(f"\nin flight at +{in_flight_at - began:.1f}s, killed {killed_at - in_flight_at:.1f}s later, "
              f"delivered {delivered_at - killed_at:.1f}s after the kill; {len(receiver.requests)} requests; "
              f"took {time.monotonic() - began:.0f}s")
        assert delivered, f"the push was never delivered: {_push(stack)}\n{stack.log_tails()}"

        payloads = receiver.verified(secret)
        assert len(receiver.requests) >= 2, "the in-flight request and the one after the lease"
        assert Counter(receiver.ids()) == {f"wake_{message_id}": len(receiver.requests)}
        deduped = {headers["webhook-id"]: payload for (_, headers, _), payload in zip(receiver.requests, payloads)}
        [(webhook_id, payload)] = deduped.items()
        assert payload["data"]["message"]["id"] == message_id and payload["data"]["cursor"] == str(message_id)
        assert payload["data"]["message"]["content"] == wake_content
        assert receiver.requests[1][1]["webhook-id"] == webhook_id

        assert _push(stack)[:2] == ("delivered", 1)
        assert stack.query("SELECT status_code FROM wake_attempts") == [(200,)]
        assert stack.query("SELECT count(*) FROM messages WHERE role = 'wake'") == [(1,)]
        resent_after = delivered_at - in_flight_at
        assert resent_after >= LEASE.total_seconds() - 2, (
            f"sent again {resent_after:.0f}s after the first send, before its lease ran out")
        assert stack.alive() == {name: True for name in stack.processes}, stack.log_tails()
    finally:
        receiver.stop()
