"""The check actor: one batch of claimed monitors, each checked once for its claim."""

from __future__ import annotations

import dramatiq

from engine.pipeline import QUIET, Prior, run_check
from engine.spec import check_from_record, source_from_record
from models import utcnow
from models.monitors import load_claimed, load_for_check, record_check
from tasks.events import publish_message, publish_monitor, publish_quiet
from tasks.runtime import current

#: Monitors per message: one query and one round of events for the lot, fetched one after another.
BATCH_SIZE = 20


@dramatiq.actor(queue_name="checks", max_retries=3, min_backoff=1000, max_backoff=30000,
                time_limit=BATCH_SIZE * 40_000)
def check_monitors(claims: list[list]) -> None:
    """Check each claimed monitor once; a claim that is no longer current (a duplicate) does nothing."""
    runtime = current()
    quiet = []
    for monitor in load_claimed([(monitor_id, seq) for monitor_id, seq in claims]):
        prior = Prior(monitor.raw_hash, monitor.content_hash, monitor.state if monitor.state_json else None)
        outcome = run_check(runtime.fetcher(), source_from_record(monitor.source),
                            check_from_record(monitor.check), prior, runtime.settings.FETCH_MAX_TEXT_BYTES)
        recorded = record_check(monitor, monitor.claim_seq, outcome, utcnow())
        if not recorded.written:
            continue
        if outcome.kind == QUIET:
            monitor.last_error, monitor.failure_count = "", 0
            quiet.append(monitor)
            continue
        publish_monitor(load_for_check(monitor.id))
        if recorded.woke is not None:
            publish_message(monitor.user_id, monitor.conversation_external_id, recorded.woke)
    publish_quiet(quiet)


ACTORS = [check_monitors]
