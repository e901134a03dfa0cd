"""Dramatiq's known loss paths, covered by the database: a stored delivery whose broker message is gone is queued
again by the scheduler's sweep and processed exactly once.

The three ways a message goes missing, each made to happen on purpose on a real RedisBroker (the throwaway Redis)
with a real Dramatiq worker, the real app and the real scheduler loop in this process:
- the enqueue never reached Redis (a broker wrapper drops it, as a network blip after the commit would);
- the retry of a failed attempt could not be enqueued (upstream PR #545: Retries' enqueue raises, the message is
  acked and gone); the first attempt fails for real, with PostgreSQL stopped;
- a delayed message (a retry waiting for its time) is lost when Redis restarts without persistence.
"""

from __future__ import annotations

import re
import threading
import time

import dramatiq
import pytest
import redis
from dramatiq import Worker
from dramatiq.brokers.redis import RedisBroker
from litestar.testing import TestClient

import tasks.runtime as runtime
from models import connection, database, utcnow
from models.db import bind
from tasks.deliveries import process_delivery, relay
from tasks.scheduler import sweep
from adapters.settings import Settings

pytestmark = pytest.mark.reliability

SWEEP_SECONDS = 2
FACT = re.compile(r"fact-(\w+)")


class LossyBroker(RedisBroker):
    """A real RedisBroker that loses the messages a test tells it to, the ways Redis loses them."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.drop_sends = False          #: drop every delivery enqueue, as a failed enqueue would
        self.fail_retries = False        #: raise on a retry's enqueue, as Redis being unreachable right then would
        self.dropped: list[int] = []
        self.failed_retries: list[int] = []

    def enqueue(self, message, *, delay=None):
        if message.actor_name in ("process_delivery", "process_deliveries"):  # one id, or the relay's batch
            ids = message.args[0] if message.actor_name == "process_deliveries" else [message.args[0]]
            if self.fail_retries and message.options.get("retries"):
                self.failed_retries.extend(ids)
                raise redis.ConnectionError("Error 111 connecting: Connection refused (injected by the test)")
            if self.drop_sends and delay is None:
                self.dropped.extend(ids)
                return message
        return super().enqueue(message, delay=delay)


@pytest.fixture()
def vigil_here(services, tmp_path):
    """Vigil's app, worker threads and scheduler loop in this process, on a fresh database of the throwaway
    PostgreSQL and a RedisBroker on the throwaway Redis; the module-level bindings are put back afterwards."""
    pg, rds = services
    url = pg.create_database("vigil_rel_loss")
    settings = Settings(VIGIL_DATA_DIR=str(tmp_path), DATABASE_URL=url, REDIS_URL=rds.url(3), SECRET_KEY="loss",
                        DELIVERY_SWEEP_SECONDS=SWEEP_SECONDS, SCHEDULER_TICK_SECONDS=0.2, MONITOR_MAX_WAKES=50)
    previous = (database.obj, runtime._current, dramatiq.get_broker())
    db = bind(url)
    from models.accounts import create_token, create_user
    from models.migrate import migrate
    from tasks.broker import setup_broker

    with connection():
        migrate()
        create_user("owner@example.com", "a-long-password")
        token = create_token("owner@example.com")
    broker = setup_broker(settings, broker=LossyBroker(url=settings.REDIS_URL))
    worker = Worker(broker, worker_threads=2, worker_timeout=100)
    worker.start()
    stop_scheduler = threading.Event()
    from tasks.scheduler import run

    scheduler = threading.Thread(target=run, args=(0.2, 100, stop_scheduler, SWEEP_SECONDS), daemon=True)
    from app import create_app

    try:
        with TestClient(create_app(settings)) as client:
            yield client, token, broker, scheduler, (pg, rds)
    finally:
        stop_scheduler.set()
        if scheduler.is_alive():
            scheduler.join(10)
        worker.stop(timeout=5000)
        broker.close()
        db.close_all()
        database.initialize(previous[0])
        runtime._current = previous[1]
        dramatiq.set_broker(previous[2])


def _query(sql: str, params: tuple = ()) -> list[tuple]:
    with connection():
        return database.execute_sql(sql, params).fetchall()


def _wait(condition, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            value = condition()
        except Exception:  # noqa: BLE001 — a read during the injected outage
            value = None
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"not within {seconds}s: {what}")


def test_lost_delivery_messages_are_swept_and_processed_exactly_once(vigil_here):
    client, token, broker, scheduler, (pg, rds) = vigil_here
    created = client.post("/api/tool/monitor", headers={"Authorization": f"Bearer {token}"}, json={
        "action": "monitor_create", "context": {"conversation_id": "loss", "channel": "chat"},
        "arguments": {"description": "the job calls back", "source": {"type": "webhook"}, "max_wakes": 50}}).json()
    path = created["result"]["url"].split("://", 1)[1].split("/", 1)[1]

    def deliver(fact: str) -> int:
        response = client.post(f"/{path}", json={"fact": f"fact-{fact}"}, headers={"Idempotency-Key": fact})
        assert response.status_code == 202, response.text
        assert relay.wait_idle(), "the web's relay did not hand the delivery to the broker"
        [(delivery_id,)] = _query("SELECT id FROM deliveries WHERE dedupe_key = %s", (f"id:{fact}",))
        return delivery_id

    def processed(delivery_id: int) -> bool:
        return _query("SELECT processed_at IS NOT NULL FROM deliveries WHERE id = %s", (delivery_id,))[0][0]

    # 1. Enqueues that never reach Redis: stored and answered 202, but nothing queued.
    broker.drop_sends = True
    dropped = [deliver(f"dropped{i}") for i in range(3)]
    assert broker.dropped == dropped
    assert redis.Redis.from_url(rds.url(3)).llen("dramatiq:deliveries") == 0, "nothing reached the queue"

    # 2. A failed attempt whose retry cannot be enqueued (PR #545): PostgreSQL is down for the first attempt.
    # Its own first message is dropped, so the only attempt is the one below, made with PostgreSQL down.
    retry_lost = deliver("retrylost")
    broker.drop_sends = False
    broker.fail_retries = True
    pg.stop()
    try:
        process_delivery.send(retry_lost)
        _wait(lambda: retry_lost in broker.failed_retries, 30, "the worker tried to enqueue the retry")
    finally:
        pg.start()
    broker.fail_retries = False

    # 3. A delayed message (a retry waiting for its time) lost when Redis restarts without persistence.
    broker.drop_sends = True
    delayed = deliver("delayed")
    broker.drop_sends = False
    process_delivery.send_with_options(args=(delayed,), delay=60_000)
    rds.restart(down_seconds=0.5)
    assert not redis.Redis.from_url(rds.url(3)).keys("dramatiq:*"), "Redis came back empty"

    # Nothing brought them back by itself: every one is still unprocessed, and too fresh to be swept yet.
    lost = [*dropped, retry_lost, delayed]
    time.sleep(1)
    assert [processed(d) for d in lost] == [False] * len(lost)
    with connection():
        assert sweep(utcnow(), 3600) == 0, "the sweep leaves deliveries younger than its threshold alone"

    # The scheduler's sweep queues them again; each wakes the conversation once.
    scheduler.start()
    _wait(lambda: all(processed(d) for d in lost), 60, f"deliveries {lost} processed after the sweep")
    for delivery_id in lost:  # a late duplicate of each message does nothing
        process_delivery.send(delivery_id)
    broker.join("deliveries", timeout=30_000)
    contents = [row[0] for row in _query("SELECT m.content FROM wakes w JOIN messages m ON m.id = w.message_id")]
    facts = sorted(FACT.search(content).group(1) for content in contents)
    assert facts == sorted(["dropped0", "dropped1", "dropped2", "retrylost", "delayed"])
    assert _query("SELECT count(*) FROM deliveries WHERE processed_at IS NULL") == [(0,)]
