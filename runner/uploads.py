"""The uploader: sends each run's spooled records in order until acknowledged, and polled runs' results.

Records go in batches (at most 256 KiB a request) from the lowest unacknowledged seq; the server's `acked` says
how far it holds them without a gap, so a resend after a lost answer or a restart is harmless. Network errors
and 5xx answers back off briefly (0.5, 1, 2, 4, 5, 5 … s; a Retry-After is honoured up to 5 s), so lines never
wait long for a server that is back, and never end the loop; only 401 and a 409 poll do, through `on_fatal`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Callable

from runner.client import AnotherRunner, Backoff, Client, Refused, Unpaired, Unreachable
from runner.framing import dropped_notice
from runner.spool import ENDED, Spool

#: most bytes of records one request carries
BATCH_MAX_BYTES = 256 * 1024
#: most records one request carries (the server takes up to 200)
BATCH_MAX_RECORDS = 100
#: how long the uploader sleeps when nothing new was spooled
IDLE_SECONDS = 1.0
#: the first and the longest pause before records are sent again (after a network error, a 5xx or a 429 — whatever
#: its Retry-After — or an answer that acknowledged less than was sent): lines must not wait long once it is back
RETRY_FIRST_SECONDS = 0.5
RETRY_MAX_SECONDS = 5.0

log = logging.getLogger("vigil.runner")


class Uploader:
    """Sends what the spool holds, calling back on a finished, an abandoned run, and a fatal answer."""

    def __init__(self, spool: Spool, client: Client, on_done: Callable[[str], None],
                 on_abandon: Callable[[str], None], on_fatal: Callable[[Exception], None]):
        # on_done(run_id): the run's last record was acknowledged; on_abandon(run_id): the server refuses the run
        # for good; on_fatal(error): Unpaired or AnotherRunner
        self._spool = spool
        self._client = client
        self._on_done = on_done
        self._on_abandon = on_abandon
        self._on_fatal = on_fatal
        self._wake = threading.Event()
        self._halt = threading.Event()
        self._singly: set = set()  # runs whose records go one a request (after a 413)
        self._not_before: dict = {}  # run_id -> (monotonic time, Backoff): a run the server stopped acknowledging

    def kick(self) -> None:
        """Something was spooled: send it now."""
        self._wake.set()

    def halt(self) -> None:
        """End the loop after the current request."""
        self._halt.set()
        self._wake.set()

    def idle(self) -> bool:
        """Whether nothing is waiting to be sent."""
        return not self._spool.unsent() and not self._results()

    def loop(self) -> None:
        """Send until halted; a thread's target."""
        backoff = Backoff(RETRY_FIRST_SECONDS, RETRY_MAX_SECONDS)
        while not self._halt.is_set():
            self._wake.clear()
            try:
                self.send_all()
            except (Unpaired, AnotherRunner) as exc:
                self._on_fatal(exc)
                return
            except Unreachable as exc:
                if self._halt.is_set():
                    return
                delay = backoff.next(exc.retry_after)
                log.warning("sending records: %s; trying again in %.1f s", exc.detail, delay)
                self._halt.wait(delay)
                continue
            except Exception:  # noqa: BLE001 - a bug or a closed spool must not end the uploads silently
                if self._halt.is_set():
                    return
                log.exception("sending records failed")
                self._halt.wait(backoff.next())
                continue
            backoff.reset()
            self._wake.wait(IDLE_SECONDS)

    def send_all(self) -> None:
        """One pass: every pending result, then every run's pending records."""
        for run in self._results():
            self._send_result(run)
        for run_id in self._spool.unsent():
            if self._halt.is_set():
                return
            if self._not_before.get(run_id, (0.0, None))[0] <= time.monotonic():
                self._send_records(run_id)

    def _results(self) -> list:
        return [run for run in self._spool.runs(ENDED) if run.result is not None]

    def _send_result(self, run) -> None:
        try:
            self._client.result(run.run_id, json.loads(run.result))
        except Refused as exc:
            log.error("the server refused the result of %s (%s: %s); dropping it", run.run_id, exc.status,
                      exc.detail)
        self._spool.finish(run.run_id)

    def _send_records(self, run_id: str) -> None:
        """Send the run's records, batch after batch, until none is left or the server stops acknowledging."""
        while not self._halt.is_set():
            batch = self._batch(run_id)
            if not batch:
                return
            try:
                acked = self._client.records(run_id, [dict(record, seq=seq) for seq, record in batch])
            except Refused as exc:
                self._refused(run_id, batch, exc)
                return
            if self._spool.ack(run_id, acked):
                self._on_done(run_id)
            if acked < batch[0][0]:
                backoff = self._not_before.get(run_id, (0.0, Backoff(RETRY_FIRST_SECONDS, RETRY_MAX_SECONDS)))[1]
                delay = backoff.next()
                log.warning("the server acknowledged %s only up to %d of %d-%d; sending again in %.1f s", run_id,
                            acked, batch[0][0], batch[-1][0], delay)
                self._not_before[run_id] = (time.monotonic() + delay, backoff)
                return
            self._not_before.pop(run_id, None)

    def _batch(self, run_id: str) -> list:
        limit = 1 if run_id in self._singly else BATCH_MAX_RECORDS
        batch, size = [], 0
        for seq, record in self._spool.pending(run_id, limit):
            size += len(json.dumps(record, ensure_ascii=False).encode("utf-8")) + 16
            if batch and size > BATCH_MAX_BYTES:
                break
            batch.append((seq, record))
        return batch

    def _refused(self, run_id: str, batch: list, exc: Refused) -> None:
        """400, 413: one record a request, then a `dropped` notice for a refused lines record; else abandon."""
        if exc.status in (400, 413) and len(batch) > 1:
            self._singly.add(run_id)
            return
        seq, record = batch[0]
        if exc.status in (400, 413) and record.get("kind") == "lines":
            log.warning("%s: the server refused record %d (%s: %s); sending a notice instead", run_id, seq,
                        exc.status, exc.detail)
            why = "a record over the server's size limit" if exc.status == 413 else f"refused: {exc.detail}"
            self._spool.replace(run_id, seq, dropped_notice(len(record.get("lines", [])), why))
            return
        log.error("the server refused the records of %s (%s: %s); abandoning the run", run_id, exc.status,
                  exc.detail)
        self._on_abandon(run_id)
