"""Vigil's own commands run as real processes, the way a user or a Procfile runs them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import requests

VIGIL = str(Path(sys.executable).with_name("vigil"))


def free_port() -> int:
    """A port that was free a moment ago; a server to start on it goes through `start_on_free_port`."""
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


#: How a server says another process holds its port: uvicorn logs "[Errno 98] error while attempting to bind on
#: address ('127.0.0.1', N): address already in use" and exits 3; Python's http.server dies with
#: "OSError: [Errno 98] Address already in use".
ADDRESS_IN_USE = "address already in use"


@dataclass
class Served:
    """A server process, the port it holds, and the environment it was started with."""
    process: subprocess.Popen
    port: int
    env: dict

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def serve_vigil(args: list[str], env: dict | Callable[[int], dict], log: Path, *,
                pick: Callable[[], int] = free_port, timeout: float = 30) -> Served:
    """`vigil serve` or `vigil web` (`args` without --port) on a free port, answering /readyz. `env` may be a
    function of the port, for settings that name the server's own address (PUBLIC_API_BASE_URL)."""
    served = start_on_free_port(lambda port: [*args, "--port", str(port)], env, log, pick=pick, timeout=timeout)
    try:
        wait_healthy(served.base, served.process, log, timeout)
    except AssertionError:
        stop(served.process)
        raise
    return served


def start_on_free_port(command: Callable[[int], list[str]], env: dict | Callable[[int], dict], log: Path, *,
                       pick: Callable[[], int] = free_port, attempts: int = 5, timeout: float = 30) -> Served:
    """`command(port)` started on a port from `pick`, returned once the process listens there.

    `pick` can only name a port that was free a moment ago: when another process binds it first, the server exits
    saying the address is in use, and it is started again on another port.
    """
    for _ in range(attempts):
        port, offset = pick(), log.stat().st_size if log.exists() else 0
        environment = env(port) if callable(env) else env
        process = start(command(port), environment, log)
        if _listens_unless_exited(process, port, log, timeout):
            return Served(process, port, environment)
        said = log.read_bytes()[offset:].decode(errors="replace")
        if ADDRESS_IN_USE not in said.lower():
            raise AssertionError(f"the server exited with {process.returncode}:\n{said[-3000:]}")
        with open(log, "a") as handle:
            handle.write(f"\n===== port {port} was taken before the server bound it: starting again =====\n")
    raise AssertionError(f"the server found its port taken {attempts} times in a row:\n{log.read_text()[-3000:]}")


def _listens_unless_exited(process: subprocess.Popen, port: int, log: Path, timeout: float) -> bool:
    """True once `process` listens on `port` (not merely: something answers there); False if it exited first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if listens(process.pid, port):
            return True
        if process.poll() is not None:
            return False
        time.sleep(0.1)
    stop(process)
    raise AssertionError(f"the server did not listen on port {port} within {timeout}s:\n{log.read_text()[-3000:]}")


def listens(pid: int, port: int) -> bool:
    """Whether process `pid` holds a listening TCP socket on `port` (its socket inodes against /proc/net/tcp*)."""
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:  # it is gone
        return False
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:["):-1])
    return not inodes.isdisjoint(_listening_inodes(port))


def _listening_inodes(port: int) -> set[str]:
    found = set()
    for table in (Path("/proc/net/tcp"), Path("/proc/net/tcp6")):
        for line in table.read_text().splitlines()[1:] if table.exists() else ():
            fields = line.split()  # sl, local address:port (hex), remote, state, ..., inode
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                found.add(fields[9])
    return found


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
