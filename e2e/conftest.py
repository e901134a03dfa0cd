"""E2E fixtures: Chromium from Debian, and Vigil in production mode as separate processes.

The stack is web + Dramatiq worker + scheduler on PostgreSQL (`vigil_e2e`) and Redis (db 14), started with
the same `vigil` commands a Procfile runs; the tests drive it with a real browser.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

import psycopg2
import pytest
import redis

from tests.conftest import WORKER, E2E_DATABASE_URL, ensure_database, for_worker_redis, require
from tests.processes import VIGIL, serve_vigil, start, terminate, vigil
from tests.servers import PageServer

E2E_REDIS_URL = for_worker_redis(os.environ.get("VIGIL_E2E_REDIS_URL", "redis://127.0.0.1:6379/14"))
CHROMIUM = os.environ.get("VIGIL_E2E_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]
SCREENSHOTS = Path(__file__).parent / "screenshots"


def pytest_configure(config) -> None:
    if WORKER:
        ensure_database(E2E_DATABASE_URL)


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    """pytest-playwright's launch options (--headed, --slowmo …) plus the system Chromium."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"no Chromium at {CHROMIUM} (browsers cannot be downloaded here); run ./scripts/test")
    return {"headless": True, **browser_type_launch_args, "executable_path": CHROMIUM,
            "args": [*browser_type_launch_args.get("args", []), *CHROMIUM_ARGS]}


@dataclass
class VigilStack:
    base: str
    token: str
    email: str
    password: str
    env: dict
    logs: dict[str, Path] = field(default_factory=dict)

    @property
    def auth(self) -> dict:
        return {"Authorization": f"Bearer {self.token}"}

    def log_tails(self, chars: int = 2000) -> str:
        return "\n".join(f"--- {name} ({path}) ---\n{path.read_text(errors='replace')[-chars:]}"
                         for name, path in self.logs.items() if path.exists())


def reset_database(url: str) -> None:
    """An empty `public` schema; `vigil migrate` builds the tables."""
    conn = psycopg2.connect(url, connect_timeout=5)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SET lock_timeout = '10s'")
            cur.execute("DROP SCHEMA IF EXISTS public CASCADE")
            cur.execute("CREATE SCHEMA public")
    finally:
        conn.close()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="session")
def vigil_stack(tmp_path_factory):
    require(E2E_DATABASE_URL)
    require(E2E_REDIS_URL)
    reset_database(E2E_DATABASE_URL)
    redis.Redis.from_url(E2E_REDIS_URL).flushdb()

    root = tmp_path_factory.mktemp("vigil-e2e")
    env = {"DATABASE_URL": E2E_DATABASE_URL, "REDIS_URL": E2E_REDIS_URL, "SECRET_KEY": "e2e-secret-key",
           "VIGIL_DATA_DIR": str(root / "data"), "FETCH_ALLOW_LOOPBACK": "true",
           # the judge servers an e2e test saves in Settings → Models are on 127.0.0.1
           "JUDGE_ALLOW_PRIVATE_URLS": "true",
           "MONITOR_MIN_INTERVAL_SECONDS": "1", "SCHEDULER_TICK_SECONDS": "0.2", "FETCH_TIMEOUT_SECONDS": "5",
           # paired devices: a runner polls every 2 s, is offline 6 s after its last poll (not 25/60/90 s)
           "DEVICE_ONLINE_SECONDS": "4", "DEVICE_OFFLINE_SECONDS": "6", "RUNNER_POLL_SECONDS": "2",
           "PYTHONUNBUFFERED": "1"}
    email, password = "owner@example.com", "a-good-e2e-password"
    vigil("migrate", env=env)
    vigil("user", "create", email, "--password", password, env=env)
    token = vigil("token", "create", "--user", email, env=env).strip().splitlines()[-1]

    stack = VigilStack("", token, email, password, env,  # base: once the web process holds a port
                       {name: root / f"{name}.log" for name in ("web", "worker", "scheduler")})
    processes = {}
    try:
        web = serve_vigil([VIGIL, "web", "--host", "127.0.0.1"],
                          lambda port: {**env, "PUBLIC_API_BASE_URL": f"http://127.0.0.1:{port}"}, stack.logs["web"])
        processes["web"], stack.base = web.process, web.base
        env["PUBLIC_API_BASE_URL"] = web.base  # trigger links point at this web process
        processes["worker"] = start([VIGIL, "worker", "--processes", "1", "--threads", "2"], env,
                                    stack.logs["worker"])
        processes["scheduler"] = start([VIGIL, "scheduler"], env, stack.logs["scheduler"])
        for name, process in processes.items():
            assert process.poll() is None, f"vigil {name} exited early:\n{stack.log_tails()}"
        yield stack
    finally:
        problems = []
        for name, process in reversed(list(processes.items())):
            try:
                code = terminate(process)
            except AssertionError as exc:
                problems.append(f"{name}: {exc}")
                continue
            if code != 0:
                problems.append(f"{name} exited with {code} on SIGTERM")
            if _group_alive(process.pid):
                problems.append(f"{name} left processes behind; killed them")
                os.killpg(process.pid, signal.SIGKILL)
        if problems:
            pytest.fail("; ".join(problems) + "\n" + stack.log_tails())


@pytest.fixture(scope="session")
def pages():
    """A page server for watched sources; tests set and change its pages."""
    server = PageServer().start()
    yield server
    server.stop()


@pytest.fixture()
def screenshots() -> Path:
    SCREENSHOTS.mkdir(exist_ok=True)
    return SCREENSHOTS


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing e2e test shows the tails of the stack's logs."""
    outcome = yield
    report = outcome.get_result()
    stack = item.funcargs.get("vigil_stack") if hasattr(item, "funcargs") else None
    if report.failed and stack is not None:
        report.sections.append(("vigil logs", stack.log_tails()))
