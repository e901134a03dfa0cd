#!/usr/bin/env python
"""Scheduler benchmark: does the scheduler's cost follow the number of due monitors, or the number armed?

    .venv/bin/python bench/scheduler_cost.py [--armed 100000] [--due 1000] [--window 60] [--rounds 2]
    .venv/bin/python bench/scheduler_cost.py --armed 1000000 --due 1000 --window 30 --rounds 1   # a million
    (about 5 minutes, most of it the INSERT … SELECT generate_series of the million rows)

Two phases, each on a freshly migrated database (vigil_bench_sched, created if missing, schema dropped and
recreated with `vigil migrate`; Redis db 9, flushed) with a real `vigil scheduler` (production settings: tick
1 s, batch 500) and no worker: the enqueued checks just wait in Redis.

- armed: `--armed` polled monitors whose due times are spread evenly over their interval, so `--due` of them
  come due during the `--window` seconds measured (100,000 with a 100-minute interval: 1% a minute);
- baseline: `--due` armed monitors, all of which come due during the window.

They alternate armed, baseline, baseline, armed, … (`--rounds` pairs), so a change in the machine's load
during the run weighs on both alike; each phase's figures are summed over its windows.

The monitors are copies of one made by create_monitor after a real baseline check, inserted in one SQL
statement. CPU is /proc utime+stime of the scheduler process and of the PostgreSQL backends serving this
database. The claims made in each window are counted: both phases must claim the same number.
Nothing asserts on time; see bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench import common  # noqa: E402
from bench.common import (  # noqa: E402
    PYTHON, RESULTS, VIGIL, BenchError, Processes, change_spec, clone_monitors, database_url, failed, figure,
    fresh_database, free_port, prepare, publish, record, seed_page_monitors, tree_cpu, versions,
    wait_listening, clean_up)
from tests.processes import vigil as vigil_command  # noqa: E402

#: a database and Redis db of the bench's own (VIGIL_BENCH_SCHED_DB / VIGIL_BENCH_SCHED_REDIS: two people's runs
#: on one machine must not share them)
DB_NAME = os.environ.get("VIGIL_BENCH_SCHED_DB", "vigil_bench_sched")
REDIS_URL = os.environ.get("VIGIL_BENCH_SCHED_REDIS", "redis://127.0.0.1:6379/9")
ENV = {"DATABASE_URL": database_url(DB_NAME), "REDIS_URL": REDIS_URL, "FETCH_ALLOW_LOOPBACK": "true",
       "LOG_LEVEL": "WARNING", "SECRET_KEY": "bench-only-secret-key-not-used-for-anything-real",
       "VIGIL_DATA_DIR": str(RESULTS / "var")}
#: the scheduler runs this long, idle, before the first monitor comes due (start-up, imports, connection)
LEAD_SECONDS = 6.0
#: after the window, long enough for the tick that claims the last due monitor (ticks are 1 s apart)
TAIL_SECONDS = 2.0
SCHEDULER = "sched-scheduler"
GOAL = 1.5


@dataclass
class Phase:
    name: str
    armed: int
    wall: float = 0.0
    scheduler_cpu: float = 0.0
    pg_cpu: float = 0.0
    claims: int = 0
    claimed_early: int = 0
    left_due: int = 0
    seq_scans: int = 0
    idx_scans: int = 0
    queued: int = 0
    rows_read: int = 0
    blocks: int = 0
    #: the scheduler's resident memory at the end of the window, MiB (the largest of the phase's windows)
    rss_mib: float = 0.0
    #: total CPU per minute (scheduler + PostgreSQL) of each window
    windows: list[float] = field(default_factory=list)

    def add(self, other: "Phase") -> None:
        for name in ("wall", "scheduler_cpu", "pg_cpu", "claims", "claimed_early", "left_due", "seq_scans",
                     "idx_scans", "queued", "rows_read", "blocks", "windows"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.rss_mib = max(self.rss_mib, other.rss_mib)

    @property
    def best(self) -> float:
        """The least CPU per minute of its windows: the machine's other load only ever adds to a reading."""
        return min(self.windows, default=float("nan"))

    def per_minute(self, seconds: float) -> float:
        return 60 * seconds / self.wall if self.wall else float("nan")

    @property
    def total(self) -> float:
        return self.scheduler_cpu + self.pg_cpu


class Db(common.Db):
    """The bench's own autocommit connection to vigil_bench_sched."""

    def __init__(self) -> None:
        super().__init__(DB_NAME, "scheduler-bench")

    def work(self) -> tuple[int, int, int, int]:
        """Work PostgreSQL has done for this database so far, as its statistics count it (each backend flushes
        them about every second): sequential and index scans of monitors, rows read, buffer pages read."""
        self.query("SELECT pg_stat_force_next_flush()")
        seq, idx = self.query("SELECT seq_scan, idx_scan FROM pg_stat_user_tables WHERE relname = 'monitors'")[0]
        rows, blocks = self.query("SELECT tup_returned + tup_fetched, blks_hit + blks_read FROM pg_stat_database "
                                  "WHERE datname = %s", (DB_NAME,))[0]
        return seq, idx or 0, rows, blocks


def fresh_schema() -> None:
    """vigil_bench_sched with its schema dropped and made again by `vigil migrate`."""
    fresh_database(DB_NAME)
    try:
        vigil_command("migrate", env=ENV)
    except AssertionError as exc:
        raise BenchError(str(exc)) from None


def seed(base: str, armed: int, due: int, window: float, interval: int) -> datetime:
    """A fresh schema with `armed` monitors of which `due` come due in [t0, t0 + window); returns t0 (naive UTC)."""
    fresh_schema()
    seed_page_monitors(ENV, base, 1, change_spec(interval), lambda now: now + timedelta(days=1))
    db = Db()
    template, created = db.query("SELECT id, created_at FROM monitors")[0]
    # the insert takes a while: over a minute for a million rows with their indexes on this 2-core machine
    t0 = utcnow() + timedelta(seconds=LEAD_SECONDS + 4 + armed / 6000)
    expires = created + timedelta(days=29)
    # `due` spread over the window; the rest over the remainder of one interval, but for the few seconds after
    # the window that are measured too (TAIL_SECONDS), so that both phases claim exactly `due`
    clone_monitors(DB_NAME, template, due, t0, window, interval, expires, prefix="due")
    if armed > due:
        later = window + TAIL_SECONDS
        clone_monitors(DB_NAME, template, armed - due, t0 + timedelta(seconds=later), window * armed / due - later,
                       interval, expires, prefix="later")
    db.query("DELETE FROM monitors WHERE id = %s", (template,))
    db.query("ANALYZE monitors")  # as autovacuum would soon after such a load: the claim's plan is the steady one
    db.close()
    if utcnow() >= t0 - timedelta(seconds=LEAD_SECONDS):
        raise BenchError(f"seeding {armed:,} monitors outlasted its lead; the window would have been missed")
    return t0


def utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)  # as the tables store times


def sleep_until(when: datetime, procs: Processes) -> None:
    while (left := (when - utcnow()).total_seconds()) > 0:
        procs.check_alive()
        time.sleep(min(left, 0.5))


def measure(phase: Phase, scheduler_pid: int, db: Db, until: datetime, procs: Processes) -> None:
    """From now until `until`: the scheduler's CPU (its process tree), its PostgreSQL backends' CPU and the work
    PostgreSQL did, into `phase` (one window)."""
    work0 = db.work()
    pg0, cpu0, wall0 = db.backend_cpu(), tree_cpu(scheduler_pid), time.perf_counter()
    sleep_until(until, procs)
    phase.scheduler_cpu = tree_cpu(scheduler_pid) - cpu0
    phase.pg_cpu = db.backend_cpu_since(pg0)
    phase.wall = time.perf_counter() - wall0
    phase.seq_scans, phase.idx_scans, phase.rows_read, phase.blocks = (b - a for a, b in zip(work0, db.work()))
    phase.windows = [phase.per_minute(phase.total)]
    phase.rss_mib = rss_mib(scheduler_pid)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_phase(name: str, base: str, armed: int, due: int, window: float, interval: int, procs: Processes) -> Phase:
    print(f"{name}: {armed:,} armed monitors, {due:,} due within {window:g}s …", flush=True)
    t0 = seed(base, armed, due, window, interval)
    rds = redis.Redis.from_url(REDIS_URL)
    rds.flushdb()
    scheduler = procs.start(SCHEDULER, [VIGIL, "scheduler"], ENV)
    db = Db()
    try:
        sleep_until(t0, procs)
        phase = Phase(name, armed)
        phase.claimed_early = db.scalar("SELECT coalesce(sum(claim_seq), 0) FROM monitors")
        measure(phase, scheduler.pid, db, t0 + timedelta(seconds=window + TAIL_SECONDS), procs)
        phase.claims = db.scalar("SELECT coalesce(sum(claim_seq), 0) FROM monitors") - phase.claimed_early
        phase.left_due = db.scalar("SELECT count(*) FROM monitors WHERE status = 'active' AND next_check_at <= %s",
                                   (t0 + timedelta(seconds=window),))
        phase.queued = sum(rds.llen(key) for key in rds.keys("dramatiq:*") if rds.type(key) == b"list")
    finally:
        db.close()
        procs.stop(SCHEDULER)
    print(f"  {phase.claims:,} claims in {phase.wall:.1f}s; scheduler {phase.per_minute(phase.scheduler_cpu):.3f} "
          f"CPU-s/min, PostgreSQL {phase.per_minute(phase.pg_cpu):.3f} CPU-s/min", flush=True)
    return phase


CPU_NOTE = ("- CPU: /proc utime+stime of the scheduler process and of this database's PostgreSQL backends; work: "
            "pg_stat_database (rows read = tup_returned + tup_fetched, pages = blks_hit + blks_read) and "
            "pg_stat_user_tables for monitors")


def fmt(value: float) -> str:
    return "n/a" if value != value else f"{value:.3f}"


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def phase_table(phases, counted: str) -> list[str]:
    """One row a phase: its CPU and PostgreSQL work per minute; `counted` names what phase.claims counts."""
    lines = [f"| phase | armed | {counted} | wall s | scheduler CPU-s/min | PostgreSQL CPU-s/min | total CPU-s/min "
             "| total CPU-s/min, each window | scheduler RSS MiB | rows read/min | pages read/min | monitors seq scans/min "
             "| index scans/min |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in phases:
        lines.append(f"| {p.name} | {p.armed:,} | {p.claims:,} | {p.wall:.1f} | {fmt(p.per_minute(p.scheduler_cpu))} | "
                     f"{fmt(p.per_minute(p.pg_cpu))} | {fmt(p.per_minute(p.total))} | "
                     f"{', '.join(fmt(w) for w in p.windows)} | {p.rss_mib:.1f} | {p.per_minute(p.rows_read):,.0f} | "
                     f"{p.per_minute(p.blocks):,.0f} | {p.per_minute(p.seq_scans):.0f} | "
                     f"{p.per_minute(p.idx_scans):.0f} |")
    return lines


def report(args, header: list[str], vers: str, armed: Phase, small: Phase) -> tuple[str, list[dict]]:
    cpu_ratio = ratio(armed.best, small.best)
    rows_ratio = ratio(armed.per_minute(armed.rows_read), small.per_minute(small.rows_read))
    planned = args.due * args.rounds
    same = armed.claims == small.claims == planned and not armed.claimed_early and not small.claimed_early
    lines = ["# Vigil scheduler: cost per minute with many armed monitors vs. few", "", *header, f"- {vers}",
             f"- `vigil scheduler` (tick 1 s, batch 500), no worker; PostgreSQL database {DB_NAME}, Redis {REDIS_URL}; "
             f"interval {args.interval:,} s; each phase measured over {args.rounds} windows of {args.window:g} s "
             f"(+ {TAIL_SECONDS:g} s each), in the order armed, baseline, baseline, armed, …",
             CPU_NOTE, "", *phase_table((armed, small), "claims")]
    rows = [
        ("total CPU per minute (scheduler + PostgreSQL), armed ÷ baseline, each at its least loaded window",
         cpu_ratio, f"≤ {GOAL:g}", cpu_ratio <= GOAL),
        ("rows PostgreSQL read per minute, armed ÷ baseline", rows_ratio, f"≤ {GOAL:g}", rows_ratio <= GOAL),
        ("total CPU per minute over all windows, armed ÷ baseline",
         ratio(armed.per_minute(armed.total), small.per_minute(small.total)), "—", None),
        ("scheduler process CPU per minute, armed ÷ baseline",
         ratio(armed.per_minute(armed.scheduler_cpu), small.per_minute(small.scheduler_cpu)), "—", None),
        ("PostgreSQL backend CPU per minute, armed ÷ baseline",
         ratio(armed.per_minute(armed.pg_cpu), small.per_minute(small.pg_cpu)), "—", None),
        ("buffer pages read per minute, armed ÷ baseline",
         ratio(armed.per_minute(armed.blocks), small.per_minute(small.blocks)), "—", None)]
    lines += ["", "| ratio (same run) | measured | goal | met |", "|---|---:|---:|:---:|"]
    lines += [f"| {label} | {fmt(value)} | {goal} | {'—' if met is None else 'yes' if met else 'NO'} |"
              for label, value, goal, met in rows]
    lines += ["", "Checks:", "",
              f"- claims in the windows: {armed.claims:,} with {armed.armed:,} armed, {small.claims:,} with "
              f"{small.armed:,} armed, {planned:,} planned; claims before the windows {armed.claimed_early} and "
              f"{small.claimed_early}: {'OK, the same work in both phases' if same else 'WARNING: NOT THE SAME WORK'}",
              f"- still due at the end of the windows (claim lagging): {armed.left_due} and {small.left_due}",
              f"- check batches waiting in Redis (no worker runs): {armed.queued} and {small.queued}",
              "- the CPU readings are small (a few ms a tick) and the machine's other load weighs on them heavily; "
              "the rows read are not affected by it",
              f"- load average at end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}"]
    due = f"{args.due:,} due/min" if args.window == 60 else f"{args.due:,} due per {args.window:g} s"
    figures = [figure(f"scheduler + PostgreSQL CPU/min, {armed.armed:,} armed vs {small.armed:,}, {due}",
                      f"{fmt(armed.best)} s/min", f"{fmt(small.best)} s/min", cpu_ratio, f"≤ {GOAL:g}",
                      cpu_ratio <= GOAL and same),
               figure(f"rows PostgreSQL reads per minute for the scheduler, {armed.armed:,} armed vs {small.armed:,}",
                      f"{armed.per_minute(armed.rows_read):,.0f}", f"{small.per_minute(small.rows_read):,.0f}",
                      rows_ratio, f"≤ {GOAL:g}", rows_ratio <= GOAL and same)]
    return "\n".join(lines) + "\n", figures


def alternate(rounds: int, first: Phase, second: Phase, run) -> None:
    """run(phase) `rounds` times for each, in the order first, second, second, first, …, each result added to its
    phase: a drift of the machine's load during the run weighs on both alike."""
    for number in range(rounds):
        for total in (first, second)[::1 if number % 2 == 0 else -1]:
            total.add(run(total))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Scheduler cost: many armed monitors vs. few, same number due.")
    parser.add_argument("--armed", type=int, default=100_000, help="armed monitors in the first phase (default 100000)")
    parser.add_argument("--due", type=int, default=1000,
                        help="monitors due in each window, and armed in the baseline phase (default 1000)")
    parser.add_argument("--window", type=float, default=60.0, help="measured seconds per phase (default 60)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="pairs of phases, alternating which goes first (default 2: armed, baseline, baseline, armed)")
    args = parser.parse_args(argv)
    if not 0 < args.due <= args.armed:
        parser.error("--due must be between 1 and --armed")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    args.interval = round(args.window * args.armed / args.due)  # so `due` of `armed` come due per window
    header, procs = prepare()
    try:
        port = free_port()
        procs.start("sched-pages", [PYTHON, "-m", "bench.pages", "--count", "1", "--port", str(port)])
        wait_listening(port, procs)
        base = f"http://127.0.0.1:{port}"
        armed, small = Phase("armed", args.armed), Phase("baseline", args.due)
        alternate(args.rounds, armed, small,
                  lambda p: run_phase(p.name, base, p.armed, args.due, args.window, args.interval, procs))
        text_out, figures = report(args, header, versions(), armed, small)
    except (KeyboardInterrupt, BenchError) as exc:
        return failed(exc)
    finally:
        clean_up(procs, REDIS_URL)
    record("scheduler_cost", figures)
    return publish("scheduler_cost.md", text_out)


if __name__ == "__main__":
    sys.exit(main())
