"""Command monitors: arming them (the owner's approval), dispatching runs to devices, stopping them, and what
comes back: a polled run's result, a stream's numbered records, each stored once with its wake."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from engine.denylist import refused_by
from engine.placeholders import fill, values as placeholder_values
from engine.spec import CheckSpec, MonitorSpec, check_from_record
from engine.streams import ending_text, lines_text, notice_text, waking_lines
from engine.wake import paused_text
from models.compiled import Prepared
from models.db import database, utcnow
from models.devices import Presence, find_device, is_online, live_device, lookup_digest
from models.due import sooner
from models.monitors import create_event_monitor, load_for_check
from models.results import Lifecycle, pause_and_tell, write_wake
from models.runs import PENDING, RUNNING, STOPPING, UNFINISHED
from models.tables import (
    ACTIVE, AWAITING, CANCELLED, DONE, PAUSED, AuditEvent, CommandApproval, CommandRun, Conversation, Device, Monitor,
    RunRecord, User,
)

FINISHED, EXPIRED_RUN = "done", "expired"
#: seconds a polled run may take beyond its timeout (the poll's round trip) before it counts as unanswered
POLL_SLACK_SECONDS = 30
MAX_RECORDS_PER_POST = 200


class CommandRefused(ValueError):
    """A command monitor that can't be created or armed; str() is the sentence for the model or the owner."""


class RecordRefused(ValueError):
    """Records a runner may not send; `status` is the HTTP answer."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def resolve_device(user: User, spec: MonitorSpec) -> tuple[MonitorSpec, Device]:
    """The spec bound to one of the user's live devices; the denylist checked on the command as written."""
    wanted = spec.source.device
    device = find_device(user, wanted)
    if device is None:
        names = [d.name for d in Device.select(Device.name).where((Device.user == user) & Device.revoked_at.is_null())]
        if not names:
            raise CommandRefused("No device is paired with this account yet; ask the user to pair one in Settings → "
                                 "Devices (or run `vigil runner pair` on it), then try again.")
        raise CommandRefused(f"There is no device named {wanted!r}; the user's devices are "
                             f"{', '.join(repr(n) for n in names)}.")
    refuse_if_denied(device, spec.source.command)
    return replace(spec, source=replace(spec.source, device_id=device.id)), device


def refuse_if_denied(device: Device, command: str) -> None:
    pattern = refused_by(command, device.denylist or [])
    if pattern:
        raise CommandRefused(f"The device {device.name!r} refuses this command: it matches the denylist pattern "
                             f"{pattern!r}. Don't try to get around it; tell the user.")


def create_command_monitor(user: User, conversation: Conversation, spec: MonitorSpec, device: Device,
                           now: datetime) -> Monitor:
    """Awaiting the owner's approval on an `ask` device; armed at once on a `full` one."""
    polled = spec.source.mode == "poll"
    monitor = create_event_monitor(user, conversation, spec, now)
    # a polled command has no baseline yet: its first result is the baseline, and never wakes
    Monitor.update(polled=polled, check_state=None, device_id=device.id).where(Monitor.id == monitor.id).execute()
    monitor.polled, monitor.check_state, monitor.device_id = polled, None, device.id
    if device.approval_mode == "full":
        arm(monitor, device, now, decision="full")
    else:
        CommandApproval.create(monitor=monitor, device=device, command=spec.source.command, cwd=spec.source.cwd,
                               mode=spec.source.mode, created_at=now)
        _set_status(monitor, ACTIVE, AWAITING)
    return load_for_check(monitor.id)


def arm(monitor: Monitor, device: Device, now: datetime, decision: str) -> None:
    """Start checking: a polled command is due at once (its first result is the baseline); a stream starts."""
    _audit(monitor, device, monitor.source, decision)
    if monitor.polled:
        Monitor.update(status=ACTIVE, next_check_at=now, updated_at=now).where(Monitor.id == monitor.id).execute()
        monitor.status = ACTIVE
        sooner(now)  # its first check is due now
        return
    Monitor.update(status=ACTIVE, updated_at=now).where(Monitor.id == monitor.id).execute()
    monitor.status = ACTIVE
    start_stream(monitor, device, now)


def decide_command(user: User, monitor_id: str, approve: bool, now: datetime) -> tuple[Monitor, object]:
    """The owner's decision on an awaiting command: approved arms it; denied cancels it and tells the agent
    once. Returns (monitor, the wake written, if any)."""
    with database.atomic():
        approval = (CommandApproval.select().join(Monitor)
                    .where((CommandApproval.monitor == monitor_id) & (Monitor.user == user)).first())
        monitor = load_for_check(monitor_id) if approval else None
        if monitor is None or monitor.status != AWAITING or approval.decision is not None:
            raise CommandRefused("This command is not waiting for approval any more.")
        device = Device.get_or_none((Device.id == approval.device_id) & Device.revoked_at.is_null())
        if device is None:
            raise CommandRefused("The device of this command was revoked; nothing can run there.")
        if not _bound(approval, monitor.source):
            raise CommandRefused("The command changed since it was asked for; it can't be approved.")
        CommandApproval.update(decision="approved" if approve else "denied", decided_at=now) \
            .where(CommandApproval.id == approval.id).execute()
        if approve:
            arm(monitor, device, now, decision="approved")
            return load_for_check(monitor_id), None
        _audit(monitor, device, monitor.source, "denied")
        _set_status(monitor, AWAITING, CANCELLED)
        text = (f"The user denied running the command of \"{monitor.description}\" on the device "
                f"{device.name!r}; the monitor was cancelled. Don't run it another way; ask the user what to do.")
        woke = write_wake(monitor, "command_denied", "denied", text, {"device": device.name})
        return load_for_check(monitor_id), woke


def _bound(approval: CommandApproval, source: dict) -> bool:
    """The approval covers exactly this call: device, command as written, cwd and mode."""
    return (approval.device_id == source.get("device_id") and approval.command == source.get("command")
            and approval.cwd == source.get("cwd") and approval.mode == source.get("mode"))


def start_stream(monitor: Monitor, device: Device, now: datetime) -> CommandRun | None:
    """A run for the stream's watcher; the denylist is checked again on the command as it will run."""
    command = filled_command(monitor, now)
    refusal = _refusal(device, command)
    if refusal:
        pause_and_tell(monitor, monitor.claim_seq, refusal, now)
        return None
    return CommandRun.create(id=uuid.uuid4().hex, device=device, monitor=monitor.id, kind="stream", command=command,
                             cwd=monitor.source.get("cwd"), status=PENDING, claim_seq=monitor.claim_seq,
                             created_at=now)


def _refusal(device: Device, command: str) -> str | None:
    """Why the device refuses the command as it runs now (the denylist is read again every time), or None."""
    pattern = refused_by(command, device.denylist or [])
    if pattern is None:
        return None
    return f"The device {device.name!r} refused the command: it matches the denylist pattern {pattern!r}."


def restart_stream(monitor_id: str, now: datetime) -> CommandRun | None:
    """A resumed stream: its watcher starts again, as a new run, on its device if that is still paired."""
    monitor = load_for_check(monitor_id)
    device = Device.get_or_none((Device.id == monitor.source.get("device_id")) & Device.revoked_at.is_null())
    if device is None:
        pause_and_tell(monitor, monitor.claim_seq, "Its device was revoked or removed, so its watcher can't run.", now)
        return None
    return start_stream(monitor, device, now)


def filled_command(monitor: Monitor, now: datetime) -> str:
    """The command as it runs now; {{last_checked_at}} is the check before this one (the claim moved it)."""
    return fill(monitor.source["command"], placeholder_values(now, monitor.prev_checked_at, monitor.last_changed_at))


@dataclass(frozen=True)
class Dispatch:
    """What a polled command's check did: queued a run for the device, or recorded why not (paused, offline)."""
    run: CommandRun | None = None
    paused: object = None
    unreachable: str = ""


def dispatch_poll(monitor: Monitor, claim_seq: int, now: datetime, presence: Presence) -> Dispatch:
    """A claimed check of a polled command: a run for its device, unless the device is revoked, refuses the
    command (both pause the monitor), is offline (unreachable), or still runs the last one."""
    device = Device.get_or_none(Device.id == monitor.source.get("device_id"))
    if device is None or device.revoked_at is not None:
        return Dispatch(paused=pause_and_tell(monitor, claim_seq, "Its device was revoked or removed, so its "
                                              "command can't run any more.", now))
    command = filled_command(monitor, now)
    refusal = _refusal(device, command)
    if refusal:
        return Dispatch(paused=pause_and_tell(monitor, claim_seq, refusal, now))
    if not is_online(device, now, presence):
        return Dispatch(unreachable=f"The device {device.name!r} is offline (its runner is not connected).")
    if CommandRun.select().where((CommandRun.monitor == monitor.id) & CommandRun.status.in_(UNFINISHED)).exists():
        return Dispatch()
    timeout = monitor.source.get("timeout") or 30
    run = CommandRun.create(id=uuid.uuid4().hex, device=device, monitor=monitor.id, kind="poll", command=command,
                            cwd=monitor.source.get("cwd"), timeout=timeout, status=PENDING, claim_seq=claim_seq,
                            created_at=now, deadline_at=now + timedelta(seconds=timeout + POLL_SLACK_SECONDS))
    sooner(run.deadline_at)  # unanswered by then, it is an unreachable check (the scheduler's devices_tick)
    return Dispatch(run=run)


def work_for(device_id: int, max_output_bytes: int) -> tuple[list[dict], list[str]]:
    """The device's assignments (runs not started yet) and stop orders. A polled run carries its timeout and
    how much output to send; a stream runs until it exits or is stopped, so it carries neither."""
    runs = list(CommandRun.select().where((CommandRun.device == device_id) & CommandRun.status.in_((PENDING, STOPPING)))
                .order_by(CommandRun.created_at).limit(100))
    pending = [r for r in runs if r.status == PENDING]
    unsent = [r.id for r in pending if r.sent_at is None]
    if unsent:
        CommandRun.update(sent_at=utcnow()).where(CommandRun.id.in_(unsent) & CommandRun.sent_at.is_null()).execute()
    assignments = [{"run_id": r.id, "kind": r.kind, "command": r.command, "cwd": r.cwd, "timeout": r.timeout,
                    "max_output_bytes": max_output_bytes if r.kind == "poll" else None} for r in pending]
    return assignments, [r.id for r in runs if r.status == STOPPING]


@dataclass
class Stored:
    """What one POST of records did: the ack, the wakes written, whether the monitor changed."""
    acked: int
    woke: list = field(default_factory=list)
    monitor: Monitor | None = None
    stopped_devices: list[int] = field(default_factory=list)
    #: the monitor's status before these records (its events go out only when they changed it)
    status_before: str = ""
    #: a run started or ended: the monitor's row shows its watcher, so its event goes out too
    watcher_changed: bool = False


def store_records(token: str | None, run_id: str, records: list[dict], now: datetime, life: Lifecycle,
                  ) -> tuple[Device, Stored] | None:
    """Each (run, seq) stored once, in order, in one transaction with its wakes; the device that sent them and what
    was stored (its `acked`: the highest contiguous seq). None, with nothing written, when `token` is no live
    device's or `run_id` is not its run: the caller finds out which for its answer.
    The lines each record wakes with are picked before the transaction, by the monitor's check: a regex or CEL
    filter over a big batch is no work to hold SQLite's one write lock (or the run's row lock) for."""
    digest = lookup_digest(token)
    if digest is None:
        return None
    check = _check_of_run(run_id, digest)
    if check is None:
        return None
    picks = {record["seq"]: waking_lines(check, record.get("lines") or []) for record in records
             if record["kind"] == "lines"}
    with database.atomic():
        run = _RUN_LOCKED.first(run_id, digest)  # the device is checked here, on every POST, under the lock
        device = live_device(run.device, digest) if run is not None else None
        if device is None:
            return None
        if run.kind != "stream":
            raise RecordRefused(f"Run {run_id} is a polled run; send its result, not records.", 409)
        monitor = run.monitor  # read with the run, after its lock: what the last records left
        stored = Stored(acked=run.acked_seq, monitor=monitor, status_before=monitor.status if monitor else "")
        for record in sorted(records, key=lambda r: r["seq"]):
            if record["seq"] <= stored.acked:
                continue  # a resend of what is stored already
            if record["seq"] > stored.acked + 1:
                break  # a gap: the runner resends from the ack
            if run.end_reason:
                raise RecordRefused(f"Run {run_id} has ended; it takes no record after its exit.", 409)
            _store_one(run, monitor, record, now, life, stored, picks.get(record["seq"], []))
            stored.acked = record["seq"]
        _SAVE_RUN.later(stored.acked, run.status, run.started_at, run.finished_at, run.exit_code,
                           run.end_reason, run.id)
    return device, stored


#: run id -> its monitor's check, parsed. A run belongs to one monitor for good, and a monitor's check is written
#: once, at create (models/monitors.py), so what was read is never stale; it only picks lines before the
#: transaction, whose locked read checks the device's token on every POST. Bounded: emptied when full.
_CHECKS: dict[str, CheckSpec] = {}
_CHECKS_MAX = 4096


def _check_of_run(run_id: str, digest: str) -> CheckSpec | None:
    """The check of run `run_id`'s monitor, read once per run (with the device of `digest`, so a stranger's
    guess fills nothing); None for a run that is no live device's of `digest`."""
    check = _CHECKS.get(run_id)
    if check is not None:
        return check
    row = _DEVICE_AND_CHECK.first(run_id, digest)
    if row is None or live_device(row.device, digest) is None:
        return None
    check = check_from_record(row.monitor.check)
    if len(_CHECKS) >= _CHECKS_MAX:
        _CHECKS.clear()
    _CHECKS[run_id] = check
    return check


# a runner's POST of records runs these every time: peewee building their SQL cost more CPU than PostgreSQL
# spent on them, so each is built once (and planned once per connection on PostgreSQL).
# Each statement is a round trip with its row's mapping, which at a stream's pace (a POST every 200 ms, caches
# gone cold in between) cost the web more CPU than PostgreSQL spent, so a busy stream's POST reads what it needs
# in one statement: the run with its device (by the token's digest) and its monitor, under the lock; its check is
# read once per run (issue 27). They read only the columns used, not whole rows: a monitor has nearly fifty; a
# status change reloads it whole for its event (app/runner.py).
_DEVICE_AND_CHECK = Prepared("vigil_run_device_check", lambda run_id, digest: (
    CommandRun.select(CommandRun.id, CommandRun.device, CommandRun.monitor, Device.id, Device.user,
                      Device.token_digest, Device.revoked_at, Monitor.id, Monitor.check)
    .join(Device).switch(CommandRun).join(Monitor)
    .where((CommandRun.id == run_id) & (Device.token_digest == digest))))
_RUN_LOCKED = Prepared("vigil_run_locked_by_token", lambda run_id, digest: _for_update(
    CommandRun.select(CommandRun.id, CommandRun.device, CommandRun.monitor, CommandRun.kind, CommandRun.command,
                      CommandRun.status, CommandRun.acked_seq, CommandRun.exit_code, CommandRun.end_reason,
                      CommandRun.started_at, CommandRun.finished_at,
                      Device.id, Device.user, Device.token_digest, Device.revoked_at,
                      Monitor.id, Monitor.user, Monitor.conversation, Monitor.status,
                      Monitor.description, Monitor.note, Monitor.on_match, Conversation.id, Conversation.external_id)
    .join(Device).switch(CommandRun).join(Monitor).join(Conversation)
    .where((CommandRun.id == run_id) & (Device.token_digest == digest))))
_NEW_RECORD = Prepared("vigil_run_record_new", lambda run_id, seq, kind, lines, received_at: RunRecord.insert({
    RunRecord.run: run_id, RunRecord.seq: seq, RunRecord.kind: kind, RunRecord.lines: lines,
    RunRecord.received_at: received_at}))
_SAVE_RUN = Prepared("vigil_run_save", lambda acked, status, started, finished, code, reason, run_id: (
    CommandRun.update({CommandRun.acked_seq: acked, CommandRun.status: status, CommandRun.started_at: started,
                       CommandRun.finished_at: finished, CommandRun.exit_code: code, CommandRun.end_reason: reason})
    .where(CommandRun.id == run_id)))


def _for_update(query):
    """Two requests (two web processes) with the same records: one at a time, locking the run's row only (not its
    monitor's or conversation's, which other work updates). SQLite's one writer needs none."""
    return query.for_update(of=CommandRun) if database.for_update else query


def _store_one(run: CommandRun, monitor: Monitor, record: dict, now: datetime, life: Lifecycle,
               stored: Stored, picked: list[str]) -> None:
    """One record, in the caller's transaction; `picked`: the lines of a `lines` record that wake."""
    kind = record["kind"]
    lines, more = record.get("lines") or [], record.get("more", 0)
    _NEW_RECORD.later(run.id, record["seq"], kind, len(lines) + more, now)
    if kind in ("started", "exit"):
        stored.watcher_changed = True
    if kind == "started":
        run.started_at = run.started_at or now
        run.status = RUNNING if run.status == PENDING else run.status
        return
    if kind == "exit":
        _end_run(run, monitor, record, now, stored)
        return
    live = monitor is not None and monitor.status == ACTIVE and run.status != STOPPING
    if not live:
        return  # the owner stopped it meanwhile: stored (so the runner moves on), not woken
    if kind == "lines":
        # the lines a record counts in `more` (past its size) were not seen here: they wake, said by their count
        text = lines_text(monitor.description, picked, more) if picked or more else ""
    else:
        text = notice_text(monitor.description, str(record.get("text", "")))
    if text:
        counts = {"lines": len(picked), **({"more": more} if more else {})} if kind == "lines" else {"lines": 0}
        _wake(run, monitor, record["seq"], text, now, life, stored, counts)


def _wake(run: CommandRun, monitor: Monitor, seq: int, text: str, now: datetime, life: Lifecycle, stored: Stored,
          extra: dict) -> None:
    """One wake per record that wakes. A stream is seed 002's: its own guards bound it (the device's 200 ms
    batching and 5,000-line flood guard, the expiry, a cancel), so neither MONITOR_MAX_WAKES_PER_HOUR nor seed
    001's daily fire cap applies (issue 27); `life` is kept for the caller's shape."""
    stored.woke.append(write_wake(monitor, "command", f"run:{run.id}:{seq}", text,
                                  {"run_id": run.id, "seq": seq, **extra}))


def _end_run(run: CommandRun, monitor: Monitor, record: dict, now: datetime, stored: Stored) -> None:
    """The exit record: the run is over; a watch that ended by itself says so once, and is done."""
    reason = record.get("reason") or "exited"
    code = record.get("code")
    was_stopped = run.status == STOPPING
    run.status, run.finished_at, run.exit_code, run.end_reason = FINISHED, now, code, reason
    _audit_finished(run, monitor, code, reason)
    if monitor is None or monitor.status != ACTIVE or was_stopped or reason == "stopped":
        return
    if Monitor.update(status=DONE, updated_at=now).where((Monitor.id == monitor.id) & (Monitor.status == ACTIVE)) \
            .execute() == 1:
        monitor.status = DONE
    stored.woke.append(write_wake(monitor, "command", f"run:{run.id}:end", ending_text(monitor.description, reason,
                                                                                       code),
                                  {"run_id": run.id, "exit_code": code, "reason": reason}))


def no_such_run(run_id: str) -> RecordRefused:
    """What a device is told of a run id that is not one of its runs."""
    return RecordRefused(f"There is no run {run_id} of this device.", 404)


def store_result(device: Device, run_id: str, exit_code: int | None, output: str, timed_out: bool,
                 now: datetime) -> bool:
    """A polled run's result, kept until the worker checks it; False when it was stored already."""
    run = CommandRun.get_or_none((CommandRun.id == run_id) & (CommandRun.device == device))
    if run is None:
        raise no_such_run(run_id)
    if run.kind != "poll":
        raise RecordRefused(f"Run {run_id} is a stream; send records, not a result.", 409)
    changed = CommandRun.update(status=FINISHED, exit_code=exit_code, output=output, timed_out=timed_out,
                                started_at=run.started_at or now, finished_at=now,
                                end_reason="timed_out" if timed_out else "exited") \
        .where((CommandRun.id == run_id) & CommandRun.status.in_(UNFINISHED)).execute()
    if changed:
        _audit_finished(run, None, exit_code, "timed_out" if timed_out else "exited")
    return bool(changed)


def take_result(run_id: str) -> CommandRun | None:
    """A finished polled run not checked yet, marked checked (in the caller's transaction)."""
    run = CommandRun.get_or_none((CommandRun.id == run_id) & CommandRun.processed_at.is_null()
                                 & (CommandRun.status == FINISHED))
    if run is None:
        return None
    if CommandRun.update(processed_at=utcnow()).where((CommandRun.id == run_id)
                                                      & CommandRun.processed_at.is_null()).execute() != 1:
        return None
    return run


def unchecked_results(older_than: datetime) -> list[str]:
    """Results whose check message was lost (queued again by the scheduler's sweep)."""
    return [r.id for r in CommandRun.select(CommandRun.id).where(
        (CommandRun.kind == "poll") & (CommandRun.status == FINISHED) & CommandRun.processed_at.is_null()
        & (CommandRun.finished_at < older_than)).limit(500)]


def expire_runs(now: datetime) -> list[CommandRun]:
    """Polled runs no device answered in time: expired, each to be recorded as an unreachable check."""
    late = list(CommandRun.select().where((CommandRun.kind == "poll") & CommandRun.status.in_(UNFINISHED)
                                          & (CommandRun.deadline_at < now)).limit(500))
    ended = []
    for run in late:
        if CommandRun.update(status=EXPIRED_RUN, finished_at=now, end_reason="unanswered", processed_at=now) \
                .where((CommandRun.id == run.id) & CommandRun.status.in_(UNFINISHED)).execute() == 1:
            ended.append(run)
    return ended


def pause_device_monitors(device: Device, reason: str, now: datetime) -> list[tuple[Monitor, object]]:
    """A revoked device's monitors pause and tell their agents; returns each with its wake."""
    paused = []
    for row in Monitor.select(Monitor.id).where((Monitor.device_id == device.id)
                                                & Monitor.status.in_((ACTIVE, AWAITING))):
        monitor = load_for_check(row.id)
        if monitor.status == AWAITING:
            _set_status(monitor, AWAITING, PAUSED)
            woke = write_wake(monitor, "monitor_paused", f"paused:{monitor.claim_seq}",
                              paused_text(monitor.description, reason), {"reason": reason})
        else:
            woke = pause_and_tell(monitor, monitor.claim_seq, reason, now).woke
        paused.append((load_for_check(monitor.id), woke))
    return paused


def _set_status(monitor: Monitor, before: str, after: str) -> None:
    Monitor.update(status=after, updated_at=utcnow()).where((Monitor.id == monitor.id) & (Monitor.status == before)) \
        .execute()
    monitor.status = after


def _audit(monitor: Monitor, device: Device, source: dict, decision: str) -> None:
    detail = {"device": device.name, "device_id": device.id, "command": source.get("command"),
              "cwd": source.get("cwd"), "mode": source.get("mode"), "decision": decision}
    AuditEvent.create(user=monitor.user_id, action="command.armed", monitor=monitor.id,
                      detail=json.dumps(detail, ensure_ascii=False))


def _audit_finished(run: CommandRun, monitor: Monitor | None, code: int | None, reason: str) -> None:
    approval = CommandApproval.get_or_none(CommandApproval.monitor == run.monitor_id)
    detail = {"device_id": run.device_id, "run_id": run.id, "command": run.command, "mode": run.kind,
              "decision": approval.decision if approval else "full", "exit_code": code, "reason": reason}
    user = monitor.user_id if monitor is not None else Monitor.get_by_id(run.monitor_id).user_id
    AuditEvent.create(user=user, action="command.finished", monitor=run.monitor_id,
                      detail=json.dumps(detail, ensure_ascii=False))
