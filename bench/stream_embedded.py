"""bench/stream_lines.py --embedded: Vigil as the default install runs it, `vigil serve` (web, worker threads and
scheduler in one process) on SQLite, with no PostgreSQL or Redis, and the same real `vigil runner` paired to it.

The bench reads the SQLite file back through a connection of its own (WAL: its reads do not block the server's
writer), with the production path's queries (`%s` placeholders become `?`); its one write is the device's approval
mode, as the production path's `UPDATE`, before any load.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import VIGIL, BenchError, free_port, wait_listening  # noqa: E402
from tests.processes import vigil as vigil_command  # noqa: E402


class SqliteDb:
    """The bench's own autocommit connection to the embedded server's SQLite file, answering as bench.common.Db."""

    dbname = "sqlite"

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(str(path), timeout=30, isolation_level=None, check_same_thread=False)

    def query(self, sql: str, args: tuple = ()) -> list[tuple]:
        cur = self.conn.execute(sql.replace("%s", "?"), args)
        return cur.fetchall() if cur.description else [(cur.rowcount,)]

    def scalar(self, sql: str, args: tuple = ()):
        return self.query(sql, args)[0][0]

    def close(self) -> None:
        self.conn.close()


def embedded_env(port: int, data_dir: Path, production: dict) -> dict:
    """The production bench's settings (raised limits, log level, secret) on SQLite, without Redis."""
    env = {key: value for key, value in production.items() if key != "dramatiq_worker_timeout"}
    return {**env, "DATABASE_URL": "", "REDIS_URL": "", "VIGIL_DATA_DIR": str(data_dir),
            "PUBLIC_API_BASE_URL": f"http://127.0.0.1:{port}"}


def start_embedded(s, production_env, email: str, device: str, names: dict) -> None:
    """An owner with a token and a pairing code made by the CLI on a fresh SQLite file, `vigil serve`, and a
    `vigil runner` paired with the code (approval mode full), as the production path pairs."""
    data_dir = s.tmp / "data"
    s.port = free_port()
    env = embedded_env(s.port, data_dir, production_env(s.port))
    try:
        vigil_command("user", "create", email, "--password", "bench-password-not-secret", env=env)
        s.token = vigil_command("token", "create", "--user", email, env=env).strip().splitlines()[-1]
        code = vigil_command("device", "pair-code", "--user", email, "--name", device, env=env).split()[-1]
    except AssertionError as exc:
        raise BenchError(str(exc)) from None
    s.web = s.procs.start(names["web"], [VIGIL, "serve", "--host", "127.0.0.1", "--port", str(s.port)], env)
    wait_listening(s.port, s.procs)
    s.db = SqliteDb(data_dir / "vigil.db")
    state = s.tmp / "runner-state"
    paired = subprocess.run([VIGIL, "runner", "pair", "--server", s.base, "--code", code, "--state-dir", str(state)],
                            capture_output=True, text=True, timeout=60)
    if paired.returncode != 0:
        raise BenchError(f"vigil runner pair failed: {paired.stderr}")
    s.runner = s.procs.start(names["runner"], [VIGIL, "runner", "--state-dir", str(state)])
    s.db.query("UPDATE devices SET approval_mode = 'full' WHERE name = %s", (device,))


def description() -> str:
    return (f"- Vigil, embedded: `vigil serve` (one process: web, the in-process worker's threads and the scheduler "
            f"thread) on SQLite {sqlite3.sqlite_version} in a temporary VIGIL_DATA_DIR (DATABASE_URL and REDIS_URL "
            "empty); its CPU is that whole process, so it holds what production spreads over `vigil web`, the "
            "worker, the scheduler and PostgreSQL")
