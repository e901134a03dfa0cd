"""Shared fetches, measured: N monitors over a few distinct urls against N monitors over N urls, same run.

    .venv/bin/python bench/quiet_checks.py --shared [--monitors 1000] [--distinct 100] [--rounds 3]

Both cases run on one real worker (1 process × 4 threads) and scheduler, over never-changing pages of one size,
every check quiet: the baseline's monitor i watches /p/<i>, the shared case's monitor i /p/<N + i mod distinct>,
all in one schema. Their rounds take turns (baseline, shared, shared, baseline, …; since 2026-12-03: run one after
the other, the two cases met different hours of this machine's drift, and the baseline alone swung 0.22–0.37 ms a
check in a day). Monitors check every SHARED_INTERVAL_SECONDS and each measured round starts just after a boundary
of it on the wall clock, so a round never reads the fetches of the one before (engine/shared_fetch.py keeps one per
interval window). Worker CPU is its threads' schedstat, to the nanosecond. The page server counts the GETs of each
round. Goals (issue 18): ≤ 110 GETs per round for 1,000 monitors over 100 urls, worker CPU ≤ 0.2× the baseline's.
Nothing here asserts on time.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import redis

from bench.common import (
    REDIS_URL, BenchError, change_spec, clean_up, failed, figure, free_port, prepare, publish, record,
    seed_page_monitors, versions, wait_listening,
)
from bench.pages import served
from bench.quiet_report import fmt
from bench.quiet_checks import (
    PYTHON, VIGIL_ENV, EventCounter, Measure, Processes, Stats, cpu_since, ensure_database, reset_schema,
    start_warm, threads_cpu, tree_pids, wait_checked,
)

#: the monitors' interval, and the window their fetches are shared in: a round of 1,000 checks takes a few seconds
SHARED_INTERVAL_SECONDS = 60
GETS_GOAL, CPU_GOAL = 110, 0.2


def monitors_over(distinct: int):
    """create() for bench/profile_worker.py: monitor i on page i mod `distinct`, every SHARED_INTERVAL_SECONDS."""
    spec = change_spec(SHARED_INTERVAL_SECONDS)

    def create(base: str, n: int) -> None:
        seed_page_monitors(VIGIL_ENV, base, n, lambda i, source: spec(i, replace(source, url=f"{base}/p/{i % distinct}")),
                           lambda now: now - timedelta(seconds=1))

    return create


def next_window(seconds: int = SHARED_INTERVAL_SECONDS, slack: float = 0.3) -> None:
    """Sleep until just after the next multiple of `seconds` on the wall clock."""
    time.sleep(seconds - time.time() % seconds + slack)


def gets_per_round(measure: Measure) -> float:
    rounds = measure.extra["rounds"]
    return sum(r.extra["gets"] for r in rounds) / len(rounds)


def report(args, header: list[str], alone: Measure, shared: Measure) -> str:
    n, distinct = args.monitors, args.distinct
    gets, cpu_ratio = gets_per_round(shared), shared.cpu / alone.cpu if alone.cpu else float("nan")
    gets_goal = GETS_GOAL * distinct / 100
    record("quiet_checks_shared", [
        figure(f"shared fetches: GETs per round, {n:,} monitors over {distinct} urls", f"{gets:,.0f}",
               f"{gets_per_round(alone):,.0f}", gets / gets_per_round(alone), f"≤ {gets_goal:g}", gets <= gets_goal),
        figure(f"shared fetches: worker CPU, {n:,} monitors over {distinct} urls vs over {n:,} urls",
               f"{shared.ms(shared.cpu):.3f} ms/check", f"{alone.ms(alone.cpu):.3f} ms/check", cpu_ratio,
               f"≤ {CPU_GOAL}", cpu_ratio <= CPU_GOAL)])
    lines = [f"# Vigil quiet checks with shared fetches: {n:,} monitors over {distinct} urls vs {n:,} urls", "",
             *header, f"- {versions()}",
             f"- ~{args.page_bytes / 1024:g} KiB pages that never change, no ETags; interval {SHARED_INTERVAL_SECONDS} s, "
             f"{args.rounds} measured rounds a case (after a warm-up), the cases taking turns, each starting just "
             f"after a {SHARED_INTERVAL_SECONDS} s boundary; one worker `--processes 1 --threads 4` (CPU from schedstat), "
             "scheduler tick 0.2 s, batch 500", "",
             "| case | checks | GETs per round (page server) | worker CPU s | worker CPU-ms/check | checks/s |",
             "|---|---:|---:|---:|---:|---:|"]
    for label, m in ((f"{n:,} monitors over {n:,} urls (baseline)", alone),
                     (f"{n:,} monitors over {distinct} urls", shared)):
        lines.append(f"| {label} | {m.checks:,} | {fmt(gets_per_round(m), 1)} | {fmt(m.cpu, 3)} | "
                     f"{fmt(m.ms(m.cpu), 3)} | {fmt(m.rate, 0)} |")
    lines += ["", "| goal (same run) | measured | goal | met |", "|---|---:|---:|:---:|",
              f"| GETs per round, {distinct} urls | {fmt(gets, 1)} | ≤ {gets_goal:g} | {'yes' if gets <= gets_goal else 'NO'} |",
              f"| worker CPU, shared ÷ baseline | {fmt(cpu_ratio, 3)} | ≤ {CPU_GOAL} | "
              f"{'yes' if cpu_ratio <= CPU_GOAL else 'NO'} |", "",
              "- rounds: " + "; ".join(f"{case} {r.name}: {r.extra['gets']} GETs, {r.checks} checks, worker "
                                       f"{r.ms(r.cpu):.3f} ms/check, claims {r.extra['claims']}"
                                       for case, m in (("baseline", alone), ("shared", shared))
                                       for r in m.extra["rounds"]),
              f"- load average at end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}"]
    return "\n".join(lines) + "\n"


def both_sets(n: int, distinct: int):
    """create() for one schema holding both cases: monitors 0..n-1 on pages 0..n-1 (alone), n..2n-1 on the
    `distinct` pages after them (shared), so neither case's urls are the other's."""
    spec = change_spec(SHARED_INTERVAL_SECONDS)

    def create(base: str, count: int) -> None:
        def url(i: int) -> str:
            return f"{base}/p/{i}" if i < n else f"{base}/p/{n + (i - n) % distinct}"

        seed_page_monitors(VIGIL_ENV, base, count, lambda i, source: spec(i, replace(source, url=url(i))),
                           lambda now: now - timedelta(seconds=1))

    return create


def run_interleaved(base: str, n: int, distinct: int, rounds: int, server_pid: int, procs: Processes
                    ) -> dict[str, Measure]:
    """Both cases on one worker and scheduler, their rounds taking turns (alone, shared, shared, alone, …), each
    just after a window boundary: the machine's drift over minutes falls on both alike."""
    ensure_database()
    reset_schema()
    print(f"  creating {2 * n} monitors (baseline check through the real pipeline) …", flush=True)
    both_sets(n, distinct)(base, 2 * n)
    rds = redis.Redis.from_url(REDIS_URL)
    rds.flushdb()
    stats = Stats()
    stats.events = EventCounter(REDIS_URL)
    ids = {"alone": [], "shared": []}
    for monitor_id, source in stats.query("SELECT id, source FROM monitors"):
        page = int(json.loads(source)["url"].rsplit("/", 1)[1])
        ids["alone" if page < n else "shared"].append(monitor_id)
    measured = {case: Measure(case, extra={"rounds": []}) for case in ids}
    try:
        print("  warm-up round, both cases (not measured) …", flush=True)
        worker, scheduler, checks = start_warm(stats, procs, 2 * n, timeout=max(120, n / 2))
        order = [case for block in range((rounds + 1) // 2) for case in ("alone", "shared", "shared", "alone")]
        taken = {case: 0 for case in ids}
        for case in order:
            if taken[case] == rounds:
                continue
            taken[case] += 1
            next_window()
            _, claims_before = stats.progress()
            gets_before = served(base)
            threads = threads_cpu(tree_pids(worker.pid))
            started_at = datetime.now(timezone.utc).replace(tzinfo=None)
            # this case due now, the other not before the next round (it would fall due of itself in this one)
            stats.query("UPDATE monitors SET next_check_at = CASE WHEN id = ANY(%s) THEN %s ELSE %s END",
                        (ids[case], started_at - timedelta(seconds=1), started_at + timedelta(days=1)))
            os.kill(scheduler.pid, signal.SIGCONT)
            checks_now, claims_after = wait_checked(stats, checks + n, procs, timeout=max(120, n / 2))
            cpu = cpu_since(threads, tree_pids(worker.pid))  # to the ns, as run_vigil's rounds
            os.kill(scheduler.pid, signal.SIGSTOP)
            wall = (stats.last_checked() - started_at).total_seconds()
            r = Measure(f"round {taken[case]}", checks_now - checks, wall, cpu)
            r.extra.update(claims=claims_after - claims_before, gets=served(base) - gets_before)
            checks = checks_now
            m = measured[case]
            m.extra["rounds"].append(r)
            m.checks, m.cpu, m.wall = m.checks + r.checks, m.cpu + r.cpu, m.wall + r.wall
            print(f"  {case} {r.name}: {r.ms(r.cpu):.3f} ms/check, {r.extra['gets']} GETs", flush=True)
    finally:
        stats.events.close()
        stats.close()
    return measured


def main(args) -> int:
    header, procs = prepare()
    n = args.monitors
    if not 0 < args.distinct <= n:
        return failed(BenchError(f"--distinct must be from 1 to --monitors ({n}), not {args.distinct}."))
    try:
        port = free_port()
        server = procs.start("pages", [PYTHON, "-m", "bench.pages", "--count", str(n + args.distinct), "--port",
                                       str(port), "--page-bytes", str(args.page_bytes)])
        wait_listening(port, procs)
        base = f"http://127.0.0.1:{port}"
        print(f"Vigil, {n} monitors over {n} urls and {n} over {args.distinct} urls, rounds taking turns …",
              flush=True)
        measured = run_interleaved(base, n, args.distinct, args.rounds, server.pid, procs)
        text_out = report(args, header, measured["alone"], measured["shared"])
    except (KeyboardInterrupt, BenchError) as exc:
        return failed(exc)
    finally:
        clean_up(procs, REDIS_URL)
    return publish("quiet_checks_shared.md", text_out)
