"""The check actor: one batch of claimed monitors, each checked once for its claim."""

from __future__ import annotations

import functools
import json
import logging
import math
from collections import Counter
from dataclasses import replace
from datetime import datetime

import dramatiq

from engine.checks.cel import reads_now
from engine.content import excerpt, sha256_hex
from engine.checks.base import CheckSpec
from engine.pipeline import CHANGED, ERROR, FIRED, QUIET, Outcome, Prior, check_body, run_check
from engine.errors import ContentError
from engine.http import FetchError, Validators
from engine.shared_fetch import HTTP_SOURCES, Window, window_index
from engine.sources import DOCUMENT_SOURCES
from engine.sources.base import SourceSpec
from adapters.mcp_client import McpError
from adapters.metrics import count_check
from engine.tools import RUN_SECONDS, mcp_fingerprint, mcp_run_body, poll_tool
from models.connections import credentials, end_duplicated_watches, find_connection, pick_tool
from models.tools import ToolRefused
from engine.placeholders import has_placeholders, values as placeholder_values
from engine.sources.time_source import parse_time
from engine.spec import check_from_record, source_from_record
from models import utcnow
from models.claims import Claimed, load_claimed, release
from models.documents import stored_body
from models.tools import find_tool, load_tool
from models.commands import dispatch_poll
from models.judging import judge_match
from models.monitors import load_for_check
from models.tables import ACTIVE, Monitor
from models.results import (
    Recorded, end_in_error, fire_time_watch, pause_and_tell, record_check, record_judge_failure,
)
from tasks import mcp
from tasks.broker import UNAVAILABLE
from tasks.events import publish_monitor, publish_quiet, publish_work
from tasks.rendered import keep_picture, render_check
from tasks.runtime import Runtime, current, own_endpoints

log = logging.getLogger(__name__)
#: the document snapshot a wake quotes, in characters (its metadata keeps the document whole, up to this much JSON)
SNAPSHOT_CHARS = 2000
SNAPSHOT_METADATA_BYTES = 64 * 1024

#: Fetches per message: one query and one round of events for the lot, fetched one after another. A message
#: costs the worker about 1 ms of CPU of its own (its fetch and ack, the claim read, the events' round trip), so a
#: busy tick fills messages up to BATCH_MAX; a small one keeps BATCH_MIN, so that it still spreads over threads.
#: Counted in fetches, not monitors: the monitors that share one url's GET (models/claims.Claim.key) count once,
#: since what a message's time goes on is its GETs; the others ride along at a few µs each.
BATCH_MIN, BATCH_MAX = 20, 50
#: how many messages a tick's claims are spread over before messages grow past BATCH_MIN: two worker processes
#: of the default 4 threads
BATCH_SPREAD = 8
#: monitors per message at most, however few urls they read (one url's monitors beyond it go on in the next)
BATCH_MONITORS_MAX = 500
#: the queue of checks that render a page in a browser, and how many such checks a message holds (each may take
#: FETCH_TIMEOUT_SECONDS; one each spreads them over the browser workers' threads)
BROWSER_QUEUE = "browser"
RENDERED_PER_MESSAGE = 1


def batches(claims: list) -> list[list]:
    """A tick's claims cut into messages: BATCH_MIN fetches each up to BATCH_SPREAD messages, then bigger, at most
    BATCH_MAX fetches and BATCH_MONITORS_MAX monitors each. In claim order, so monitors of one url (the claim sorts
    by it) travel together; a claim without a key (a plain pair) is a fetch of its own."""
    units = _fetch_units(claims)
    size = min(BATCH_MAX, max(BATCH_MIN, math.ceil(len(units) / BATCH_SPREAD)))
    cut: list[list] = []
    batch: list = []
    fetches = 0
    for unit in units:
        if batch and (fetches == size or len(batch) + len(unit) > BATCH_MONITORS_MAX):
            cut.append(batch)
            batch, fetches = [], 0
        batch.extend(unit)
        fetches += 1
    return cut + [batch] if batch else cut


def _fetch_units(claims: list) -> list[list]:
    """The claims in runs that share one fetch (consecutive claims of one non-empty key), none over
    BATCH_MONITORS_MAX."""
    units: list[list] = []
    previous = ""
    for claim in claims:
        key = getattr(claim, "key", "")
        if key and key == previous and len(units[-1]) < BATCH_MONITORS_MAX:
            units[-1].append(claim)
        else:
            units.append([claim])
        previous = key
    return units


@dramatiq.actor(queue_name="checks", max_retries=3, min_backoff=1000, max_backoff=30000,
                time_limit=BATCH_MAX * 100_000)
def check_monitors(claims: list[list]) -> None:
    """Check each claimed monitor once; a claim that is no longer current (a duplicate) does nothing."""
    check_claims(claims)


@dramatiq.actor(queue_name=BROWSER_QUEUE, max_retries=3, min_backoff=1000, max_backoff=30000,
                time_limit=RENDERED_PER_MESSAGE * 120_000)
def check_rendered(claims: list[list]) -> None:
    """check_monitors for pages rendered in a browser (issue 31): a queue of their own, taken by the workers that
    have a browser (`vigil worker --queues browser`), so slow renders never hold up the other checks."""
    check_claims(claims)


def check_claims(claims: list[list]) -> None:
    runtime = current()
    quiet = []
    counts: Counter = Counter()  # the metric's file is written once per kind a batch, not once per check
    alike: dict[tuple, tuple] = {}  # this batch's quiet outcomes by what decided them (same_inputs, read_after)
    try:
        for monitor in latest_first(load_claimed([(monitor_id, seq) for monitor_id, seq in claims])):
            outcome, recorded, full = check_one(runtime, monitor, alike)
            if not recorded.written:
                continue
            if outcome.picture is not None:
                keep_picture(runtime, monitor.id, outcome)
            counts[outcome.kind, outcome.unreachable] += 1
            if full is None:  # quiet: the claimed copy, with what the check cleared, is enough for its event
                quiet.append(monitor)
                continue
            publish_monitor(full, recorded.woke, status_before=monitor.status)
    finally:  # what was recorded before a check raised is published and counted all the same
        publish_quiet(quiet)
        for (kind, unreachable), times in counts.items():
            count_check(kind, unreachable, times)


def latest_first(monitors: list[Claimed]) -> list[Claimed]:
    """The batch with the monitors of one source together, each group latest previous claim first: a quiet
    outcome serves the checks whose previous claim is no later than its own (read_after), so the group's first
    check decides for all of them. Otherwise a group whose first check happened to have the earliest previous
    claim ran its check once more for every later one. Groups keep the claim order (by url) among themselves."""
    groups: dict[str, list[Claimed]] = {}
    for monitor in monitors:
        groups.setdefault(monitor.source_text, []).append(monitor)
    if len(groups) == len(monitors):
        return monitors
    ordered = []
    for group in groups.values():
        if len(group) > 1:
            group.sort(key=_previous_claim, reverse=True)  # stable: equal claims keep their order
        ordered.extend(group)
    return ordered


def _previous_claim(monitor: Claimed) -> datetime:
    return monitor.prev_checked_at or datetime.min  # none at all: any answer of its window serves it, so last


def check_one(runtime: Runtime, monitor: Claimed, alike: dict | None = None
              ) -> tuple[Outcome, Recorded, Monitor | None]:
    """Fetch, compare, judge a match if the monitor has a condition, and record it. Beyond a quiet check, the
    monitor as recorded (the write is applied to it, so its events need no read back). `alike`: the quiet outcomes
    of this batch's checks so far, by same_inputs, each with the previous claim of the check that read it; a check
    with the same inputs whose own previous claim is no later has its outcome (read_after)."""
    source, check, with_placeholders = specs_of(monitor.source_text, monitor.check_text)
    # a rendered page's check makes no shared GET (its source type stands apart)
    kind = "rendered" if source.render else source.type
    inputs = same_inputs(runtime, monitor, kind, check, with_placeholders) if alike is not None else None
    known = alike.get(inputs) if inputs is not None else None
    if known is not None and read_after(monitor.prev_checked_at, known[1]):
        # a quiet record writes no time: the claim's stands in for the clock's
        return known[0], record_check(monitor, monitor.claim_seq, known[0], monitor.last_checked_at,
                                      runtime.lifecycle), None
    now = utcnow()
    if source.type == "command":
        return dispatch_command(runtime, monitor, now)
    if source.type == "time":
        return check_time_watch(runtime, monitor, now)
    if source.type in DOCUMENT_SOURCES:
        return check_document(runtime, monitor, now)
    prior = Prior(monitor.raw_hash, monitor.content_hash, monitor.state if monitor.has_state else None,
                  Validators(monitor.etag, monitor.last_modified))
    if source.type == "tool":
        ran = run_tool_poll(runtime, monitor, prior, filled_in(monitor, now), now)
        if isinstance(ran, tuple):
            return ran  # refused: the monitor was paused or ended, and told
        outcome = ran
    elif source.render:
        outcome = render_check(runtime, source, check, prior, now, filled_in(monitor, now))
    else:
        # the placeholders' values only for a source that has some: formatting them costs ~10 µs a check
        filled = filled_in(monitor, now) if with_placeholders else {}
        outcome = run_check(runtime.check_io(fetch_window(monitor, now)), source, check, prior,
                            runtime.settings.FETCH_MAX_TEXT_BYTES, now=now, placeholders=filled)
    if outcome.kind == QUIET:
        if inputs is not None and (known is None or read_after(known[1], monitor.prev_checked_at)):
            alike[inputs] = (outcome, monitor.prev_checked_at)  # serves every check whose previous claim is earlier
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


@functools.lru_cache(maxsize=4096)
def specs_of(source_text: str, check_text: str) -> tuple[SourceSpec, CheckSpec, bool]:
    """A stored source's and check's specs, and whether the source holds placeholders: parsed once per text in a
    process (building them on every check was ~12% of a shared-fetch check's CPU). Keyed by the texts, so an
    edited monitor gets new specs; the specs are frozen, so checks can share them."""
    source = json.loads(source_text)
    with_placeholders = any(isinstance(value, str) and has_placeholders(value) for value in source.values())
    return source_from_record(source), check_from_record(json.loads(check_text)), with_placeholders


def same_inputs(runtime: Runtime, monitor: Claimed, source_type: str, check: CheckSpec,
                with_placeholders: bool) -> tuple | None:
    """All that decides a shared HTTP check's outcome but the answer its GET reads, or None for a check whose
    outcome may be its own.

    run_check is a function of the source, the check, what the monitor stored last time (its digests, state and
    validators) and the answer its GET gets. Monitors whose request is shared may read any answer fetched in their
    interval window after their previous claim (engine/shared_fetch.py). So a monitor with the key of a check
    already found quiet in this batch, in the same window, whose previous claim is no later than that check's
    (read_after: the answer that check read was fetched after its previous claim, so after this one's too), is
    quiet the same way, and is not run again: with many monitors on one page, what a check costs follows the
    distinct checks, as its GET follows the distinct urls. Only quiet outcomes are kept (anything else is recorded
    with a judge, a wake or an error of its own), and not for a url with placeholders (their values depend on the
    monitor's own times) or with sharing off (then each monitor fetches for itself)."""
    if source_type not in HTTP_SOURCES or with_placeholders or not runtime.shared_fetches.enabled \
            or monitor.last_checked_at is None:
        return None
    # of the state, a quiet outcome depends on whether there is one and, for a `for` count, on the count (a
    # small state, always in the claim read)
    counted = check.hold_for > 1
    if counted and monitor.has_state and monitor.state_json is None:
        return None
    return (monitor.source_text, monitor.check_text, monitor.has_state, monitor.state_json if counted else None,
            monitor.raw_hash, monitor.content_hash, monitor.etag, monitor.last_modified, monitor.user_id,
            monitor.interval_seconds, window_index(monitor.last_checked_at, monitor.interval_seconds))


def read_after(previous_claim, bound) -> bool:
    """Whether an answer read by a check whose previous claim was `bound` may serve a check whose previous claim
    is `previous_claim` (None: it has none, any answer of the window serves it)."""
    return previous_claim is None or (bound is not None and previous_claim <= bound)


def filled_in(monitor: Claimed, now) -> dict:
    """What each placeholder a source's url, path or command holds stands for in this check."""
    return placeholder_values(now, monitor.prev_checked_at, monitor.last_changed_at)


def fetch_window(monitor: Claimed, now) -> Window:
    """Which fetches this check may share: those made for claims of its interval window since its previous claim
    (the claim's time is the scheduler's, so monitors due at different seconds of one window share)."""
    return Window(monitor.user_id, monitor.interval_seconds, monitor.last_checked_at or now, monitor.prev_checked_at)


def check_time_watch(runtime: Runtime, monitor: Claimed, now) -> tuple[Outcome, Recorded, Monitor | None]:
    """A time watch claimed at (or after) its moment: it fires once, saying how late if Vigil was down."""
    full = load_for_check(monitor.id)
    if full is None or full.claim_seq != monitor.claim_seq or full.status != ACTIVE:
        return Outcome(QUIET), Recorded(False), None
    recorded = fire_time_watch(full, monitor.claim_seq, parse_time(full.source["fire_at"]), now, runtime.lifecycle)
    return Outcome(FIRED), recorded, full


def run_tool_poll(runtime: Runtime, monitor: Claimed, prior: Prior, filled: dict, now):
    """One headless run of a watched tool, as the owner, re-deciding first what create decided: tool sources are
    still on, and the tool is still the one armed (its fingerprint). A refusal pauses or ends the monitor (a tuple
    for check_one to return); otherwise the run's outcome."""
    source = monitor.source
    if not runtime.settings.TOOL_SOURCES_ENABLED:
        full = load_for_check(monitor.id)
        reason = "Tool watches were turned off on this Vigil instance (TOOL_SOURCES_ENABLED), so it can't poll."
        return Outcome(ERROR, error=reason), pause_and_tell(full, monitor.claim_seq, reason, now), full
    if source.get("connection"):
        return _run_connection_tool(runtime, monitor, prior, now)
    row = find_tool(monitor.user_id, source.get("agent_id"), source.get("tool"))
    if row is None or row.fingerprint != source.get("tool_fingerprint"):
        full = load_for_check(monitor.id)
        reason = (f"The tool {source.get('tool')!r} was {'removed' if row is None else 'edited'} since it was armed, "
                  "so the watch stopped rather than run a version you did not arm.")
        return Outcome(ERROR, error=reason), end_in_error(full, monitor.claim_seq, reason, now), full
    check = check_from_record(monitor.check)
    # unchanged answers are a quiet poll before output.main runs, unless the condition reads `now`
    previous = prior.raw_hash if prior.state is not None and not (check.expr and reads_now(check.expr)) else None
    try:
        digest, body = poll_tool(load_tool(row, runtime.keyring), source.get("arguments") or {}, runtime.fetcher(),
                                 filled, previous)
    except FetchError as exc:
        return Outcome(ERROR, error=exc.message)
    except ContentError as exc:
        return Outcome(ERROR, error=f"{str(exc)[:1].upper()}{str(exc)[1:].rstrip('.')}.")
    if body is None:
        return Outcome(QUIET, raw_hash=digest, content_hash=monitor.content_hash)
    outcome = replace(check_body(source_from_record(source), check, prior, body,
                                 runtime.settings.FETCH_MAX_TEXT_BYTES, now), raw_hash=digest)
    if outcome.kind == FIRED:  # the wake says what the tool answered, not only that the condition holds
        arguments = ", ".join(f"{k}={v!r}" for k, v in (source.get("arguments") or {}).items())
        found = (f"{source.get('tool')}({arguments}) {outcome.verdict.found}\nIts output:\n"
                 f"{excerpt(outcome.text, SNAPSHOT_CHARS)}")
        outcome = replace(outcome, verdict=replace(outcome.verdict, found=found))
    return outcome


def _run_connection_tool(runtime: Runtime, monitor: Claimed, prior: Prior, now):
    """An MCP connection's tool: the connection must still be there, and its listing (cached for at most one
    interval) must still show exactly one tool of that name with the fingerprint armed, and not destructive."""
    source, settings = monitor.source, runtime.settings
    row = find_connection(monitor.user_id, source["connection"])
    if row is None:
        return _ended(monitor, f"The MCP connection {source['connection']!r} was removed, so the watch stopped.", now)
    url, token = credentials(row, runtime.keyring)
    try:
        own = own_endpoints(settings)
        tools = mcp.listing(row.id, url, token, max(monitor.interval_seconds, 60), settings.FETCH_ALLOW_LOOPBACK,
                            own=own, egress=settings.egress)
        for ended, woke in end_duplicated_watches(monitor.user_id, source["connection"], tools, now):
            publish_monitor(ended, woke)  # every watch of a name listed twice, not only this one
        try:
            tool = pick_tool(tools, source["connection"], source["tool"])
        except ToolRefused as exc:
            return _ended(monitor, f"{exc} The watch stopped rather than guess.", now)
        if mcp_fingerprint(tool.name, tool.input_schema, tool.annotations) != source.get("tool_fingerprint") \
                or (tool.annotations or {}).get("destructiveHint") is True:
            return _ended(monitor, f"The MCP tool {tool.name!r} changed since it was armed (its inputSchema or "
                          "annotations), so the watch stopped rather than run a version you did not arm.", now)
        result = mcp.call_tool(url, token, tool.name, source.get("arguments") or {}, timeout=RUN_SECONDS,
                               allow_loopback=settings.FETCH_ALLOW_LOOPBACK, own=own, egress=settings.egress)
    except McpError as exc:
        return Outcome(ERROR, error=exc.message)
    body = mcp_run_body(result.is_error, result.text, result.structured)
    return check_body(source_from_record(source), check_from_record(monitor.check), prior, body,
                      settings.FETCH_MAX_TEXT_BYTES, now)


def _ended(monitor: Claimed, reason: str, now):
    full = load_for_check(monitor.id)
    return Outcome(ERROR, error=reason), end_in_error(full, monitor.claim_seq, reason, now), full


def check_document(runtime: Runtime, monitor: Claimed, now) -> tuple[Outcome, Recorded, Monitor | None]:
    """A document watch: its CEL condition over the stored document. An unchanged document is quiet without
    evaluating, unless the condition reads `now`; a version whose evaluation failed counts as one failure, however
    many sweeps read it; no document (yet, or any more) is quiet too."""
    source, check = source_from_record(monitor.source), check_from_record(monitor.check)
    stored = stored_body(monitor.user_id, source.item_type, source.item_id)
    if stored is None:
        quiet = Outcome(QUIET, raw_hash=monitor.raw_hash, content_hash=monitor.content_hash)
        return quiet, record_check(monitor, monitor.claim_seq, quiet, now, runtime.lifecycle), None
    body, version = stored
    fresh = reads_now(check.expr)
    if not fresh and monitor.failure_count and sha256_hex(body) == monitor.raw_hash:
        return Outcome(QUIET), Recorded(False), None  # this version failed already: counted once, not per sweep
    prior = Prior(None if fresh else monitor.raw_hash, None if fresh else monitor.content_hash,
                  monitor.state() or {"holds": False})
    outcome = check_body(source, check, prior, body, runtime.settings.FETCH_MAX_TEXT_BYTES, now)
    if fresh and outcome.kind == CHANGED and outcome.raw_hash == monitor.raw_hash \
            and outcome.verdict.state.get("holds") == (monitor.state() or {}).get("holds"):
        outcome = Outcome(QUIET, raw_hash=outcome.raw_hash, content_hash=outcome.content_hash)  # a sweep, still false
    if outcome.kind == QUIET:
        return outcome, record_check(monitor, monitor.claim_seq, outcome, now, runtime.lifecycle), None
    full = load_for_check(monitor.id)
    if full is None or full.claim_seq != monitor.claim_seq or full.status != ACTIVE:
        return outcome, Recorded(False), None  # a newer write claimed it meanwhile: that check reads it
    extra = {}
    if outcome.kind == FIRED:
        outcome, extra = _document_fired(source, check, outcome, body, version)
    return outcome, record_check(full, monitor.claim_seq, outcome, now, runtime.lifecycle, wake_extra=extra), full


def _document_fired(source, check, outcome: Outcome, body: bytes, version: int) -> tuple[Outcome, dict]:
    """The wake's finding: which document, at which version, and a snapshot of it as it matched."""
    data = json.loads(body)
    pretty = json.dumps(data, ensure_ascii=False, indent=1, sort_keys=True)
    if source.type == "ingest":
        head = f"The ingest job {source.item_id} ended: status {data.get('status')!r} (version {version})."
    else:
        head = f"{source.item_type}/{source.item_id} (version {version}) now matches: {excerpt(check.expr, 300)}"
    found = f"{head}\nThe document as it matched:\n{excerpt(pretty, SNAPSHOT_CHARS)}"
    snapshot = data if len(body) <= SNAPSHOT_METADATA_BYTES else None
    extra = {"document": {"item_type": source.item_type, "item_id": source.item_id, "version": version,
                          "doc": snapshot, "truncated": snapshot is None}}
    return replace(outcome, verdict=replace(outcome.verdict, found=found)), extra


def queue_claims(claims: list[tuple[str, int]], now) -> None:
    """Queue checks for monitors claimed outside the scheduler (a document's write, a new document watch). With
    the queue down they are released, so the scheduler claims them on its next tick instead."""
    try:
        send_claims(claims, now)
    except UNAVAILABLE as exc:
        log.warning("could not queue %d document checks, the scheduler takes them: %s", len(claims), exc)


def send_claims(claims: list[tuple[str, int]], now) -> None:
    """Queue a check for each claim, in batches(); a page rendered in a browser goes to the browser queue,
    RENDERED_PER_MESSAGE at a time. With the queue down, the claims not queued are released (due again at once,
    not skipped an interval) and UNAVAILABLE is raised."""
    rendered = [claim for claim in claims if getattr(claim, "rendered", False)]
    plain = [claim for claim in claims if not getattr(claim, "rendered", False)] if rendered else claims
    messages = [(check_monitors, batch) for batch in batches(plain)]
    messages += [(check_rendered, rendered[i:i + RENDERED_PER_MESSAGE])
                 for i in range(0, len(rendered), RENDERED_PER_MESSAGE)]
    for index, (actor, batch) in enumerate(messages):
        try:
            actor.send([list(claim) for claim in batch])
        except UNAVAILABLE:
            release([claim for _, left in messages[index:] for claim in left], now)
            raise


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


ACTORS = [check_monitors, check_rendered]
