"""What the benchmarks share: the machine's services, processes they start and stop, CPU readings."""

from __future__ import annotations

import contextlib
import json
import math
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
#: the benchmarks' database and Redis database (emptied by each run); set VIGIL_BENCH_DB and VIGIL_BENCH_REDIS_URL
#: to others where two runs share the machine
DB_NAME = os.environ.get("VIGIL_BENCH_DB", "vigil_bench")
DATABASE_URL = f"postgresql://vigil:vigil@127.0.0.1:5432/{DB_NAME}"
REDIS_URL = os.environ.get("VIGIL_BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
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


def _stat(pid: int, reaped: bool = False) -> tuple[int, int]:
    """(parent pid, utime + stime in clock ticks) of one process, all its threads included; with `reaped`, also
    the children it has waited for (cutime + cstime)."""
    with open(f"/proc/{pid}/stat") as fh:
        data = fh.read()
    fields = data[data.rindex(")") + 2:].split()
    return int(fields[1]), int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if reaped else 0)


def threads_cpu(pids) -> dict[tuple[int, int], int]:
    """CPU nanoseconds of each live thread of `pids`, children left out (a reaped child's CPU goes to its
    parent's cutime, which this does not read): {(pid, tid): ns} from /proc/<pid>/task/<tid>/schedstat, exact
    where /proc/<pid>/stat counts 10 ms ticks. Without schedstat (no CONFIG_SCHED_INFO) a process is one entry
    (pid, 0) of its ticks. Take the difference of two readings with cpu_since."""
    found = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{pid}/task"):
                try:
                    found[(pid, int(tid))] = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
                except FileNotFoundError:
                    if Path(f"/proc/{pid}/task/{tid}").exists():  # no schedstat on this kernel
                        with contextlib.suppress(OSError, ValueError, IndexError):
                            found[(pid, 0)] = _stat(pid)[1] * 1_000_000_000 // CLOCK_TICKS
                        break
                except (OSError, ValueError, IndexError):
                    continue
    return found


def cpu_since(before: dict[tuple[int, int], int], pids) -> float:
    """CPU seconds `pids` used since `before` (a threads_cpu reading): a thread started meanwhile counts in
    full, one that ended meanwhile loses what it used since `before` (never a negative difference)."""
    after = threads_cpu(pids)
    return sum(ns - before.get(key, 0) for key, ns in after.items()) / 1e9


def tree_cpu(root: int, reaped: bool = False) -> float:
    """CPU seconds of `root` and every live descendant (dramatiq's CLI forks its workers); with `reaped`, also of
    the descendants that ended and were waited for by one of them (Chromium's renderers, one or more per page, end
    when their page closes: without it, most of a rendered check's CPU is left out)."""
    stats, children = {}, defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stats[int(entry)] = _stat(int(entry), reaped)
    for pid, (ppid, _) in stats.items():
        children[ppid].append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += stats[pid][1]
            todo.extend(children[pid])
    return total / CLOCK_TICKS


def tree_pids(root: int) -> list[int]:
    """`root` and its descendants, through /proc/<pid>/task/<pid>/children."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        with contextlib.suppress(OSError):
            todo.extend(int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split())
    return found


def tree_size(root: int) -> int:
    return len(tree_pids(root))


def tree_memory(root: int) -> tuple[float, float]:
    """(RSS, PSS) in MiB of `root` and its descendants, from /proc/<pid>/smaps_rollup.

    RSS counts a page shared by a forked child once per process; PSS splits it between them, so the PSS of
    a process tree is what it really occupies."""
    rss = pss = 0
    for pid in tree_pids(root):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                key, _, value = line.partition(":")
                if key == "Rss":
                    rss += int(value.split()[0])
                elif key == "Pss":
                    pss += int(value.split()[0])
    return rss / 1024, pss / 1024


def command_cpu(name: str) -> float:
    """CPU seconds of every live process whose command is `name` (e.g. all postgres backends)."""
    total = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                if Path(f"/proc/{entry}/comm").read_text().strip() == name:
                    total += _stat(int(entry))[1]
    return total / CLOCK_TICKS


class Db:
    """An autocommit connection of the bench's own to one database."""

    def __init__(self, dbname: str, application_name: str = "vigil-bench") -> None:
        self.dbname = dbname
        self.conn = psycopg2.connect(dbname=dbname, application_name=application_name, **PG)
        self.conn.autocommit = True

    def query(self, sql: str, args: tuple | dict = ()) -> list[tuple]:
        with self.conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall() if cur.description else [(cur.rowcount,)]

    def scalar(self, sql: str, args: tuple | dict = ()):
        return self.query(sql, args)[0][0]

    def backend_cpu(self) -> dict[int, int]:
        """CPU ticks of the database's other backends now (see backend_ticks)."""
        return backend_ticks(self.conn, self.dbname)

    def backend_cpu_since(self, before: dict[int, int]) -> float:
        return backend_cpu_since(self.conn, self.dbname, before)

    def close(self) -> None:
        self.conn.close()


def backend_ticks(conn, dbname: str) -> dict[int, int]:
    """CPU ticks of every PostgreSQL backend serving `dbname` but `conn`'s own: another benchmark may be
    using other databases of the same server at the same moment."""
    ticks = {}
    with conn.cursor() as cur:
        cur.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", (dbname,))
        pids = [row[0] for row in cur.fetchall()]
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            ticks[pid] = _stat(pid)[1]
    return ticks


def backend_cpu_since(conn, dbname: str, before: dict[int, int]) -> float:
    """CPU seconds `dbname`'s backends used since `before` (a backend_ticks reading); backends that ended
    meanwhile are lost, so keep the measured processes' connections open."""
    after = backend_ticks(conn, dbname)
    return sum(ticks - before.get(pid, 0) for pid, ticks in after.items()) / CLOCK_TICKS


# ----------------------------------------------------------------------------------------------
# baselines


def database_url(name: str) -> str:
    return f"postgresql://{PG['user']}:{PG['password']}@{PG['host']}:{PG['port']}/{name}"


def fresh_database(name: str) -> None:
    """Database `name`, created if missing, with an empty public schema."""
    ensure_database(name)
    reset_schema(name)


def ensure_database(name: str | None = None) -> None:
    name = name or DB_NAME
    try:
        conn = psycopg2.connect(dbname="postgres", **PG)
    except psycopg2.Error as exc:
        raise BenchError(f"cannot connect to PostgreSQL as vigil: {exc}") from None
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if cur.fetchone() is None:
                try:
                    cur.execute(f"CREATE DATABASE {name} OWNER vigil")
                except psycopg2.Error as exc:
                    raise BenchError(f"could not create {name} ({exc.pgerror or exc}); create it with\n"
                                     f"  runuser -u postgres -- psql -c \"CREATE DATABASE {name} OWNER vigil\"") from None
    finally:
        conn.close()


def reset_schema(name: str | None = None) -> None:
    conn = psycopg2.connect(dbname=name or DB_NAME, **PG)
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
    ram = "?"
    with contextlib.suppress(OSError, ValueError, IndexError):
        ram = f"{int(Path('/proc/meminfo').read_text().split()[1]) / 1024 ** 2:.1f} GiB"
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return [f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M:%S UTC')}",
            f"- machine: nproc={os.cpu_count()} (usable {len(os.sched_getaffinity(0))}), CPU: {model}, RAM {ram}, "
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
    from adapters.settings import Settings

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


def change_spec(interval_seconds: int, ttl_seconds: int = 86400):
    """make_spec for seed_page_monitors: a change monitor on page i, every interval_seconds."""
    from engine.checks import CheckSpec
    from engine.spec import MonitorSpec

    def spec(i: int, source) -> MonitorSpec:
        return MonitorSpec(description=f"bench page {i} changes", source=source, check=CheckSpec("change"),
                           on_match="", interval_seconds=interval_seconds, ttl_seconds=ttl_seconds, max_wakes=1)

    return spec


def clone_monitors(dbname: str, template_id: str, count: int, first_due: datetime, spread_seconds: float,
                   interval_seconds: int, expires_at: datetime, prefix: str = "clone", per_user: int = 50,
                   per_conversation: int = 10) -> None:
    """`count` copies of monitor `template_id`'s row in one INSERT … SELECT: every column as the template has
    it (so as create_monitor stored it) but the id, owner, conversation, interval, due and expiry times.

    The owners are new users with `per_user` monitors each, `per_conversation` in each of their conversations.
    Due times are spread evenly over [first_due, first_due + spread_seconds), in an order unrelated to the
    insertion order, as they are after a while in a real deployment."""
    users = math.ceil(count / per_user)
    conversations = math.ceil(per_user / per_conversation)
    step = 7919 if math.gcd(7919, count) == 1 else 7907  # a prime coprime to count: g -> g*step % count shuffles
    conn = psycopg2.connect(dbname=dbname, **PG)
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' "
                        "AND table_name = 'monitors'")
            own = {"id", "user_id", "conversation_id", "interval_seconds", "next_check_at", "expires_at"}
            rest = [f'"{name}"' for (name,) in cur.fetchall() if name not in own]
            cur.execute("INSERT INTO users (email, password_hash, created_at) SELECT %s || '-' || g || "
                        "'@bench.example', '-', now() FROM generate_series(1, %s) g", (prefix, users))
            cur.execute("INSERT INTO conversations (user_id, external_id, channel, agent_id, title, created_at, "
                        "updated_at) SELECT u.id, %s || '-' || u.id || '-' || k, 'chat', '', '', now(), now() "
                        "FROM users u CROSS JOIN generate_series(1, %s) k WHERE u.email LIKE %s ORDER BY u.id, k",
                        (prefix, conversations, f"{prefix}-%@bench.example"))
            cur.execute(
                f"WITH conv AS (SELECT id, user_id, row_number() OVER (ORDER BY id) - 1 AS k FROM conversations "
                f"WHERE external_id LIKE %(like)s) "
                f'INSERT INTO monitors (id, user_id, conversation_id, interval_seconds, next_check_at, expires_at, '
                f'{", ".join(rest)}) '
                f"SELECT %(prefix)s || '-' || g, c.user_id, c.id, %(interval)s, "
                f"%(first)s + ((g::bigint * %(step)s) %% %(count)s) * %(gap)s * interval '1 second', %(expires)s, "
                f'{", ".join("t." + name for name in rest)} '
                f"FROM generate_series(0, %(count)s - 1) g JOIN conv c ON c.k = g / %(per_conv)s "
                f"CROSS JOIN monitors t WHERE t.id = %(template)s",
                {"like": f"{prefix}-%", "prefix": prefix, "interval": interval_seconds, "first": first_due,
                 "step": step, "count": count, "gap": spread_seconds / count, "expires": expires_at,
                 "per_conv": per_conversation, "template": template_id})
            if cur.rowcount != count:
                raise BenchError(f"cloned {cur.rowcount} monitors, not {count}")
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("ANALYZE")  # as autovacuum would soon after such an insert
    finally:
        conn.close()


def record(name: str, rows: list[dict]) -> None:
    """The headline figures, for bench/run_all.py's summary: bench/results/<name>.json."""
    (RESULTS / f"{name}.json").write_text(json.dumps({"benchmark": name, "rows": rows}, indent=1) + "\n")


def figure(name: str, vigil: str, baseline: str, ratio: float | None, goal: str = "—",
           met: bool | None = None) -> dict:
    """One row of the summary: what was measured, Vigil's value and the baseline's, as displayed."""
    return {"figure": name, "vigil": vigil, "baseline": baseline,
            "ratio": None if ratio is None or ratio != ratio else round(ratio, 3), "goal": goal, "met": met}


def prepare() -> tuple[list[str], Processes]:
    """The results folder, Ctrl-C and SIGTERM as KeyboardInterrupt, the machine's description, a process keeper."""
    (RESULTS / "logs").mkdir(parents=True, exist_ok=True)
    # every process started from here runs this checkout's code, also when it is a worktree other than the one
    # the virtualenv's editable install points at (`vigil` would import that one's otherwise)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    for sig in (signal.SIGINT, signal.SIGTERM):  # SIGINT too: a background job may have it ignored
        signal.signal(sig, _interrupt)
    return machine(), Processes(RESULTS / "logs")


def run_notes(procs: "Processes", names, started: float) -> list[str]:
    """The closing lines of a report: each process log's Traceback/ERROR count, the run's length, the load."""
    notes = []
    for name in names:
        text = (procs.logs / f"{name}.log").read_text(errors="replace")
        bad = sum(1 for line in text.splitlines() if "Traceback" in line or "ERROR" in line)
        notes.append(f"{name}: {bad} lines with Traceback or ERROR in its log")
    notes.append(f"whole run {time.monotonic() - started:.0f} s; load average at end "
                 f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    return notes


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


def clean_up(procs: "Processes", redis_url: str) -> None:
    """The end of every run, however it ended: stop what the bench started and empty its Redis database."""
    hold_signals()
    procs.stop()
    with contextlib.suppress(Exception):
        redis.Redis.from_url(redis_url).flushdb()


def publish(name: str, text: str) -> int:
    """Print the report and keep it in bench/results/<name>."""
    print()
    print(text)
    (RESULTS / name).write_text(text)
    print(f"(written to {(RESULTS / name).relative_to(ROOT)}; process logs in bench/results/logs/)")
    return 0
