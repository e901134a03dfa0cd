"""Commands in their own process groups: start `sh -c`, stop a whole group, run a polled command to its result.

Every command gets a new session (so a new process group whose id is the shell's pid) and /dev/null for stdin.
Stopping signals the negative pgid: SIGTERM, SIGKILL after a grace, so `tail -F log | grep` goes as a whole.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import Callable, Optional

from runner.framing import cut_utf8

#: seconds a group gets between SIGTERM and SIGKILL
STOP_GRACE_SECONDS = 5.0
#: seconds to wait for a group to be gone after SIGKILL (its members are reaped by their parents or init)
REAP_SECONDS = 5.0
#: how often a stopping or waiting loop looks again
CHECK_SECONDS = 0.02
_READ_BYTES = 65536


def spawn(command: str, cwd: Optional[str], output) -> subprocess.Popen:
    """Start `sh -c command` in a new session, stdout and stderr to `output` (a file or subprocess.PIPE)."""
    return subprocess.Popen(["/bin/sh", "-c", command], shell=False, stdin=subprocess.DEVNULL, stdout=output,
                            stderr=subprocess.STDOUT, cwd=cwd or None, start_new_session=True)


def group_alive(pgid: int) -> bool:
    """Whether any process (a zombie not yet reaped included) is left in the group."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(pgid: int, proc: Optional[subprocess.Popen] = None, grace: float = STOP_GRACE_SECONDS) -> bool:
    """SIGTERM the group, SIGKILL after `grace` s, reaping `proc` (our child leader); True once the group is gone."""
    if not _signal_group(pgid, signal.SIGTERM):
        _reap(proc)
        return True
    if _wait_gone(pgid, proc, grace):
        return True
    _signal_group(pgid, signal.SIGKILL)
    return _wait_gone(pgid, proc, REAP_SECONDS)


def _signal_group(pgid: int, signum: int) -> bool:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    return True


def _wait_gone(pgid: int, proc: Optional[subprocess.Popen], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while True:
        _reap(proc)
        if not group_alive(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(CHECK_SECONDS)


def _reap(proc: Optional[subprocess.Popen]) -> None:
    if proc is not None:
        proc.poll()


def exit_code(returncode: Optional[int]) -> Optional[int]:
    """The code a command exited with, or None when it is still running or a signal ended it."""
    if returncode is None or returncode < 0:
        return None
    return returncode


def identity(pid: int) -> Optional[str]:
    """Boot id and start time: tells this process from a later one with its pid (None without /proc)."""
    boot, fields = _boot_id(), _stat(pid)
    if boot is None or fields is None or len(fields) < 20:
        return None
    return f"{boot}:{fields[19].decode()}"


def _stat(pid: int) -> Optional[list]:
    """The fields of /proc/PID/stat after the command name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def leader_alive(pid: Optional[int], known: Optional[str]) -> bool:
    """Whether the process `pid` whose identity was `known` still runs: not gone, not a zombie, not a stranger.

    What a restarted runner asks of a command it did not start itself (no longer its child, so it can't wait)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    fields = _stat(pid)
    if fields is not None and fields[:1] in ([b"Z"], [b"X"]):
        return False
    now = identity(pid)
    return known is None or now is None or now == known


def _boot_id() -> Optional[str]:
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot:
            return boot.read().strip()
    except OSError:
        return None


def still_ours(pgid: Optional[int], known: Optional[str]) -> bool:
    """Whether the group whose leader had identity `known` is still there (not a stranger after a reboot)."""
    if not pgid or not group_alive(pgid):
        return False
    if known is None:
        return True
    if _boot_id() != known.split(":", 1)[0]:
        return False
    now = identity(pgid)
    return now is None or now == known


def run_polled(command: str, cwd: Optional[str], timeout: Optional[float], max_output_bytes: int,
               stop: Optional[threading.Event] = None,
               on_start: Optional[Callable[[int], None]] = None) -> dict:
    """Run a polled command to its result `{"exit_code", "output", "timed_out", "error"?}`."""
    # At `timeout` (or when `stop` is set) its group is stopped; once its shell exits, whatever it left running in
    # its group is stopped too. `output` is the first `max_output_bytes` it printed.
    try:
        proc = spawn(command, cwd, subprocess.PIPE)
    except (OSError, ValueError) as exc:
        return {"exit_code": None, "output": "", "timed_out": False, "error": f"could not start: {exc}"}
    if on_start is not None:
        on_start(proc.pid)
    reader = _Collector(proc.stdout, max_output_bytes)
    ended = _wait(proc, timeout, stop)
    stop_group(proc.pid, proc)
    reader.join()
    result = {"exit_code": exit_code(proc.returncode), "output": reader.text(), "timed_out": ended == "timeout"}
    if ended == "stopped":
        result["error"] = "stopped before it finished"
    return result


def _wait(proc: subprocess.Popen, timeout: Optional[float], stop: Optional[threading.Event]) -> str:
    """"exited", "timeout" or "stopped"."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            proc.wait(CHECK_SECONDS * 5)
            return "exited"
        except subprocess.TimeoutExpired:
            pass
        if stop is not None and stop.is_set():
            return "stopped"
        if deadline is not None and time.monotonic() >= deadline:
            return "timeout"


class _Collector:
    """Reads a pipe to its end in a thread, keeping the first `limit` bytes and discarding the rest."""

    def __init__(self, pipe, limit: int):
        self._pipe = pipe
        self._limit = max(0, limit)
        self._data = bytearray()
        self._thread = threading.Thread(target=self._read, name="vigil-runner-output", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            while True:
                chunk = self._pipe.read1(_READ_BYTES)
                if not chunk:
                    return
                room = self._limit + 4 - len(self._data)
                if room > 0:
                    self._data += chunk[:room]
        except (OSError, ValueError):
            return

    def join(self) -> None:
        """Wait for the end of the output (bounded: a process that left the group may hold the pipe open)."""
        self._thread.join(REAP_SECONDS)
        if not self._thread.is_alive():
            self._pipe.close()

    def text(self) -> str:
        """What was kept, cut at the limit on a character boundary."""
        return cut_utf8(bytes(self._data), self._limit)
