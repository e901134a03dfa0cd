"""Throwaway PostgreSQL and Redis servers of the reliability tests' own, each in a temp dir on a free port.

The tests stop, kill and restart them, so they must be nobody else's: the shared servers on 5432 and 6379 that the
other tests use are never touched. PostgreSQL refuses to run as root, so as root the cluster belongs to the
`postgres` OS user (as Debian's package creates it) and its commands run through `runuser`.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg2
import redis

from tests.processes import free_port

#: PostgreSQL tuned for a throwaway test cluster: no durability cost, small memory, room for every process's pool.
_PG_CONF = """
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = '{sockets}'
max_connections = 300
shared_buffers = 32MB
fsync = off
synchronous_commit = off
full_page_writes = off
logging_collector = off
log_min_messages = warning
"""


def pg_bindir() -> str | None:
    """Where initdb and pg_ctl are: on PATH, or Debian's versioned directory (not on PATH there)."""
    initdb = shutil.which("initdb")
    if initdb:
        return str(Path(os.path.realpath(initdb)).parent)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return str(Path(found[-1]).parent) if found else None


def missing_tools() -> list[str]:
    missing = [] if pg_bindir() else ["initdb (the postgresql package)"]
    if not shutil.which("redis-server"):
        missing.append("redis-server")
    if os.geteuid() == 0 and not _user_exists("postgres"):
        missing.append("the postgres OS user (initdb refuses to run as root)")
    return missing


def _user_exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


class Postgres:
    """A cluster in its own temp dir: start, stop (fast shutdown: sessions are cut, as in a restart), restart."""

    def __init__(self) -> None:
        self.bindir = pg_bindir()
        self.root = Path(tempfile.mkdtemp(prefix="vigil-rel-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.port = free_port()
        self._as_root = os.geteuid() == 0
        if self._as_root:
            shutil.chown(self.root, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync")
        conf = self.data / "postgresql.conf"
        with open(conf, "a") as fh:
            fh.write(_PG_CONF.format(port=self.port, sockets=self.root))

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop")

    def restart(self, down_seconds: float = 0) -> None:
        self.stop()
        time.sleep(down_seconds)
        self.start()

    @property
    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def create_database(self, name: str) -> str:
        """A new, empty database; its URL."""
        conn = psycopg2.connect(self.url("postgres"), connect_timeout=10)
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
        return self.url(name)

    def destroy(self) -> None:
        if self.running:
            try:
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "30", "stop")
            except AssertionError:
                pass
        shutil.rmtree(self.root, ignore_errors=True)

    def _run(self, program: str, *args: str) -> None:
        command = [os.path.join(self.bindir, program), *args]
        if self._as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=self.root)
        if done.returncode != 0:
            tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise AssertionError(f"{program} {' '.join(args)} failed: {done.stdout}{done.stderr}\n{tail}")


class Redis:
    """redis-server without persistence: a restart empties it, as the broker's worst case."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="vigil-rel-redis-"))
        self.log = self.root / "redis.log"
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> None:
        handle = open(self.log, "ab")
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.root), "--daemonize", "no"],
            stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
        client = redis.Redis(port=self.port, socket_connect_timeout=1)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"redis-server exited:\n{self.log.read_text(errors='replace')[-2000:]}")
            try:
                client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise AssertionError("redis-server did not answer within 30 s")

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.process = None

    def restart(self, down_seconds: float = 0) -> None:
        self.stop()
        time.sleep(down_seconds)
        self.start()

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def ensure_running(*servers: Postgres | Redis) -> None:
    """Start any that a failed test left stopped."""
    for server in servers:
        if not server.running:
            server.start()
