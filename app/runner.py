"""/api/runner/…: what a paired device's `vigil runner` calls (docs/runner.md). Outbound from the device only:
pairing, the long-poll for assignments and stop orders, numbered records of streams, results of polled runs.

The long-poll is async: while it waits it holds no thread and no database connection, only a subscription to
its owner's events (a `device.work` hint): a queue fed by the web process's one Redis subscription
(adapters/events.py), and no timer but its own end. Everything a runner sends lands in PostgreSQL, so any web
process may take any call.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import peewee

from litestar import Controller, Request, Response, get, post
from litestar.concurrency import sync_to_thread
from litestar.exceptions import ClientException, NotAuthorizedException, ValidationException
from litestar.params import FromPath, FromQuery, JSONBody

from adapters.events import RESUMED
from app.auth import bearer_token
from models import connection, utcnow
from models.db import EmbeddedSqlite, database, locked, retry_locked
from models.commands import (
    MAX_RECORDS_PER_POST, RecordRefused, no_such_run, store_records, store_result, work_for,
)
from models.devices import AnotherRunner, PairingError, check_in, device_for_token, pair
from models.monitors import load_for_check
from tasks.broker import UNAVAILABLE
from tasks.commands import check_command_result
from tasks.events import publish_device, publish_monitor, publish_wakes, publish_work
from tasks.runtime import current

#: a record's JSON may be at most this large: the runner's largest (runner/framing.py RECORD_MAX_BYTES, a 200 ms
#: batch's lines up to 256 KiB, the rest counted in `more`), which is also its uploader's request batch
MAX_RECORD_BYTES = 256 * 1024
RECORD_KINDS = ("started", "lines", "notice", "exit")
END_REASONS = ("exited", "stopped", "flood", "interrupted", "refused")
UNPAIRED = ("This device is not paired with Vigil (its token was revoked or is unknown); pair it again with "
            "`vigil runner pair`.")


ANOTHER_RUNNER = ("Another runner is already connected with this device's token; stop it first (or wait 90 s after "
                  "it stopped), or pair this machine as a device of its own.")


def _answer(body: dict, status: int = 200) -> Response:
    return Response(body, status_code=status, headers={"Cache-Control": "no-store"})


class RunnerController(Controller):
    path = "/api/runner"

    @post("/pair", status_code=201)
    async def pair_device(self, data: JSONBody[Any]) -> Response:
        if not isinstance(data, dict) or not isinstance(data.get("code"), str):
            raise ValidationException("Send {\"code\": \"…\"}: the pairing code from Settings → Devices.")
        fields = {name: data.get(name) if isinstance(data.get(name), str) else ""
                  for name in ("name", "hostname", "version")}
        return await sync_to_thread(_pair, data["code"], fields)

    @get("/poll")
    async def poll(self, request: Request, wait: FromQuery[int] = 25) -> Response:
        device_id, user_id, work = await sync_to_thread(_check_in, request)
        hold = min(max(wait, 0), current().settings.RUNNER_POLL_SECONDS)
        if _has(work) or hold == 0:
            return _answer(work)
        return _answer(await _wait_for_work(device_id, user_id, hold))

    @post("/runs/{run_id:str}/records", status_code=200)
    async def records(self, request: Request, run_id: FromPath[str], data: JSONBody[Any]) -> Response:
        """Served by app/runner_records.py in `vigil web` and `vigil serve` (below Litestar, for its cost on a busy
        stream's every batch); this route is what the in-process test client and the OpenAPI document see."""
        records = checked_records(data)
        body, status = await sync_to_thread(store_records_answer, bearer_token(request), run_id, records)
        return _answer(body, status)

    @post("/runs/{run_id:str}/result", status_code=200)
    async def result(self, request: Request, run_id: FromPath[str], data: JSONBody[Any]) -> Response:
        exit_code, output, timed_out = _checked_result(data)
        return await sync_to_thread(_store_result, request, run_id, exit_code, output, timed_out)


def _pair(code: str, fields: dict) -> Response:
    with connection():
        try:
            device, token = pair(code, fields["name"], fields["hostname"], fields["version"], utcnow())
        except PairingError as exc:
            return _answer({"detail": str(exc)}, 400)
        publish_device(device, listing=True)
    return _answer({"device_id": device.id, "name": device.name, "token": token}, 201)


def _device(request: Request, whole: bool = True):
    return _device_of(bearer_token(request), whole)


def _device_of(token: str | None, whole: bool = True):
    device = device_for_token(token, whole)
    if device is None:
        raise NotAuthorizedException(UNPAIRED)
    return device


def _check_in(request: Request) -> tuple[int, int, dict]:
    """The heartbeat and the work waiting, in one unit: (device id, its owner's id, the work)."""
    session = request.headers.get("x-vigil-session", "").strip()
    if not session or len(session) > 64:
        raise ValidationException("Send X-Vigil-Session: the runner's session id (from its state directory).")
    with connection():
        device = _device(request)
        try:
            came_online = check_in(device, session, request.headers.get("x-vigil-runner-version", ""), utcnow(),
                                   current().presence)
        except AnotherRunner:
            raise ClientException(status_code=409, detail=ANOTHER_RUNNER) from None
        if came_online:  # the whole list: a device just paired shows up even if its pairing event was missed
            publish_device(device, listing=True)
        return device.id, device.user_id, _work(device.id)


def _work(device_id: int) -> dict:
    with connection():
        assignments, stops = work_for(device_id, current().settings.FETCH_MAX_TEXT_BYTES)
    return {"assignments": assignments, "stops": stops}


def _has(work: dict) -> bool:
    return bool(work["assignments"] or work["stops"])


async def _wait_for_work(device_id: int, user_id: int, hold: float) -> dict:
    """Hold the poll until a hint for this device finds work, or `hold` runs out. No timer looks meanwhile: the
    database is read when the subscription starts (what arrived before it is not missed), on a hint, and when the
    bus says its subscription came back after a Redis outage (hints may have been lost then). A hint lost
    otherwise (its publisher met Redis down) costs at most this hold: the runner's next poll reads the work."""
    async with current().bus.subscribe(user_id) as queue:
        work = await sync_to_thread(_work, device_id)
        try:
            async with asyncio.timeout(hold):
                while not _has(work):
                    name, data = await queue.get()
                    if name == RESUMED or (name == "device.work" and data.get("device_id") == device_id):
                        work = await sync_to_thread(_work, device_id)
        except TimeoutError:
            pass
    return work


def checked_records(data: Any, body_bytes: int | None = None) -> list[dict]:
    """The records of a POST's body, each checked; ValidationException (400, or RecordTooLarge 413) says what to
    fix. `body_bytes`, the body's length when known: a body at most half MAX_RECORD_BYTES can't hold a record over
    it (written out again, a record grows by at most a space after each `,` and `:`), so none is measured."""
    if not isinstance(data, dict) or not isinstance(data.get("records"), list) or not data["records"]:
        raise ValidationException("Send {\"records\": [{\"seq\", \"kind\", …}, …]}.")
    if len(data["records"]) > MAX_RECORDS_PER_POST:
        raise ValidationException(f"At most {MAX_RECORDS_PER_POST} records a request.")
    measure = body_bytes is None or 2 * body_bytes > MAX_RECORD_BYTES
    return [_checked_record(record, measure) for record in data["records"]]


def _checked_record(record: Any, measure: bool = True) -> dict:
    if not isinstance(record, dict):
        raise ValidationException("Each record is an object with seq and kind.")
    if measure and len(json.dumps(record, ensure_ascii=False).encode()) > MAX_RECORD_BYTES:
        raise RecordTooLarge()
    seq, kind = record.get("seq"), record.get("kind")
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1 or kind not in RECORD_KINDS:
        raise ValidationException(f"A record needs seq (a whole number from 1) and kind ({', '.join(RECORD_KINDS)}).")
    if kind == "lines":
        return _checked_lines(seq, record)
    if kind == "notice":
        if not isinstance(record.get("text"), str):
            raise ValidationException("A notice record carries text.")
        return {"seq": seq, "kind": kind, "text": _text(record["text"])}
    if kind == "exit":
        code, reason = record.get("code"), record.get("reason", "exited")
        if (code is not None and (isinstance(code, bool) or not isinstance(code, int))) or reason not in END_REASONS:
            raise ValidationException(f"An exit record carries code (a whole number or null) and reason "
                                      f"({', '.join(END_REASONS)}).")
        return {"seq": seq, "kind": kind, "code": code, "reason": reason}
    return {"seq": seq, "kind": kind}


def _checked_lines(seq: int, record: dict) -> dict:
    """A batch: its lines, and `more` (how many of its lines did not fit in the record) when some did not."""
    lines, more = record.get("lines"), record.get("more", 0)
    if not isinstance(lines, list) or not lines or not all(isinstance(line, str) for line in lines):
        raise ValidationException("A lines record carries lines: a non-empty list of strings.")
    if isinstance(more, bool) or not isinstance(more, int) or more < 0:
        raise ValidationException("A lines record's more (the batch's lines it does not carry) is a whole number "
                                  "from 0.")
    checked = {"seq": seq, "kind": "lines", "lines": [_text(line) for line in lines]}
    return {**checked, "more": more} if more else checked


def _text(text: str) -> str:
    """PostgreSQL text can't hold NUL; a command may print one."""
    return text.replace("\x00", "\ufffd")


class RecordTooLarge(ValidationException):
    status_code = 413

    def __init__(self) -> None:
        super().__init__(f"A record is over {MAX_RECORD_BYTES} bytes; a record shows its lines up to "
                         f"{MAX_RECORD_BYTES} bytes and counts the rest in more.")


def store_records_answer(token: str | None, run_id: str, records: list[dict]) -> tuple[dict, int]:
    """The answer's body and status for checked records of `run_id` sent with `token` (NotAuthorizedException
    for a token of no live device). Numbered records are stored once whatever is sent again, so a unit of work
    that met SQLite's write lock simply runs again here: the runner never sees a 503 for it. Call in a thread."""
    return retry_locked(_store_records_once, token, run_id, records)


#: a POST of at most this many lines may be stored on the event loop when embedded (store_records_now): its
#: regex or CEL filter runs there too, so the batch is kept small
NOW_MAX_LINES = 20


def store_records_now(token: str | None, run_id: str, records: list[dict]) -> tuple[dict, int] | None:
    """Embedded, a small POST is stored right here on the web's event loop, when SQLite's write lock is free at
    once: SQLite is this process, a transaction of a few statements takes tens of microseconds, and handing it
    to a thread and back cost more CPU than the whole store (two wakes of two threads, every 200 ms of a busy
    stream; issue 27). None, with nothing stored, when it must go to a thread (production's network database, a
    bigger batch, another writer's turn): store_records_answer then does it, waiting its turn as usual."""
    db = database.obj
    if not isinstance(db, EmbeddedSqlite) or sum(len(r.get("lines") or ()) for r in records) > NOW_MAX_LINES:
        return None
    # the loop keeps its connection between POSTs (opened here, never closed): the pool's checkout and return
    # were a tenth of a POST's CPU, and a SQLite connection outside a transaction holds nothing
    db.connect(reuse_if_open=True)
    with db.without_waiting():
        try:
            return _store_records_once(token, run_id, records)
        except peewee.OperationalError as exc:
            if locked(exc):
                return None
            raise


def _store_records_once(token: str | None, run_id: str, records: list[dict]) -> tuple[dict, int]:
    runtime = current()
    with connection():
        try:
            done = store_records(token, run_id, records, utcnow(), runtime.lifecycle)
            if done is None:  # which: an unpaired token (401), or a run that is not this device's
                _device_of(token, whole=False)
                raise no_such_run(run_id)
        except RecordRefused as exc:
            return {"detail": str(exc)}, exc.status
        device, stored = done
        _publish_records(stored, device)
    return {"acked": stored.acked}, 200


def _publish_records(stored, device) -> None:
    """The wakes' message.created; the monitor's own events only when the records changed its status (the
    watch ended, or paused at the hourly cap) or its watcher (a run started or ended), so a busy stream costs one
    publish per wake, nothing more."""
    monitor = stored.monitor
    if monitor is None:
        return
    publish_wakes(monitor, stored.woke)
    if monitor.status != stored.status_before or stored.watcher_changed:
        publish_monitor(load_for_check(monitor.id), status_before=stored.status_before)
    elif stored.stopped_devices:
        publish_work(device.user_id, stored.stopped_devices)


def _store_result(request: Request, run_id: str, exit_code, output: str, timed_out: bool) -> Response:
    """Stored once (a repeat is recognised), so the lock is waited out here as for records."""
    return retry_locked(_store_result_once, request, run_id, exit_code, output, timed_out)


def _store_result_once(request: Request, run_id: str, exit_code, output: str, timed_out: bool) -> Response:
    limit = current().settings.FETCH_MAX_TEXT_BYTES
    with connection():
        device = _device(request, whole=False)
        try:
            fresh = store_result(device, run_id, exit_code, _text(output.encode()[:limit].decode(errors="ignore")),
                                 timed_out, utcnow())
        except RecordRefused as exc:
            return _answer({"detail": str(exc)}, exc.status)
    if fresh:
        try:
            check_command_result.send(run_id)
        except UNAVAILABLE:
            pass  # stored: the scheduler's sweep queues it once Redis is back
    return _answer({"ok": True})


def _checked_result(data: Any) -> tuple[int | None, str, bool]:
    if not isinstance(data, dict):
        raise ValidationException("Send {\"exit_code\", \"output\", \"timed_out\"}.")
    code, output, timed_out = data.get("exit_code"), data.get("output", ""), data.get("timed_out", False)
    if (code is not None and (isinstance(code, bool) or not isinstance(code, int))) or not isinstance(output, str) \
            or not isinstance(timed_out, bool):
        raise ValidationException("exit_code is a whole number or null, output text, timed_out true or false.")
    return code, output, timed_out
