"""The check actor: one polled check of one monitor, for one claim."""

from __future__ import annotations

import dramatiq

from engine.pipeline import QUIET, Prior, run_check
from engine.schedule import next_check_at
from engine.spec import check_from_record, source_from_record
from models import utcnow
from models.monitors import ACTIVE, load_for_check, record_check
from tasks.events import publish_message, publish_monitor
from tasks.runtime import current


@dramatiq.actor(queue_name="checks", max_retries=3, min_backoff=1000, max_backoff=30000, time_limit=120_000)
def check_monitor(monitor_id: str, claim_seq: int) -> None:
    """Check once; a message for a claim that is no longer current (a duplicate) does nothing."""
    monitor = load_for_check(monitor_id)
    if monitor is None or monitor.claim_seq != claim_seq or monitor.status != ACTIVE:
        return
    runtime = current()
    prior = Prior(monitor.raw_hash, monitor.content_hash, monitor.check_state)
    outcome = run_check(runtime.fetcher(), source_from_record(monitor.source), check_from_record(monitor.check),
                        prior, runtime.settings.FETCH_MAX_TEXT_BYTES)
    now = utcnow()
    recorded = record_check(monitor, claim_seq, outcome, now, next_check_at(now, monitor.interval_seconds))
    if not recorded.written:
        return
    if outcome.kind == QUIET:
        monitor.check_count, monitor.last_checked_at, monitor.last_error = monitor.check_count + 1, now, ""
        publish_monitor(monitor, status_changed=False)
        return
    publish_monitor(load_for_check(monitor_id))
    if recorded.woke is not None:
        publish_message(monitor.user_id, monitor.conversation.external_id, recorded.woke)


ACTORS = [check_monitor]
