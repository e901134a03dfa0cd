"""What the benchmarks share: the machine's services, processes they start and stop, CPU readings."""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg2  # noqa: E402
import psycopg2.errors  # noqa: E402
import redis  # noqa: E402

RESULTS = ROOT / "bench" / "results"
PYTHON = sys.executable
VIGIL = str(Path(sys.executable).with_name("vigil"))
PG = {"host": "127.0.0.1", "port": 5432, "user": "vigil", "password": "vigil"}
DB_NAME = "vigil_bench"
DATABASE_URL = f"postgresql://vigil:vigil@127.0.0.1:5432/{DB_NAME}"
REDIS_URL = "redis://127.0.0.1:6379/13"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class BenchError(RuntimeError):
    pass


# ----------------------------------------------------------------------------------------------
# processes


class Processes:
    """Every process the bench starts, each in its own session; stop() ends them."""

    def __init__(self, logs: Path):
        self.logs = logs
        self.started: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, args: list[str], env: dict | None = None) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "wb")
        proc = subprocess.Popen(args, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        self.started.append((name, proc))
        return proc

    def check_alive(self) -> None:
        for name, proc in self.started:
            if proc.poll() is not None:
                raise BenchError(f"{name} exited with {proc.returncode}:\n{self.tail(name)}")

    def tail(self, name: str, chars: int = 3000) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def stop(self, *names: str) -> None:
        """SIGTERM to each named process (all when no names), as a process manager sends it; then
        SIGKILL to whatever is left of its process group (after 15 s if it has not exited)."""
        for name, proc in reversed(list(self.started)):
            if names and name not in names:
                continue
            self.started.remove((name, proc))
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGCONT)  # the scheduler may be paused
                    os.kill(proc.pid, signal.SIGTERM)  # dramatiq's CLI passes it on to its workers
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(15)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_listening(port: int, procs: Processes, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        procs.check_alive()
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.1)
    raise BenchError(f"nothing listened on port {port} within {timeout}s")


def _stat(pid: int) -> tuple[int, int]:
    """(parent pid, utime + stime in clock ticks) of one process, all its threads included."""
    with open(f"/proc/{pid}/stat") as fh:
        data = fh.read()
    fields = data[data.rindex(")") + 2:].split()
    return int(fields[1]), int(fields[11]) + int(fields[12])


def tree_cpu(root: int) -> float:
    """CPU seconds of `root` and every live descendant (dramatiq's CLI forks its workers)."""
    stats, children = {}, defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stats[int(entry)] = _stat(int(entry))
    for pid, (ppid, _) in stats.items():
        children[ppid].append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += stats[pid][1]
            todo.extend(children[pid])
    return total / CLOCK_TICKS


def tree_size(root: int) -> int:
    count, todo = 0, [root]
    while todo:
        pid = todo.pop()
        count += 1
        with contextlib.suppress(OSError):
            todo.extend(int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split())
    return count


def command_cpu(name: str) -> float:
    """CPU seconds of every live process whose command is `name` (e.g. all postgres backends)."""
    total = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                if Path(f"/proc/{entry}/comm").read_text().strip() == name:
                    total += _stat(int(entry))[1]
    return total / CLOCK_TICKS


# ----------------------------------------------------------------------------------------------
# baselines


def ensure_database() -> None:
    try:
        conn = psycopg2.connect(dbname="postgres", **PG)
    except psycopg2.Error as exc:
        raise BenchError(f"cannot connect to PostgreSQL as vigil: {exc}") from None
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DB_NAME,))
            if cur.fetchone() is None:
                try:
                    cur.execute(f"CREATE DATABASE {DB_NAME} OWNER vigil")
                except psycopg2.Error as exc:
                    raise BenchError(f"could not create {DB_NAME} ({exc.pgerror or exc}); create it with\n"
                                     f"  runuser -u postgres -- psql -c \"CREATE DATABASE {DB_NAME} OWNER vigil\"") from None
    finally:
        conn.close()


def reset_schema() -> None:
    conn = psycopg2.connect(dbname=DB_NAME, **PG)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("DROP SCHEMA IF EXISTS public CASCADE")
        cur.execute("CREATE SCHEMA public")
    conn.close()


def machine() -> list[str]:
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    load = Path("/proc/loadavg").read_text().split()[:3]
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return [f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M:%S UTC')}",
            f"- machine: nproc={os.cpu_count()} (usable {len(os.sched_getaffinity(0))}), CPU: {model}, "
            f"load average at start {' '.join(load)}",
            f"- Python {platform.python_version()}, git {rev or '?'}{' (+ uncommitted changes)' if dirty else ''}"]


def versions() -> str:
    conn = psycopg2.connect(dbname="postgres", **PG)
    with conn.cursor() as cur:
        cur.execute("SHOW server_version")
        pg = cur.fetchone()[0]
    conn.close()
    rv = redis.Redis.from_url(REDIS_URL).info("server")["redis_version"]
    return f"PostgreSQL {pg}, Redis {rv}"


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def seed_page_monitors(env: dict, base: str, n: int, make_spec, next_due) -> None:
    """Migrate, then one user, one conversation and N page monitors stored exactly as create_monitor stores a
    fresh monitor after its baseline check (run_check against the real page /p/<i>).

    make_spec(i, source) -> MonitorSpec; next_due(now) -> the first due time.
    """
    from engine.http import FetchPolicy, Fetcher
    from engine.pipeline import BASELINE, Prior, run_check
    from engine.spec import SourceSpec
    from models import connection, database, utcnow
    from models.db import bind
    from models.migrate import migrate
    from models.monitors import create_monitor
    from models.tables import Conversation, User
    from vigil.settings import Settings

    settings = Settings.from_env(env)
    bind(env["DATABASE_URL"])
    fetcher = Fetcher(FetchPolicy(allow_loopback=True))
    with connection():
        migrate()
        now = utcnow()
        with database.atomic():
            user = User.create(email="bench@example.com", password_hash="-", created_at=now)
            conversation = Conversation.create(user=user, external_id="bench-conversation", channel="chat",
                                               created_at=now, updated_at=now)
            for i in range(n):
                spec = make_spec(i, SourceSpec("page", f"{base}/p/{i}"))
                outcome = run_check(fetcher, spec.source, spec.check, Prior(), settings.FETCH_MAX_TEXT_BYTES)
                if outcome.kind != BASELINE:
                    raise BenchError(f"page {i}: the baseline check gave {outcome.kind} {outcome.error}")
                create_monitor(user, conversation, spec, outcome, now, next_due(now))
    fetcher.close()
    with contextlib.suppress(AttributeError):
        database.obj.close_all()  # the bench's pooled connection; the worker opens its own


def prepare() -> tuple[list[str], Processes]:
    """The results folder, Ctrl-C and SIGTERM as KeyboardInterrupt, the machine's description, a process keeper."""
    (RESULTS / "logs").mkdir(parents=True, exist_ok=True)
    for sig in (signal.SIGINT, signal.SIGTERM):  # SIGINT too: a background job may have it ignored
        signal.signal(sig, _interrupt)
    return machine(), Processes(RESULTS / "logs")


def failed(exc: BaseException) -> int:
    """The exit code of a run that stopped early, said on stderr."""
    if isinstance(exc, KeyboardInterrupt):
        print("interrupted; stopping the processes the bench started", file=sys.stderr)
        return 130
    print(f"bench failed: {exc}", file=sys.stderr)
    return 1


def hold_signals() -> None:
    """From here on a second Ctrl-C must not cut the clean-up short."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


def publish(name: str, text: str) -> int:
    """Print the report and keep it in bench/results/<name>."""
    print()
    print(text)
    (RESULTS / name).write_text(text)
    print(f"(written to {(RESULTS / name).relative_to(ROOT)}; process logs in bench/results/logs/)")
    return 0
