"""The delivery actors: stored trigger deliveries through the check, judge and wake; and the relay that
queues them from a web process."""

from __future__ import annotations

import logging
import threading
import time

import dramatiq

from models import utcnow
from models.deliveries import process, process_batch
from tasks.events import MonitorEvents
from tasks.runtime import current


@dramatiq.actor(queue_name="deliveries", max_retries=5, min_backoff=500, max_backoff=30000, time_limit=180_000)
def process_delivery(delivery_id: int) -> None:
    """Idempotent: a delivery already processed, or processed meanwhile by another worker, does nothing."""
    events = MonitorEvents()
    _process(delivery_id, events)
    events.publish()


def _process(delivery_id: int, events: MonitorEvents) -> None:
    runtime = current()
    done = process(delivery_id, runtime.judge_session(), runtime.judge_policy, runtime.lifecycle,
                   runtime.settings.FETCH_MAX_TEXT_BYTES, utcnow())
    if done.monitor is not None:
        events.add(done.monitor, done.woke, status_before=done.status_before)


#: the most deliveries one message carries
BATCH = 16
#: under load (the relay sent a message less than this long ago), how long it waits for more deliveries to fill
#: a message; a delivery that arrives after a quiet spell is sent at once
LINGER_SECONDS = 0.015
log = logging.getLogger(__name__)


@dramatiq.actor(queue_name="deliveries", max_retries=5, min_backoff=500, max_backoff=30000,
                time_limit=BATCH * 180_000)
def process_deliveries(delivery_ids: list[int]) -> None:
    """Deliveries the relay queued together: in as few transactions as other workers allow
    (models/deliveries.process_batch), else each on its own: one that fails is queued again alone, with its own retries, and holds up none of the
    others. Their events go out together when the last is done (one round trip to Redis, not one per delivery)."""
    events, batch = MonitorEvents(), MonitorEvents()

    def done(processed) -> None:  # in a round's transaction: built now, sent only once it committed
        if processed.monitor is not None:
            batch.add(processed.monitor, processed.woke, status_before=processed.status_before)

    def kept() -> None:
        events.extend(batch)
        batch.clear()

    try:
        runtime = current()
        left = process_batch(delivery_ids, runtime.lifecycle, runtime.settings.FETCH_MAX_TEXT_BYTES, utcnow(),
                             done, kept)
        for delivery_id in left:
            try:
                _process(delivery_id, events)
            except Exception as exc:  # noqa: BLE001 — handed to its own message, which retries it
                log.warning("delivery %s failed in a batch (%s); queued again on its own", delivery_id, exc)
                process_delivery.send(delivery_id)
    finally:
        events.publish()


class Relay:
    """Queues stored deliveries for the workers from one thread of the web process.

    A request hands its stored delivery over and answers 202 at once. A delivery after a quiet spell is sent
    at once; under load (the last message went out less than LINGER_SECONDS ago) the relay waits up to that
    long for a message to fill, so the web process makes far fewer enqueue calls: each costs the same CPU
    however many deliveries it carries. Whatever a crash leaves here is stored already, so the scheduler's
    sweep queues it (DELIVERY_SWEEP_SECONDS).
    """

    def __init__(self) -> None:
        self._pending: list[int] = []
        self._sending = 0
        self._ready = threading.Condition()
        self._thread: threading.Thread | None = None

    def put(self, delivery_id: int) -> None:
        with self._ready:
            self._pending.append(delivery_id)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="vigil-delivery-relay", daemon=True)
                self._thread.start()
            if len(self._pending) in (1, BATCH):  # the relay waits for a first delivery, or for a full message
                self._ready.notify_all()

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Block until everything handed over has been sent (or failed to send); for shutdown and tests."""
        with self._ready:
            return self._ready.wait_for(lambda: not self._pending and not self._sending, timeout)

    def _run(self) -> None:
        last_sent = 0.0
        while True:
            with self._ready:
                self._ready.wait_for(lambda: self._pending)
                if time.monotonic() - last_sent < LINGER_SECONDS:
                    self._ready.wait_for(lambda: len(self._pending) >= BATCH, LINGER_SECONDS)
                batch, self._pending = self._pending[:BATCH], self._pending[BATCH:]
                self._sending = len(batch)
            try:
                process_deliveries.send(batch)
            except Exception as exc:  # noqa: BLE001 — stored already: the sweep queues them later
                log.warning("deliveries %s stored but not queued (%s); the sweep will queue them", batch, exc)
            last_sent = time.monotonic()
            with self._ready:
                self._sending = 0
                self._ready.notify_all()


relay = Relay()
ACTORS = [process_delivery, process_deliveries]
