"""Idle workers sleep on the broker (tasks/wakes.py, tasks/worker.py) and still take every message, once.

A real Redis (the test database) and real Dramatiq worker threads; the worker's own idle wait is set far longer
than any bounded wait below, so a message processed within one came through the wake being tested, not a poll.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import dramatiq
import pytest
import redis
from dramatiq.brokers.redis import RedisBroker

from tasks.wakes import WakingRedisBroker, WakingStubBroker
from tasks.worker import IdleWorker
from tests.conftest import TEST_REDIS_URL

NAMESPACE = "wakes-test"
QUEUE = "wakes"
IDLE_SECONDS = 120.0    #: the workers' own idle wait: far past every bound below
BOUND_SECONDS = 20.0    #: a generous bound for a message to be processed


class Recorder:
    """What the actor saw: each argument with the time it ran, from any worker thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: list[tuple[str, float]] = []

    def __call__(self, value: str) -> None:
        with self.lock:
            self.runs.append((value, time.time()))

    def seen(self) -> Counter:
        with self.lock:
            return Counter(value for value, _ in self.runs)

    def when(self, value: str) -> float:
        with self.lock:
            return next(at for seen, at in self.runs if seen == value)

    def wait_for(self, *values: str) -> bool:
        deadline = time.monotonic() + BOUND_SECONDS
        while time.monotonic() < deadline:
            if all(self.seen()[value] for value in values):
                return True
            time.sleep(0.02)
        return False


def _actor(broker: dramatiq.Broker, recorder: Recorder) -> dramatiq.Actor:
    return dramatiq.actor(recorder, broker=broker, actor_name="record", queue_name=QUEUE, max_retries=0)


@pytest.fixture()
def running():
    """Starts IdleWorkers on brokers (each a process of its own, in effect) and stops them all afterwards."""
    started: list[tuple[IdleWorker, dramatiq.Broker]] = []

    def start(broker: dramatiq.Broker, recorder: Recorder) -> dramatiq.Actor:
        actor = _actor(broker, recorder)
        worker = IdleWorker(broker, worker_threads=2, idle_seconds=IDLE_SECONDS)
        worker.start()
        started.append((worker, broker))
        return actor

    yield start
    for worker, broker in started:
        worker.stop(timeout=10_000)
        broker.close()


def _redis_broker(beat_seconds: float = 30.0) -> WakingRedisBroker:
    return WakingRedisBroker(url=TEST_REDIS_URL, namespace=NAMESPACE, beat_seconds=beat_seconds)


def test_idle_redis_worker_wakes_for_an_enqueued_message(running):
    recorder = Recorder()
    actor = running(_redis_broker(), recorder)
    actor.send("first")
    assert recorder.wait_for("first"), "the first message was not processed"
    time.sleep(0.5)  # the consumer is back asleep
    actor.send("second")
    assert recorder.wait_for("second"), "an idle worker slept through an enqueue (beat and idle wait are longer)"
    assert recorder.seen() == Counter({"first": 1, "second": 1})


def eta(sent: float, delay_ms: int) -> float:
    """The eta Dramatiq gives a message sent at `sent` with `delay_ms`: it counts whole milliseconds
    (int(time.time() * 1000) + delay), so a message can rightly run up to 1 ms before sent + delay."""
    return (int(sent * 1000) + delay_ms) / 1000


def test_delayed_message_runs_at_its_eta_not_at_the_next_poll(running):
    recorder = Recorder()
    actor = running(_redis_broker(), recorder)
    sent = time.time()
    actor.send_with_options(args=("later",), delay=1500)
    assert recorder.wait_for("later"), "the delayed message was not processed before the bound"
    assert recorder.when("later") >= eta(sent, 1500), "the delayed message ran before its eta"


def test_a_message_whose_notification_was_missed_is_taken_at_the_next_beat(running):
    recorder = Recorder()
    running(_redis_broker(beat_seconds=0.5), recorder)
    silent = RedisBroker(url=TEST_REDIS_URL, namespace=NAMESPACE)  # Dramatiq's own: enqueues without announcing
    _actor(silent, Recorder()).send("unannounced")
    assert recorder.wait_for("unannounced"), "a message enqueued without a notification was never picked up"


def test_idle_worker_keeps_its_heartbeat_fresh():
    """Other workers take back the messages of a process whose heartbeat is stale; an idle one must not look dead."""
    broker = _redis_broker(beat_seconds=0.2)
    _actor(broker, Recorder())
    worker = IdleWorker(broker, worker_threads=1, idle_seconds=IDLE_SECONDS)
    worker.start()
    client = redis.Redis.from_url(TEST_REDIS_URL)
    try:
        beats = set()
        deadline = time.monotonic() + BOUND_SECONDS
        while len(beats) < 3 and time.monotonic() < deadline:
            if (beat := client.zscore(f"{NAMESPACE}:__heartbeats__", broker.broker_id)) is not None:
                beats.add(beat)
            time.sleep(0.05)
        assert len(beats) >= 3, f"the idle worker's heartbeat did not move: {beats}"
    finally:
        worker.stop(timeout=10_000)
        broker.close()


def test_two_workers_never_both_take_one_message(running):
    recorder = Recorder()
    running(_redis_broker(), recorder)
    running(_redis_broker(), recorder)
    producer = _actor(_redis_broker(), Recorder())
    values = [f"m{i}" for i in range(200)]
    for value in values:
        producer.send(value)
    assert recorder.wait_for(*values), f"{len(recorder.seen())} of {len(values)} processed"
    time.sleep(0.5)  # a second take of any of them would have run by now
    assert recorder.seen() == Counter({value: 1 for value in values})


def test_embedded_worker_wakes_for_messages_and_etas_and_stops_at_once():
    broker = WakingStubBroker()
    broker.emit_after("process_boot")
    recorder = Recorder()
    actor = _actor(broker, recorder)
    worker = IdleWorker(broker, worker_threads=2, idle_seconds=IDLE_SECONDS)
    worker.start()
    try:
        actor.send("now")
        sent = time.time()
        actor.send_with_options(args=("later",), delay=1000)
        assert recorder.wait_for("now", "later"), f"processed only {recorder.seen()}"
        assert recorder.when("later") >= eta(sent, 1000), "the delayed message ran before its eta"
    finally:
        worker.stop(timeout=10_000)
    threads = [*worker.workers, *worker.consumers.values()]
    assert not [thread for thread in threads if thread.is_alive()], "stop did not wake the sleeping threads"
