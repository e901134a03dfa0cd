"""The check actor: one batch of claimed monitors, each checked once for its claim."""

from __future__ import annotations

import dramatiq

from engine.pipeline import ERROR, FIRED, QUIET, Outcome, Prior, run_check
from engine.placeholders import values as placeholder_values
from engine.sources.time_source import parse_time
from engine.spec import check_from_record, source_from_record
from models import utcnow
from models.claims import Claimed, load_claimed
from models.commands import dispatch_poll
from models.judging import judge_match
from models.monitors import load_for_check
from models.tables import ACTIVE, Monitor
from models.results import Recorded, fire_time_watch, pause_and_tell, record_check, record_judge_failure
from tasks.events import publish_monitor, publish_quiet, publish_work
from tasks.runtime import Runtime, current

#: Monitors per message: one query and one round of events for the lot, fetched one after another.
BATCH_SIZE = 20


@dramatiq.actor(queue_name="checks", max_retries=3, min_backoff=1000, max_backoff=30000,
                time_limit=BATCH_SIZE * 100_000)
def check_monitors(claims: list[list]) -> None:
    """Check each claimed monitor once; a claim that is no longer current (a duplicate) does nothing."""
    runtime = current()
    quiet = []
    for monitor in load_claimed([(monitor_id, seq) for monitor_id, seq in claims]):
        outcome, recorded, full = check_one(runtime, monitor)
        if not recorded.written:
            continue
        if full is None:  # quiet: the claimed copy, with what the check cleared, is enough for its event
            quiet.append(monitor)
            continue
        publish_monitor(full, recorded.woke, status_before=monitor.status)
    publish_quiet(quiet)


def check_one(runtime: Runtime, monitor: Claimed) -> tuple[Outcome, Recorded, Monitor | None]:
    """Fetch, compare, judge a match if the monitor has a condition, and record it. Beyond a quiet check, the
    monitor as recorded (the write is applied to it, so its events need no read back)."""
    now = utcnow()
    if monitor.source.get("type") == "command":
        return dispatch_command(runtime, monitor, now)
    if monitor.source.get("type") == "time":
        return check_time_watch(runtime, monitor, now)
    prior = Prior(monitor.raw_hash, monitor.content_hash, monitor.state if monitor.state_json else None)
    filled = placeholder_values(now, monitor.prev_checked_at, monitor.last_changed_at)
    outcome = run_check(runtime.source_io(), source_from_record(monitor.source), check_from_record(monitor.check),
                        prior, runtime.settings.FETCH_MAX_TEXT_BYTES, now=now, placeholders=filled)
    if outcome.kind == QUIET:
        return outcome, record_check(monitor, monitor.claim_seq, outcome, now, runtime.lifecycle), None
    full = load_for_check(monitor.id)
    if full is None or full.claim_seq != monitor.claim_seq or full.status != ACTIVE:
        return outcome, Recorded(False), None  # claimed again meanwhile (a long backlog): don't pay a judge
    if outcome.kind != FIRED or not full.condition:
        return outcome, record_check(full, monitor.claim_seq, outcome, now, runtime.lifecycle), full
    step = judge_match(full, outcome, runtime.judge_session(), runtime.judge_policy, now)
    if step.over_budget:
        reason = (f"Its judge model has used up the token budget of {runtime.judge_policy.token_budget}; "
                  f"the latest match was: {outcome.verdict.found}")
        return outcome, pause_and_tell(full, monitor.claim_seq, reason, now), full
    if step.failure:
        return outcome, record_judge_failure(full, monitor.claim_seq, step.failure, now), full
    return step.outcome, record_check(full, monitor.claim_seq, step.outcome, now, runtime.lifecycle,
                                      unchecked=step.unchecked), full


def check_time_watch(runtime: Runtime, monitor: Claimed, now) -> tuple[Outcome, Recorded, Monitor | None]:
    """A time watch claimed at (or after) its moment: it fires once, saying how late if Vigil was down."""
    full = load_for_check(monitor.id)
    if full is None or full.claim_seq != monitor.claim_seq or full.status != ACTIVE:
        return Outcome(QUIET), Recorded(False), None
    recorded = fire_time_watch(full, monitor.claim_seq, parse_time(full.source["fire_at"]), now)
    return Outcome(FIRED), recorded, full


def dispatch_command(runtime: Runtime, monitor: Claimed, now) -> tuple[Outcome, Recorded, Monitor | None]:
    """A polled command runs on its device: queue the run and wake the device's poll. Its result comes back
    later, to tasks/commands.py. An offline device is an unreachable (skipped) check; a revoked device or a
    refused command pauses the monitor."""
    full = load_for_check(monitor.id)
    if full is None or full.claim_seq != monitor.claim_seq or full.status != ACTIVE:
        return Outcome(QUIET), Recorded(False), None
    dispatch = dispatch_poll(full, monitor.claim_seq, now, runtime.presence)
    if dispatch.paused is not None:
        return Outcome(ERROR), dispatch.paused, full
    if dispatch.unreachable:
        outcome = Outcome(ERROR, error=dispatch.unreachable, unreachable=True)
        return outcome, record_check(full, monitor.claim_seq, outcome, now, runtime.lifecycle), full
    if dispatch.run is not None:
        publish_work(full.user_id, [dispatch.run.device_id])
    return Outcome(QUIET), Recorded(False), None


ACTORS = [check_monitors]
