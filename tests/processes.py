"""Vigil's own commands run as real processes, the way a user or a Procfile runs them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

VIGIL = str(Path(sys.executable).with_name("vigil"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def vigil(*args: str, env: dict) -> str:
    """Run one `vigil` command to completion; its standard output."""
    done = subprocess.run([VIGIL, *args], env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise AssertionError(f"vigil {' '.join(args)} failed: {done.stderr}")
    return done.stdout


def start(args: list[str], env: dict, log: Path) -> subprocess.Popen:
    handle = open(log, "ab")
    return subprocess.Popen(args, env={**os.environ, **env}, stdout=handle, stderr=subprocess.STDOUT,
                            start_new_session=True)


def wait_healthy(base: str, process: subprocess.Popen, log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the server exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if requests.get(f"{base}/readyz", timeout=1).ok:
                return
        except requests.ConnectionError:
            time.sleep(0.2)
    raise AssertionError(f"the server did not answer within {timeout}s:\n{log.read_text()[-3000:]}")


def stop(process: subprocess.Popen, timeout: float = 15) -> int:
    """SIGTERM, as a process manager sends it; returns the exit code."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(5)
        raise AssertionError(f"the process did not stop within {timeout}s of SIGTERM") from None


def terminate(process: subprocess.Popen, timeout: float = 15) -> int:
    """SIGTERM to the command's own process, as a process manager sends it; its exit code.

    Only the leader is signalled first: `vigil worker` is Dramatiq's main process, which forwards the signal to
    its worker process; a second SIGTERM straight to that child (what `stop`'s process-group signal does) makes
    Dramatiq kill it hard and exit 1. `stop` then reaps the leader, or signals the whole group if it is stuck.
    """
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    return stop(process)


def processes_with(marker: str) -> list[tuple[int, int]]:
    """(pid, pgid) of every live process whose command line holds `marker`, this test process aside (a tmp_path
    marker is in pytest's own arguments too)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if marker in cmdline:
                found.append((int(entry), os.getpgid(int(entry))))
        except (OSError, ProcessLookupError):
            continue
    return found


def group_gone(pgid: int) -> bool:
    """Whether no process of the group is left (a killed group whose members were all reaped)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False
