"""A stream run: tail its output file through the framer into the spool, and end it with an `exit` record.

The command writes to a file, so it and its output survive the runner: a runner restarted after a kill -9 goes on
tailing the file of a command that still runs (its group still ours), and ends a run whose command exited while it
was down with what is left of the file (`exited`, the code unknown). The read offset advances in the same
transaction as the records it produced, so nothing is read twice or lost across a kill -9.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable, Optional

from runner import processes
from runner.framing import FLOOD_TEXT, LineFramer
from runner.spool import ENDED, Run, Spool

#: how often a stream's output file is read
TAIL_SECONDS = 0.05
#: most bytes read in one go; more waiting is read without pausing
READ_MAX_BYTES = 1024 * 1024

INTERRUPTED_RESTART = "interrupted: the runner restarted"
INTERRUPTED_STOPPED = "interrupted: the runner was stopped"

log = logging.getLogger("vigil.runner")


class StreamWatch:
    """One stream run, from its spooled row (and its Popen, when this runner started it)."""

    def __init__(self, spool: Spool, run: Run, proc=None, on_record: Callable[[], None] = lambda: None):
        self.run_id = run.run_id
        self._spool = spool
        self._proc = proc
        self._pid, self._pgid, self._identity = run.pid, run.pgid, run.identity
        self._path = run.output
        self._on_record = on_record
        self._framer = LineFramer(offset=run.read_offset, seen=run.lines, dropped=run.dropped)
        self._wake = threading.Event()
        self._ending: Optional[str] = None  # "stopped" or "interrupted", once asked

    @property
    def stopping(self) -> bool:
        """Whether a stop was asked."""
        return self._ending is not None

    def stop(self, reason: str = "stopped") -> None:
        """Ask the watch to stop its command and end with `reason` ("stopped" or "interrupted")."""
        if self._ending is None:
            self._ending = reason
        self._wake.set()

    def abort(self) -> None:
        """Stop the command's group at once (the watch itself failed)."""
        self._stop_group()

    def watch(self) -> None:
        """Tail the output until the command exits, floods or is stopped; then end the run. A thread's target."""
        with self._open() as output:
            while True:
                data = output.read(READ_MAX_BYTES)
                now = time.monotonic()
                self._store(self._framer.feed(data, now) if data else self._framer.tick(now))
                if self._framer.flooded or self._ending is not None or self._exited():
                    break
                if len(data) < READ_MAX_BYTES:
                    self._wake.wait(TAIL_SECONDS)
            self._end(output, self._ending or "exited", INTERRUPTED_STOPPED)

    def recover(self) -> bool:
        """A run a killed runner left behind: True when its command still runs (then `watch` goes on with it).

        Otherwise the run is ended here: with what is left of its output and `exited` (the code is unknown: the
        command was not this runner's child) when the command ended while the runner was down, or `interrupted`
        when the runner was killed before it started the command."""
        if self._spool.run(self.run_id).next_seq == 1:
            self._spool.append(self.run_id, [{"kind": "started", "pid": None}])
            reason = "interrupted"
        elif self._running():
            return True
        else:
            reason = "exited"
        with self._open() as output:
            self._end(output, reason, INTERRUPTED_RESTART)
        return False

    def _running(self) -> bool:
        """Whether the command (its group, and the shell that leads it) is still there and still ours."""
        return processes.still_ours(self._pgid, self._identity) and processes.leader_alive(self._pid,
                                                                                           self._identity)

    def _exited(self) -> bool:
        """Whether the command's shell has exited (polled by its identity when it is not this runner's child)."""
        if self._proc is not None:
            return self._proc.poll() is not None
        return not processes.leader_alive(self._pid, self._identity)

    def _open(self):
        """The output file, at the offset the spool has accounted for (an empty file if it is gone)."""
        try:
            output = open(self._path, "rb", buffering=0)
        except (OSError, TypeError):
            return open(os.devnull, "rb", buffering=0)
        if self._framer.offset:  # did the last frame end at a truncation? then the rest of that line is dropped
            output.seek(self._framer.offset - 1)
            self._framer.resume(output.read(1))
        output.seek(self._framer.offset)
        return output

    def _end(self, output, reason: str, interrupted_text: str) -> None:
        self._stop_group()
        code = processes.exit_code(self._proc.returncode) if self._proc is not None else None
        self._drain(output)
        records = [self._framer.dropped_notice()]
        if self._framer.flooded:
            records.append({"kind": "notice", "text": FLOOD_TEXT})
            reason = "flood"
        if reason == "interrupted":
            records.append({"kind": "notice", "text": interrupted_text})
        records.append({"kind": "exit", "code": code, "reason": reason})
        self._spool.append(self.run_id, [record for record in records if record], status=ENDED,
                           read_offset=self._framer.offset, lines=self._framer.seen, dropped=0)
        self._on_record()
        log.info("%s ended: %s%s", self.run_id, reason, "" if code is None else f" (code {code})")

    def _stop_group(self) -> None:
        """Stop what is left of the group: all of it when stopping, a finished shell's leftovers otherwise."""
        if self._proc is not None:
            processes.stop_group(self._pgid, self._proc)
        elif processes.still_ours(self._pgid, self._identity):
            processes.stop_group(self._pgid)

    def _drain(self, output) -> None:
        while not self._framer.flooded:
            data = output.read(READ_MAX_BYTES)
            if not data:
                break
            self._store(self._framer.feed(data, time.monotonic()))
        self._store(self._framer.close(time.monotonic()))

    def _store(self, frames: list) -> None:
        """Spool each frame with the offset it accounts for; count it as dropped when the spool is full."""
        for frame in frames:
            if self._spool.full():
                self._framer.drop(frame)
                records = []
            else:
                notice = self._framer.dropped_notice()
                records = [notice, frame.record] if notice else [frame.record]
            self._spool.append(self.run_id, records, read_offset=frame.end, lines=frame.seen,
                               dropped=self._framer.dropped)
        if frames:
            self._on_record()
