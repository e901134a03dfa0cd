"""Vigil in production mode as separate processes (web, workers, schedulers) on the throwaway servers, with the
controls a fault test needs: SIGKILL a worker (or a paired device's `vigil runner`), start it again, look at every
log."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import psycopg2
import requests

from tests.processes import VIGIL, serve_vigil, start, terminate, vigil, wait_healthy

#: Settings of the test stack: short sweep and ticks so a lost message is recovered within seconds.
FAST = {"MONITOR_MIN_INTERVAL_SECONDS": "1", "SCHEDULER_TICK_SECONDS": "0.2", "DELIVERY_SWEEP_SECONDS": "5",
        "FETCH_TIMEOUT_SECONDS": "5", "FETCH_ALLOW_LOOPBACK": "true", "MONITOR_MAX_WAKES": "50",
        "MONITOR_MAX_WAKES_PER_HOUR": "100000", "MONITOR_MAX_ARMED_PER_CONVERSATION": "100000",
        "MONITOR_MAX_FIRES_PER_CONVERSATION_DAY": "100000",
        "MONITOR_MAX_ARMED_PER_ACCOUNT": "100000", "TRIGGER_RATE_PER_MINUTE": "6000", "PYTHONUNBUFFERED": "1",
        "dramatiq_worker_timeout": "100"}
OWNER_EMAIL, OWNER_PASSWORD = "owner@example.com", "a-reliability-password"


def new_stack(pg, rds, redis_db: int = 0, **settings: str) -> "Stack":
    """A stack on a new database of the throwaway PostgreSQL and a Redis database of its own, set up."""
    import redis

    root = Path(tempfile.mkdtemp(prefix="vigil-rel-stack-"))
    url = pg.create_database(f"vigil_rel_{uuid.uuid4().hex[:8]}")
    redis.Redis.from_url(rds.url(redis_db)).flushdb()
    return Stack(root, url, rds.url(redis_db), **settings).setup()


class Stack:
    def __init__(self, root: Path, database_url: str, redis_url: str, **settings: str) -> None:
        self.root = root
        self.port = 0  # picked by the web's first start; PUBLIC_API_BASE_URL names it from then on
        self.database_url = database_url
        self.env = {**FAST, "DATABASE_URL": database_url, "REDIS_URL": redis_url, "SECRET_KEY": "reliability-key",
                    "VIGIL_DATA_DIR": str(root / "data"), **settings}
        self.processes: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}
        self.token = ""

    def setup(self) -> "Stack":
        """`vigil migrate`, an owner and a runtime token, as an operator does before the first start."""
        vigil("migrate", env=self.env)
        vigil("user", "create", OWNER_EMAIL, "--password", OWNER_PASSWORD, env=self.env)
        self.token = vigil("token", "create", "--user", OWNER_EMAIL, env=self.env).strip().splitlines()[-1]
        return self

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def auth(self) -> dict:
        return {"Authorization": f"Bearer {self.token}"}

    def start_web(self, command: str = "web") -> None:
        """`vigil web` (or `vigil serve`, embedded). The first start picks a free port; a restart keeps it, as
        runners and wake links know the address."""
        if not self.port:
            served = serve_vigil([VIGIL, command, "--host", "127.0.0.1"], lambda port: {  # a test's own address wins
                "PUBLIC_API_BASE_URL": f"http://127.0.0.1:{port}", **self.env}, self._mark("web"), timeout=60)
            self.processes["web"], self.port, self.env = served.process, served.port, served.env
            return
        self._start("web", [VIGIL, command, "--host", "127.0.0.1", "--port", str(self.port)])
        wait_healthy(self.base, self.processes["web"], self.logs["web"], timeout=60)

    def start_worker(self, name: str = "worker", threads: int = 4) -> None:
        self._start(name, [VIGIL, "worker", "--processes", "1", "--threads", str(threads)])

    def start_scheduler(self, name: str = "scheduler") -> None:
        self._start(name, [VIGIL, "scheduler"])

    def pair_runner(self, name: str, approval_mode: str = "full") -> Path:
        """A device `name` as its owner pairs one (`vigil device pair-code`, `vigil runner pair`), its `vigil
        runner` started as process `runner-<name>`, its approval mode set in the owner's browser session; waits
        until it is online. Returns its state directory."""
        code = vigil("device", "pair-code", "--user", OWNER_EMAIL, "--name", name, env=self.env).split()[-1]
        state = self.root / f"runner-{name}"
        paired = subprocess.run([VIGIL, "runner", "pair", "--server", self.base, "--code", code, "--state-dir",
                                 str(state)], capture_output=True, text=True, timeout=60)
        assert paired.returncode == 0, paired.stdout + paired.stderr
        self.start_runner(name)
        if approval_mode != "ask":
            session, csrf = self._owner_session()
            changed = session.patch(f"{self.base}/api/devices/{self.device(name)['id']}", timeout=30,
                                    json={"approval_mode": approval_mode}, headers={"X-CSRF-Token": csrf})
            assert changed.status_code == 200, changed.text
        deadline = time.monotonic() + 60
        while not self.device(name)["online"]:
            assert time.monotonic() < deadline, f"the device {name} never came online:\n{self.log_tails()}"
            time.sleep(0.2)
        return state

    def start_runner(self, name: str) -> None:
        """`vigil runner` of the paired device `name` (again, after a kill: same state directory)."""
        self._start(f"runner-{name}", [VIGIL, "runner", "--state-dir", str(self.root / f"runner-{name}")])

    def kill_runner(self, name: str) -> None:
        """SIGKILL to the runner's own process group; its commands run in sessions of their own and live on."""
        self.kill(f"runner-{name}")

    def device(self, name: str) -> dict:
        answer = requests.get(f"{self.base}/api/devices", headers=self.auth, timeout=30)
        answer.raise_for_status()
        return next(d for d in answer.json()["devices"] if d["name"] == name)

    def _owner_session(self) -> tuple[requests.Session, str]:
        """The owner signed in, as in a browser, and the CSRF token of its pages."""
        session = requests.Session()
        page = session.get(f"{self.base}/login", timeout=30).text
        csrf = re.search(r'name="_csrf" value="([^"]+)"', page).group(1)
        session.post(f"{self.base}/login", data={"email": OWNER_EMAIL, "password": OWNER_PASSWORD, "_csrf": csrf},
                     timeout=30)
        page = session.get(f"{self.base}/settings/devices", timeout=30).text
        return session, re.search(r'"X-CSRF-Token": "([^"]+)"', page).group(1)

    def _start(self, name: str, args: list[str]) -> None:
        self.processes[name] = start(args, self.env, self._mark(name))

    def _mark(self, name: str) -> Path:
        """The process's log, with a line marking this start."""
        self.logs[name] = self.root / f"{name}.log"
        with open(self.logs[name], "ab") as fh:
            fh.write(f"\n===== start {time.strftime('%H:%M:%S')} =====\n".encode())
        return self.logs[name]

    def kill(self, name: str) -> None:
        """SIGKILL to the process and all its children (Dramatiq's worker processes), as a crash or OOM does."""
        process = self.processes.pop(name)
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(10)

    def alive(self) -> dict[str, bool]:
        return {name: process.poll() is None for name, process in self.processes.items()}

    def stop(self, name: str) -> int:
        return terminate(self.processes.pop(name))

    def stop_all(self) -> list[str]:
        problems = []
        for name in reversed(list(self.processes)):
            try:
                code = self.stop(name)
            except AssertionError as exc:
                problems.append(f"{name}: {exc}")
                continue
            if code != 0:
                problems.append(f"{name} exited with {code} on SIGTERM")
        return problems

    def remove(self, keep: bool = False) -> None:
        """Delete the logs and data dir, unless asked to keep them (VIGIL_KEEP_LOGS=1 always keeps them)."""
        if not (keep or os.environ.get("VIGIL_KEEP_LOGS")):
            shutil.rmtree(self.root, ignore_errors=True)

    def log_tails(self, chars: int = 3000) -> str:
        return "\n".join(f"--- {name} ({path}) ---\n{path.read_text(errors='replace')[-chars:]}"
                         for name, path in self.logs.items() if path.exists())

    def grep_logs(self, *needles: str) -> list[str]:
        """Log lines (of every process) that contain any of `needles`."""
        lines = []
        for name, path in self.logs.items():
            for line in path.read_text(errors="replace").splitlines():
                if any(needle in line for needle in needles):
                    lines.append(f"{name}: {line}")
        return lines

    def tool(self, conversation: str, **arguments) -> dict:
        response = requests.post(f"{self.base}/api/tool/monitor", headers=self.auth, timeout=30, json={
            "action": "monitor_create", "context": {"conversation_id": conversation, "channel": "chat"},
            "arguments": arguments})
        response.raise_for_status()
        body = response.json()
        assert body["ok"], body
        return body["result"]

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        """Read the database directly (not through Vigil), for the test's own accounting."""
        conn = psycopg2.connect(self.database_url, connect_timeout=10)
        try:
            with conn.cursor() as cur:
                cur.execute(sql, params)
                return cur.fetchall()
        finally:
            conn.close()
