"""The runner: long-polls the server for assignments and stop orders, runs them, and keeps uploading.

Threads: the poll (assignments, stops), one watch per stream run, one worker per polled run, and the uploader.
`Runner.run(stop)` blocks until `stop` is set, or raises Unpaired / AnotherRunner; it installs no signal
handlers, so it can run in any thread.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import threading
import time
from typing import Optional

from runner import processes
from runner.client import AnotherRunner, Backoff, Client, Refused, Unpaired, Unreachable
from runner.spool import ENDED, RUNNING, STARTING, Spool
from runner.state import State, StateError
from runner.streams import StreamWatch
from runner.uploads import Uploader

#: a poll that brought nothing new and came back sooner than this is followed by a pause this long
POLL_MIN_SECONDS = 1.0
#: seconds a stopping runner keeps uploading what its runs spooled last
SHUTDOWN_UPLOAD_SECONDS = 5.0
#: seconds a stopping runner waits for its poll and upload threads once their calls are cut
NETWORK_JOIN_SECONDS = 2.0
#: a polled run's output cap when the assignment gives none
DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024
#: finished runs are forgotten after this long (their ids can no longer start a run twice by then)
FORGET_SECONDS = 7 * 86400

INTERRUPTED_RESTART = "interrupted: the runner restarted"

log = logging.getLogger("vigil.runner")


class NotPaired(StateError):
    """The state directory has no device.json yet."""


class Runner:
    """The runner of the device paired in `state_dir`; `server` overrides the server URL device.json names."""

    def __init__(self, state_dir: Optional[str] = None, server: Optional[str] = None):
        self.state = State(state_dir)
        self._server = server
        self._lock = threading.RLock()  # held while an assignment starts, so shutdown sees every run
        self._halt = threading.Event()
        self._closing = False
        self._fatal: Optional[Exception] = None
        self._watches: dict = {}  # run_id -> StreamWatch
        self._polled: dict = {}  # run_id -> threading.Event that stops it
        self._threads: list = []

    def run(self, stop: threading.Event) -> None:
        """Run until `stop` is set. Raises NotPaired, StateLocked, Unpaired or AnotherRunner."""
        self.state.lock()
        try:
            device = self.state.device()
            if device is None:
                raise NotPaired(f"no device is paired in {self.state.path}; run `vigil runner pair --server URL "
                                "--code CODE` first")
            self._client = Client(self._server or device.server, device.token, self.state.session())
            self._spool = Spool(str(self.state.spool_file))
            try:
                self._serve(stop, device.name)
            finally:
                self._spool.close()
        finally:
            self.state.unlock()
        if self._fatal is not None:
            raise self._fatal

    def _serve(self, stop: threading.Event, name: str) -> None:
        self._uploader = Uploader(self._spool, self._client, self._done, self._abandon, self._fail)
        self._recover()
        self._network = [self._start_thread(self._uploader.loop, "vigil-runner-upload", keep=False),
                         self._start_thread(self._poll_loop, "vigil-runner-poll", keep=False)]
        log.info("runner for device %s: polling %s (state in %s)", name, self._client.server, self.state.path)
        try:
            while not stop.is_set() and not self._halt.is_set():
                stop.wait(0.2)
        finally:
            self._shutdown()

    def _start_thread(self, target, name: str, keep: bool = True) -> threading.Thread:
        """Start a daemon thread; `keep` ones (the runs) are joined at shutdown."""
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        if keep:
            self._threads = [kept for kept in self._threads if kept.is_alive()] + [thread]
        return thread

    def _fail(self, exc: Exception) -> None:
        """A fatal answer (401, or 409 on the poll): stop everything."""
        if self._fatal is None:
            self._fatal = exc
        self._halt.set()

    # --- start and recovery -------------------------------------------------------------------------------------

    def _recover(self) -> None:
        """Go on watching the streams a killed runner left running, end its other runs, and tidy what finished
        runs left behind."""
        for run in self._spool.runs(STARTING, RUNNING):
            if run.kind == "stream":
                self._recover_stream(run)
            else:
                log.info("%s: %s", run.run_id, INTERRUPTED_RESTART)
                if processes.still_ours(run.pgid, run.identity):
                    processes.stop_group(run.pgid)
                self._store_result(run.run_id, {"exit_code": None, "output": "", "timed_out": False,
                                                "error": INTERRUPTED_RESTART})
        self._spool.prune(time.time() - FORGET_SECONDS)
        active = {run.output for run in self._spool.runs(STARTING, RUNNING, ENDED)}
        for name in os.listdir(self.state.output_dir):
            path = str(self.state.output_dir / name)
            if path not in active:
                _unlink(path)

    def _recover_stream(self, run) -> None:
        """Adopt a stream whose command still runs: tail its file from the spooled offset, as if never killed."""
        watch = StreamWatch(self._spool, run, on_record=self._uploader.kick)
        if not watch.recover():
            return
        log.info("%s: its command (process group %s) still runs; watching it again", run.run_id, run.pgid)
        with self._lock:
            self._watches[run.run_id] = watch
        self._start_thread(lambda: self._watch(watch), f"vigil-runner-watch-{run.run_id}")

    # --- the poll ------------------------------------------------------------------------------------------------

    def _poll_loop(self) -> None:
        backoff = Backoff()
        while not self._closing:
            began = time.monotonic()
            try:
                answer = self._client.poll()
            except (Unpaired, AnotherRunner) as exc:
                return self._fail(exc)
            except (Unreachable, Refused) as exc:
                if self._closing:
                    return
                delay = backoff.next(getattr(exc, "retry_after", None))
                log.warning("polling: %s; trying again in %.0f s", exc.detail, delay)
                self._halt.wait(delay)
                continue
            backoff.reset()
            try:
                acted = self._dispatch(answer)
            except Exception:  # noqa: BLE001 - a bug here must not end the heartbeat
                log.exception("carrying out the poll's answer failed")
                acted = False
            if not acted and time.monotonic() - began < POLL_MIN_SECONDS:
                self._halt.wait(POLL_MIN_SECONDS)

    def _dispatch(self, answer: dict) -> bool:
        """Start new assignments and carry out stop orders; whether anything new was done."""
        acted = False
        assignments, stops = answer.get("assignments"), answer.get("stops")
        for assignment in assignments if isinstance(assignments, list) else []:
            acted = self._assign(assignment) or acted
        for run_id in stops if isinstance(stops, list) else []:
            acted = self._stop(run_id) or acted
        return acted

    def _assign(self, assignment: object) -> bool:
        if not isinstance(assignment, dict) or not isinstance(assignment.get("run_id"), str):
            log.warning("ignoring an assignment without a run_id: %.200r", assignment)
            return False
        run_id, kind = assignment["run_id"], assignment.get("kind")
        output = None if kind == "poll" else self._output_path(run_id)
        with self._lock:
            if self._closing or not self._spool.claim(run_id, str(kind), time.time(), output):
                return False
            log.info("assignment %s (%s): %s", run_id, kind, assignment.get("command"))
            if kind == "poll":
                self._start_polled(run_id, assignment)
            else:
                self._start_stream(run_id, assignment, output)
        return True

    def _output_path(self, run_id: str) -> str:
        return str(self.state.output_dir / (hashlib.sha256(run_id.encode()).hexdigest()[:32] + ".out"))

    def _stop(self, run_id: object) -> bool:
        with self._lock:
            watch = self._watches.get(run_id)
            polled = self._polled.get(run_id)
        if watch is not None and not watch.stopping:
            log.info("stop %s", run_id)
            watch.stop("stopped")
            return True
        if polled is not None and not polled.is_set():
            log.info("stop %s", run_id)
            polled.set()
            return True
        return False

    # --- stream runs ---------------------------------------------------------------------------------------------

    def _start_stream(self, run_id: str, assignment: dict, output: str) -> None:
        """Start the watcher command writing to its output file, spool `started`, and tail it in a thread."""
        command, cwd = assignment.get("command"), assignment.get("cwd")
        error = _assignment_error(assignment)
        if error:
            return self._refuse_stream(run_id, error)
        try:
            with open(output, "ab") as sink:
                proc = processes.spawn(command, cwd, sink)
        except (OSError, ValueError) as exc:
            return self._refuse_stream(run_id, str(exc))
        self._spool.append(run_id, [{"kind": "started", "pid": proc.pid}], status=RUNNING, pid=proc.pid,
                           pgid=proc.pid, identity=processes.identity(proc.pid))
        watch = StreamWatch(self._spool, self._spool.run(run_id), proc, self._uploader.kick)
        with self._lock:
            self._watches[run_id] = watch
        self._start_thread(lambda: self._watch(watch), f"vigil-runner-watch-{run_id}")
        self._uploader.kick()

    def _watch(self, watch: StreamWatch) -> None:
        try:
            watch.watch()
        except Exception:  # noqa: BLE001 - logged; its command is stopped, the next start ends the run
            log.exception("watching %s failed; stopping its command", watch.run_id)
            watch.abort()
        finally:
            with self._lock:
                self._watches.pop(watch.run_id, None)

    def _refuse_stream(self, run_id: str, error: str) -> None:
        log.warning("%s refused: %s", run_id, error)
        self._spool.append(run_id, [{"kind": "started", "pid": None},
                                    {"kind": "notice", "text": f"could not start the command: {error}"},
                                    {"kind": "exit", "code": None, "reason": "refused"}], status=ENDED)
        self._uploader.kick()

    # --- polled runs ---------------------------------------------------------------------------------------------

    def _start_polled(self, run_id: str, assignment: dict) -> None:
        stop = threading.Event()
        with self._lock:
            self._polled[run_id] = stop
        self._start_thread(lambda: self._run_polled(run_id, assignment, stop), f"vigil-runner-poll-{run_id}")

    def _run_polled(self, run_id: str, assignment: dict, stop: threading.Event) -> None:
        try:
            result = self._polled_result(run_id, assignment, stop)
            self._store_result(run_id, result)
            log.info("%s finished: exit code %s%s", run_id, result["exit_code"],
                     ", timed out" if result["timed_out"] else "")
        except Exception:  # noqa: BLE001 - logged; the run is reported interrupted at the next start
            log.exception("running %s failed", run_id)
        finally:
            with self._lock:
                self._polled.pop(run_id, None)

    def _polled_result(self, run_id: str, assignment: dict, stop: threading.Event) -> dict:
        error = _assignment_error(assignment)
        if error:
            log.warning("%s refused: %s", run_id, error)
            return {"exit_code": None, "output": "", "timed_out": False, "error": error}
        return processes.run_polled(
            assignment["command"], assignment.get("cwd"), _number(assignment.get("timeout")),
            int(_number(assignment.get("max_output_bytes")) or DEFAULT_MAX_OUTPUT_BYTES), stop,
            lambda pid: self._spool.append(run_id, [], status=RUNNING, pid=pid, pgid=pid,
                                           identity=processes.identity(pid)))

    def _store_result(self, run_id: str, result: dict) -> None:
        self._spool.append(run_id, [], status=ENDED, result=json.dumps(result, ensure_ascii=False))
        self._uploader.kick()

    # --- uploads and shutdown ------------------------------------------------------------------------------------

    def _done(self, run_id: str) -> None:
        """A run's exit record was acknowledged: its output file is no longer needed."""
        run = self._spool.run(run_id)
        if run is not None and run.output:
            _unlink(run.output)

    def _abandon(self, run_id: str) -> None:
        """The server refused a run for good: stop its command, forget its records."""
        with self._lock:
            watch = self._watches.get(run_id)
        self._spool.finish(run_id)
        if watch is not None:
            watch.stop("stopped")
        self._done(run_id)

    def _shutdown(self) -> None:
        """Stop the runs (each ends `interrupted`), then give the uploader a few seconds to send that."""
        with self._lock:
            self._closing = True
            self._halt.set()
            watches, polled = list(self._watches.values()), list(self._polled.values())
        for watch in watches:
            watch.stop("interrupted")
        for stop in polled:
            stop.set()
        for thread in self._threads:
            thread.join()
        deadline = time.monotonic() + (0 if self._fatal else SHUTDOWN_UPLOAD_SECONDS)
        self._uploader.kick()
        while time.monotonic() < deadline and not self._uploader.idle():
            time.sleep(0.1)
        self._uploader.halt()
        self._client.abort()
        for thread in self._network:
            thread.join(NETWORK_JOIN_SECONDS)


def _assignment_error(assignment: dict) -> Optional[str]:
    """Why an assignment can't be run, or None."""
    if not isinstance(assignment.get("command"), str) or not assignment["command"].strip():
        return "the assignment has no command"
    cwd = assignment.get("cwd")
    if cwd is not None and (not isinstance(cwd, str) or not os.path.isdir(cwd)):
        return f"the working directory {cwd!r} does not exist on {socket.gethostname()}"
    if assignment.get("kind") not in ("poll", "stream"):
        return f"unknown run kind {assignment.get('kind')!r}"
    return None


def _number(value: object) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
