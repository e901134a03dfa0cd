#!/usr/bin/env python
"""Quiet-check benchmark: what one unchanged-page check costs in Vigil, next to its physical limit.

    .venv/bin/python bench/quiet_checks.py [--monitors 1000] [--seconds-per-loop 8] [--rounds 2] [--conditional | --shared]

Baseline A: one requests.Session, GET + sha256 of the body (what a quiet check must do at least).
Baseline B: GET + engine.content.html_to_text + sha256 (what it would cost if it parsed every time).
Vigil: the real worker (`python -m dramatiq tasks.main --processes 1 --threads 4`) and the real
`vigil scheduler`, on PostgreSQL (database vigil_bench, schema recreated) and Redis (db 13, flushed),
checking N monitors whose pages never change, so every check is quiet.
With --conditional the pages carry ETags and answer Vigil's If-None-Match with 304 (no body read or hashed);
the baselines still GET the whole page, and a baseline C GETs each page with its ETag (a bare 304 loop).
With --shared (bench/quiet_shared.py): N monitors over --distinct urls against N monitors over N urls, the page
server counting GETs per round.

Everything is reported as ratios measured in this same run; nothing here asserts on time.
See bench/README.md for how to read the output.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import signal
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg2  # noqa: E402
import psycopg2.errors  # noqa: E402
import redis  # noqa: E402
import requests  # noqa: E402

from bench.common import (  # noqa: E402,F401  (some re-exported: the other benchmarks import them from here)
    DATABASE_URL, DB_NAME, PG, PYTHON, REDIS_URL, RESULTS, VIGIL, BenchError, Db, Processes, change_spec,
    clean_up, command_cpu, ensure_database, failed, figure, free_port, prepare, publish, record, reset_schema,
    seed_page_monitors, threads_cpu, cpu_since, tree_cpu, tree_pids, tree_size, versions, wait_listening,
)
from adapters.events import decoded  # noqa: E402
from bench.pages import PAGE_BYTES, not_modified, page_etag, page_html, served  # noqa: E402
from engine.content import html_to_text  # noqa: E402

#: Long enough that neither a claim's lease nor the next due time comes round during a round:
#: the bench makes all monitors due again itself, so each round is N checks at full speed.
INTERVAL_SECONDS = 600
#: PostgreSQL (15+) flushes an idle backend's statistics at most PGSTAT_IDLE_INTERVAL (10 s) late.
STATS_SETTLE_SECONDS = 11.0
VIGIL_ENV = {
    "DATABASE_URL": DATABASE_URL, "REDIS_URL": REDIS_URL, "FETCH_ALLOW_LOOPBACK": "true",
    "LOG_LEVEL": "WARNING", "SCHEDULER_TICK_SECONDS": "0.2", "SCHEDULER_BATCH_SIZE": "500",
    # a fixed key, so no secret file is generated under ./var
    "SECRET_KEY": "bench-only-secret-key-not-used-for-anything-real",
    "VIGIL_DATA_DIR": str(RESULTS / "var"),
}


@dataclass
class Measure:
    name: str
    checks: int = 0
    wall: float = 0.0
    cpu: float = 0.0          # the measured client: bench process, or Vigil's worker tree
    server_cpu: float = 0.0   # the page server
    extra: dict = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.checks / self.wall if self.wall else 0.0

    def ms(self, seconds: float) -> float:
        return 1000 * seconds / self.checks if self.checks else float("nan")


def baseline(name: str, base: str, n: int, seconds: float, server_pid: int, digest, expected: list[str],
             etags: list[str] | None = None) -> Measure:
    """GET page after page on one keep-alive session for `seconds`; digest(body) must equal expected. With
    `etags`, each GET sends its page's as If-None-Match and must be answered 304."""
    session = requests.Session()
    session.trust_env = False  # as Vigil's Fetcher: no proxy/netrc lookups per request
    urls = [f"{base}/p/{i}" for i in range(n)]
    headers = [{"If-None-Match": etag} for etag in etags] if etags else [{}] * n
    for i in range(min(n, 50)):  # warm: connection open, code paths hot
        digest(session.get(urls[i], headers=headers[i]).content)
    server0, cpu0, wall0 = tree_cpu(server_pid), time.process_time(), time.perf_counter()
    count, wrong = 0, 0
    while True:
        i = count % n
        response = session.get(urls[i], headers=headers[i])
        if etags and response.status_code != 304:
            wrong += 1
        elif not etags and (response.status_code != 200 or digest(response.content) != expected[i]):
            wrong += 1
        count += 1
        if count % 50 == 0 and time.perf_counter() - wall0 >= seconds:
            break
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    server = tree_cpu(server_pid) - server0
    session.close()
    if wrong:
        raise BenchError(f"{name}: {wrong} of {count} responses did not hash as expected")
    return Measure(name, count, wall, cpu, server)


def raw_digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def text_digest(body: bytes) -> str:
    return hashlib.sha256(html_to_text(body).encode("utf-8")).hexdigest()


def merge(name: str, runs: list[Measure]) -> Measure:
    merged = Measure(name, sum(m.checks for m in runs), sum(m.wall for m in runs), sum(m.cpu for m in runs),
                     sum(m.server_cpu for m in runs))
    merged.extra["runs"] = runs
    return merged


# ----------------------------------------------------------------------------------------------
# database


def create_monitors(base: str, n: int) -> None:
    """N change monitors on never-changing pages, all due at once."""
    seed_page_monitors(VIGIL_ENV, base, n, change_spec(INTERVAL_SECONDS), lambda now: now - timedelta(seconds=1))


class Stats(Db):
    """The bench's own autocommit connection to vigil_bench; counts every transaction it makes, so
    they can be taken out of pg_stat_database's xact counts."""

    def __init__(self) -> None:
        super().__init__(DB_NAME)
        self.transactions = 0

    def query(self, sql: str, args: tuple = ()) -> list[tuple]:
        rows = super().query(sql, args)
        self.transactions += 1
        return rows

    def progress(self) -> tuple[int, int]:
        """Checks finished (monitor.updated events the worker published after each) and claims made.

        check_count cannot tell: the scheduler's claim counts the check before a worker takes it.
        """
        claims = self.query("SELECT sum(claim_seq) FROM monitors")[0][0]
        return self.events.count, int(claims)

    def make_all_due(self) -> int:
        past = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(seconds=1)
        return self.query("UPDATE monitors SET next_check_at = %s", (past,))[0][0]

    def last_checked(self) -> datetime:
        return self.events.last_at



    def snapshot(self) -> dict:
        """Counters as flushed so far. This backend's own stats are forced out first, so the bench's
        transactions up to `mark` are in the numbers, and none after it."""
        try:
            self.query("SELECT pg_stat_force_next_flush()")
        except psycopg2.errors.UndefinedFunction:  # before PostgreSQL 15: a backend flushes as it exits
            self.conn.close()
            time.sleep(1)
            self.conn = psycopg2.connect(dbname=DB_NAME, application_name="vigil-bench", **PG)
            self.conn.autocommit = True
        mark = self.transactions
        xacts = self.query("SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = %s",
                           (DB_NAME,))[0]
        rows = self.query("SELECT relname, n_tup_ins, n_tup_upd, n_tup_del, n_tup_hot_upd FROM pg_stat_user_tables "
                          "WHERE schemaname = 'public'")
        return {"mark": mark, "commit": xacts[0], "rollback": xacts[1],
                "tables": {name: {"ins": i, "upd": u, "del": d, "hot": h} for name, i, u, d, h in rows}}

    def counts(self) -> dict:
        tables = ("wakes", "messages", "wake_pushes", "wake_attempts")
        found = {t: self.query(f"SELECT count(*) FROM {t}")[0][0] for t in tables}
        # every monitor's first check is an event of its own, written at create; any other is a check that wasn't quiet
        found["monitor_runs"] = self.query("SELECT count(*) FROM monitor_runs WHERE kind NOT IN ('baseline', 'armed')")[0][0]
        found["check_count min/max"] = self.query("SELECT min(check_count), max(check_count) FROM monitors")[0]
        found["monitors not quiet"] = self.query(
            "SELECT count(*) FROM monitors WHERE failure_count <> 0 OR last_error <> '' OR status <> 'active' "
            "OR fire_count <> 0")[0][0]
        return found



def redis_counters(client: redis.Redis) -> dict:
    cpu = client.info("cpu")
    calls = {name.removeprefix("cmdstat_"): value["calls"] for name, value in client.info("commandstats").items()}
    calls.pop("info", None)  # the bench's own
    return {"cpu": cpu["used_cpu_sys"] + cpu["used_cpu_user"], "calls": calls}


# ----------------------------------------------------------------------------------------------
# the Vigil run


@dataclass
class Sample:
    worker: float
    scheduler: float
    server: float
    postgres: float
    redis: dict


class EventCounter:
    """Counts the monitor.updated events a worker publishes once it has finished a check."""

    def __init__(self, url: str, database_url: str = DATABASE_URL) -> None:
        self.count = 0
        self.last_at = datetime.now(timezone.utc).replace(tzinfo=None)
        self._pubsub = redis.Redis.from_url(url).pubsub(ignore_subscribe_messages=True)
        namespace = hashlib.sha256(database_url.encode("utf-8")).hexdigest()[:12]  # as adapters.events names it
        self._pubsub.psubscribe(f"vigil:{namespace}:events:user:*")
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with contextlib.suppress(redis.ConnectionError, OSError, ValueError):  # close() cuts the connection
            for message in self._pubsub.listen():
                seen = sum(name == "monitor.updated" for name, _ in decoded(message["data"]))  # several a message
                if seen:
                    self.count += seen
                    self.last_at = datetime.now(timezone.utc).replace(tzinfo=None)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._pubsub.close()


def sample(worker_pid: int, scheduler_pid: int, server_pid: int, rds: redis.Redis) -> Sample:
    return Sample(tree_cpu(worker_pid), tree_cpu(scheduler_pid), tree_cpu(server_pid),
                  command_cpu("postgres"), redis_counters(rds))


def wait_checked(stats: Stats, target: int, procs: Processes, timeout: float, poll: float = 0.1) -> tuple[int, int]:
    deadline = time.monotonic() + timeout
    while True:
        checks, claims = stats.progress()
        if checks >= target:
            return checks, claims
        if time.monotonic() > deadline:
            raise BenchError(f"only {checks} of {target} checks done after {timeout:.0f}s;\n"
                             f"worker log:\n{procs.tail('worker')}\nscheduler log:\n{procs.tail('scheduler')}")
        procs.check_alive()
        time.sleep(poll)


def start_warm(stats: Stats, procs: Processes, due: int, timeout: float):
    """Start the real worker (1 process × 4 threads) and scheduler, wait for the `due` monitors' first checks (the
    warm-up), then stop the scheduler (SIGSTOP) until a round resumes it: (worker, scheduler, checks so far)."""
    checks, _ = stats.progress()
    worker = procs.start("worker", [PYTHON, "-m", "dramatiq", "tasks.main", "--processes", "1", "--threads", "4"],
                         VIGIL_ENV)
    scheduler = procs.start("scheduler", [VIGIL, "scheduler"], VIGIL_ENV)
    checks, _ = wait_checked(stats, checks + due, procs, timeout=timeout)
    os.kill(scheduler.pid, signal.SIGSTOP)  # quiet the scheduler's idle ticks while stats settle
    return worker, scheduler, checks


def run_vigil(base: str, n: int, rounds: int, server_pid: int, procs: Processes, create=None,
              before_round=None) -> Measure:
    """The real worker and scheduler over N monitors, made by `create(base, n)` (default create_monitors);
    `before_round()` runs before each measured round is made due."""
    ensure_database()
    reset_schema()
    print(f"  creating {n} monitors (baseline check through the real pipeline) …", flush=True)
    (create or create_monitors)(base, n)
    rds = redis.Redis.from_url(REDIS_URL)
    rds.flushdb()
    stats = Stats()
    stats.events = EventCounter(REDIS_URL)
    try:
        print("  warm-up round (process start, connections, imports; not measured) …", flush=True)
        worker, scheduler, checks = start_warm(stats, procs, n, timeout=max(120, n / 5))
        print(f"  worker tree: {tree_size(worker.pid)} processes; waiting {STATS_SETTLE_SECONDS:.0f}s for "
              "PostgreSQL statistics to settle …", flush=True)
        time.sleep(STATS_SETTLE_SECONDS)
        db0 = stats.snapshot()
        result = Measure("Vigil")
        per_round, bench_rows = [], 0
        redis_calls: dict[str, int] = defaultdict(int)
        redis_cpu = postgres_cpu = scheduler_cpu = 0.0
        for number in range(1, rounds + 1):
            if before_round is not None:
                before_round()
            _, claims_before = stats.progress()
            gets_before = served(base)
            before = sample(worker.pid, scheduler.pid, server_pid, rds)
            worker_threads = threads_cpu(tree_pids(worker.pid))
            started_at = datetime.now(timezone.utc).replace(tzinfo=None)
            bench_rows += stats.make_all_due()
            os.kill(scheduler.pid, signal.SIGCONT)
            checks_now, claims_after = wait_checked(stats, checks + n, procs, timeout=max(120, n / 2))
            worker_cpu = cpu_since(worker_threads, tree_pids(worker.pid))  # to the ns: a round is a few 10 ms ticks
            after = sample(worker.pid, scheduler.pid, server_pid, rds)
            os.kill(scheduler.pid, signal.SIGSTOP)  # nothing is claimed between rounds
            wall = (stats.last_checked() - started_at).total_seconds()
            done = checks_now - checks
            checks = checks_now
            r = Measure(f"round {number}", done, wall, worker_cpu, after.server - before.server)
            r.extra.update(scheduler=after.scheduler - before.scheduler, postgres=after.postgres - before.postgres,
                           redis=after.redis["cpu"] - before.redis["cpu"], claims=claims_after - claims_before,
                           gets=served(base) - gets_before)
            per_round.append(r)
            for name, calls in after.redis["calls"].items():
                redis_calls[name] += calls - before.redis["calls"].get(name, 0)
            result.checks += r.checks
            result.wall += r.wall
            result.cpu += r.cpu
            result.server_cpu += r.server_cpu
            scheduler_cpu += r.extra["scheduler"]
            postgres_cpu += r.extra["postgres"]
            redis_cpu += r.extra["redis"]
        print(f"  waiting {STATS_SETTLE_SECONDS:.0f}s for PostgreSQL statistics to settle …", flush=True)
        time.sleep(STATS_SETTLE_SECONDS)
        db1 = stats.snapshot()
        written = stats.counts()
    finally:
        stats.events.close()
        stats.close()
    result.extra.update(rounds=per_round, scheduler=scheduler_cpu, postgres=postgres_cpu, redis=redis_cpu,
                        redis_calls=dict(redis_calls), written=written, claims=sum(r.extra["claims"] for r in per_round),
                        db=db_delta(db0, db1, bench_rows))
    return result


def db_delta(db0: dict, db1: dict, bench_rows: int) -> dict:
    tables = {}
    for name, now in db1["tables"].items():
        was = db0["tables"].get(name, {})
        tables[name] = {k: v - was.get(k, 0) for k, v in now.items()}
    tables["monitors"]["upd"] -= bench_rows  # the bench's own "make all due again" UPDATEs
    tables["monitors"]["hot"] = max(tables["monitors"]["hot"], 0)
    bench_xacts = db1["mark"] - db0["mark"]
    return {"tables": tables, "commit": db1["commit"] - db0["commit"] - bench_xacts,
            "rollback": db1["rollback"] - db0["rollback"], "bench_rows": bench_rows, "bench_xacts": bench_xacts}


def main(argv: list[str] | None = None) -> int:
    from bench.quiet_report import report  # it reads this module's Measure

    parser = argparse.ArgumentParser(description="Quiet-check benchmark: Vigil vs. GET+sha256.")
    parser.add_argument("--monitors", type=int, default=1000, help="monitors and distinct pages (default 1000)")
    parser.add_argument("--seconds-per-loop", type=float, default=6.0,
                        help="seconds each baseline loop runs; each runs twice (default 6)")
    parser.add_argument("--rounds", type=int, default=3, help="measured Vigil rounds of N checks (default 3)")
    parser.add_argument("--conditional", action="store_true",
                        help="pages with ETags: Vigil's quiet checks are answered 304 (goal ≤ 0.7× baseline A)")
    parser.add_argument("--page-bytes", type=int, default=PAGE_BYTES, help="each page's size (default 5 KiB)")
    parser.add_argument("--shared", action="store_true",
                        help="N monitors over --distinct urls vs N over N urls (bench/quiet_shared.py): GETs per "
                             "round and worker CPU (goals ≤ 110 GETs per round for 100 urls, ≤ 0.2× the CPU)")
    parser.add_argument("--distinct", type=int, default=100, help="with --shared: the distinct urls (default 100)")
    args = parser.parse_args(argv)
    if args.shared:
        from bench.quiet_shared import main as shared_main

        return shared_main(args)
    header, procs = prepare()
    n = args.monitors
    try:
        port = free_port()
        server = procs.start("pages", [PYTHON, "-m", "bench.pages", "--count", str(n), "--port", str(port),
                                       "--page-bytes", str(args.page_bytes), *(["--etag"] if args.conditional else [])])
        wait_listening(port, procs)
        base = f"http://127.0.0.1:{port}"
        pages = [page_html(i, args.page_bytes) for i in range(n)]
        raw = [raw_digest(p) for p in pages]
        text = [text_digest(p) for p in pages]
        etags = [page_etag(i, args.page_bytes) for i in range(n)] if args.conditional else None
        loops: dict[str, list[Measure]] = {"A": [], "B": [], "C": []}

        def run_baselines(when: str) -> None:
            print(f"baselines ({when}) …", flush=True)
            loops["A"].append(baseline(f"A {when}", base, n, args.seconds_per_loop, server.pid, raw_digest, raw))
            loops["B"].append(baseline(f"B {when}", base, n, args.seconds_per_loop, server.pid, text_digest, text))
            if etags:
                loops["C"].append(baseline(f"C {when}", base, n, args.seconds_per_loop, server.pid, raw_digest, raw,
                                           etags))

        run_baselines("before")
        print("Vigil …", flush=True)
        answered = not_modified(base)
        vigil = run_vigil(base, n, args.rounds, server.pid, procs)
        vigil.extra["not_modified"] = not_modified(base) - answered
        procs.stop("worker", "scheduler")
        run_baselines("after")
        text_out = report(args, header, merge("A", loops["A"]), merge("B", loops["B"]), vigil, versions(),
                          merge("C", loops["C"]) if etags else None)
    except (KeyboardInterrupt, BenchError) as exc:
        return failed(exc)
    finally:
        clean_up(procs, REDIS_URL)
    return publish("quiet_checks_conditional.md" if args.conditional else "quiet_checks.md", text_out)


if __name__ == "__main__":
    sys.exit(main())
