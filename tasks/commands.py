"""The command result actor: a polled command's result, sent back by its device, through the pipeline from
the hash on (normalize, check, judge a match, once per fact), like any polled source's body."""

from __future__ import annotations

import dramatiq

from engine.pipeline import BASELINE, ERROR, FIRED, Outcome, Prior, check_body
from engine.sources.command import result_body
from engine.spec import check_from_record, source_from_record
from models import connection, utcnow
from models.commands import take_result
from models.judging import judge_match
from models.monitors import load_for_check
from models.results import record_check, record_judge_failure
from models.tables import ACTIVE, Monitor
from tasks.events import publish_monitor
from tasks.runtime import current


@dramatiq.actor(queue_name="checks", max_retries=3, min_backoff=1000, max_backoff=30000, time_limit=120_000)
def check_command_result(run_id: str) -> None:
    """Check one result once: a repeat of the message finds it taken and does nothing."""
    runtime = current()
    with connection():
        run = take_result(run_id)
        monitor = load_for_check(run.monitor_id) if run else None
        if monitor is None or monitor.status != ACTIVE:
            return
        outcome = _outcome(run, monitor, runtime)
        if outcome.kind == FIRED and monitor.condition:
            step = judge_match(monitor, outcome, runtime.judge_session(), runtime.judge_policy, utcnow())
            if step.failure:
                record_judge_failure(monitor, monitor.claim_seq, step.failure, utcnow())
                return publish_monitor(monitor)
            outcome = step.outcome
        status_before = monitor.status
        recorded = record_check(monitor, monitor.claim_seq, outcome, utcnow(), runtime.lifecycle)
        if recorded.written and outcome.kind == BASELINE:
            Monitor.update(baseline=outcome.verdict.summary).where(Monitor.id == monitor.id).execute()
        if recorded.written:
            publish_monitor(monitor, recorded.woke, status_before=status_before)


def _outcome(run, monitor, runtime) -> Outcome:
    if run.timed_out:
        return Outcome(ERROR, error=f"The command did not finish within {run.timeout} seconds on its device, so "
                                    "it was stopped.", unreachable=True)
    prior = Prior(monitor.raw_hash, monitor.content_hash, monitor.check_state)
    body = result_body(run.exit_code, run.output or "")
    return check_body(source_from_record(monitor.source), check_from_record(monitor.check), prior, body,
                      runtime.settings.FETCH_MAX_TEXT_BYTES, now=utcnow())


ACTORS = [check_command_result]
