"""The delivery actor: one stored trigger delivery through the check, judge and wake."""

from __future__ import annotations

import dramatiq

from models import utcnow
from models.deliveries import process
from models.monitors import load_for_check
from tasks.events import publish_message, publish_monitor
from tasks.runtime import current


@dramatiq.actor(queue_name="deliveries", max_retries=5, min_backoff=500, max_backoff=30000, time_limit=180_000)
def process_delivery(delivery_id: int) -> None:
    """Idempotent: a delivery already processed, or processed meanwhile by another worker, does nothing."""
    runtime = current()
    done = process(delivery_id, runtime.judge_session(), runtime.judge_policy, runtime.lifecycle,
                   runtime.settings.FETCH_MAX_TEXT_BYTES, utcnow())
    if done.monitor is None:
        return
    publish_monitor(load_for_check(done.monitor.id))
    if done.woke is not None:
        publish_message(done.monitor.user_id, done.monitor.conversation.external_id, done.woke)


ACTORS = [process_delivery]
