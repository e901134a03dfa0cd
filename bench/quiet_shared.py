"""Shared fetches, measured: N monitors over a few distinct urls against N monitors over N urls, same run.

    .venv/bin/python bench/quiet_checks.py --shared [--monitors 1000] [--distinct 100] [--rounds 3]

Both cases run the real worker (1 process × 4 threads) and scheduler on the same never-changing pages (same size),
every check quiet. Monitor i watches /p/<i mod distinct> in the shared case and /p/<i> in the baseline. Monitors
check every SHARED_INTERVAL_SECONDS and each measured round starts just after a boundary of it on the wall clock,
so a round never reads the fetches of the one before (engine/shared_fetch.py keeps one per interval window). The
page server counts the GETs of each round. Goals (issue 18): ≤ 110 GETs per round for 1,000 monitors over 100
urls, worker CPU ≤ 0.2× the baseline's. Nothing here asserts on time.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from bench.common import (
    REDIS_URL, BenchError, change_spec, clean_up, failed, figure, free_port, prepare, publish, record,
    seed_page_monitors, versions, wait_listening,
)
from bench.quiet_checks import PYTHON, VIGIL_ENV, Measure, fmt, run_vigil

#: the monitors' interval, and the window their fetches are shared in: a round of 1,000 checks takes a few seconds
SHARED_INTERVAL_SECONDS = 60
GETS_GOAL, CPU_GOAL = 110, 0.2


def monitors_over(distinct: int):
    """create() for run_vigil: monitor i on page i mod `distinct`, checked every SHARED_INTERVAL_SECONDS."""
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
             f"each of {args.rounds} measured rounds (after a warm-up) starts just after a {SHARED_INTERVAL_SECONDS} s "
             "boundary; worker `--processes 1 --threads 4`, scheduler tick 0.2 s, batch 500", "",
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


def main(args) -> int:
    header, procs = prepare()
    n = args.monitors
    if not 0 < args.distinct <= n:
        return failed(BenchError(f"--distinct must be from 1 to --monitors ({n}), not {args.distinct}."))
    try:
        port = free_port()
        server = procs.start("pages", [PYTHON, "-m", "bench.pages", "--count", str(n), "--port", str(port),
                                       "--page-bytes", str(args.page_bytes)])
        wait_listening(port, procs)
        base = f"http://127.0.0.1:{port}"
        measured = {}
        for case, distinct in (("alone", n), ("shared", args.distinct)):
            print(f"Vigil, {n} monitors over {distinct} urls …", flush=True)
            measured[case] = run_vigil(base, n, args.rounds, server.pid, procs, create=monitors_over(distinct),
                                       before_round=next_window)
            procs.stop("worker", "scheduler")
        text_out = report(args, header, measured["alone"], measured["shared"])
    except (KeyboardInterrupt, BenchError) as exc:
        return failed(exc)
    finally:
        clean_up(procs, REDIS_URL)
    return publish("quiet_checks_shared.md", text_out)
