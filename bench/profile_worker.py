#!/usr/bin/env python
"""Where a quiet check's CPU goes in the worker, in-process (py-spy is not installed).

    .venv/bin/python bench/profile_worker.py [--monitors 500] [--top 25] [--shared 50]

Uses the same set-up as bench/quiet_checks.py (page-server process, vigil_bench recreated, Redis db 13
flushed, N quiet monitors), then in THIS process:

1. breakdown: the check_monitor actor body run sequentially in one thread, between the
   DatabaseConnection middleware's connect/close, with thread CPU time (time.thread_time) summed per
   step: load_for_check, Fetcher.get (and inside it: Deadline, the session GET, reading the body),
   sha256, record_check, publish_monitor. No profiler, so the numbers are not inflated.
2. worker: the real dramatiq Worker (RedisBroker from tasks.main, 4 threads) consuming the messages the
   real scheduler tick sent, with cProfile (timer: thread CPU time) running in every consumer and
   worker thread; prints the process CPU per check without and with the profiler, and the merged top
   functions. The profiler inflates pure-Python code (peewee's SQL building) more than C calls.

With --shared D the monitors watch D distinct urls (bench/quiet_shared.py's set-up), so most checks are shared
hits (engine/shared_fetch.py): where a check's CPU goes once its GET is gone. Its rounds run back to back in one
interval window, so fewer GETs go out than in quiet_checks.py --shared, which waits for a window each round.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import os
import pstats
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.quiet_checks import (  # noqa: E402
    PYTHON, REDIS_URL, RESULTS, VIGIL_ENV, EventCounter, Processes, Stats, create_monitors, ensure_database, free_port,
    reset_schema, wait_listening,
)

_spent: dict[str, float] = defaultdict(float)
_calls: dict[str, int] = defaultdict(int)


def timed(owner, name: str, label: str | None = None) -> None:
    """Wrap owner.name so its thread CPU time is summed under `label` (inclusive of what it calls)."""
    original = getattr(owner, name)
    label = label or name

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        start = time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            _spent[label] += time.thread_time() - start
            _calls[label] += 1

    setattr(owner, name, wrapper)


def claim_all(n: int) -> int:
    from models import connection, utcnow
    from tasks.scheduler import tick

    claimed = 0
    with connection():
        while claimed < n:
            got = tick(utcnow(), 500)
            if not got:
                break
            claimed += got
    return claimed


def breakdown(stats: Stats, n: int) -> str:
    import engine.http as http
    import engine.wire as wire
    import tasks.checks as checks
    from models import connection, database, utcnow
    from models.claims import claim_due

    import engine.pipeline as pipeline
    import peewee

    wrapped = [(checks, "load_claimed", "load_claimed (one query per batch)"), (checks, "run_check", "run_check"),
               (http.Fetcher, "get", "  Fetcher.get"),
               (http, "check_url", "    check_url"),
               (wire.Deadline, "__init__", "    Deadline.__init__"),
               (wire.Deadline, "__enter__", "    Deadline.__enter__ (arms the overall deadline)"),
               (http.Fetcher, "_send", "    Fetcher._send (request sent, status line and headers read)"),
               (http.Fetcher, "_finish", "    Fetcher._finish (read body, build Response)"),
               (wire.Deadline, "__exit__", "    Deadline.__exit__"),
               (pipeline, "raw_digest", "  raw_digest (sha256, remembered for a shared body)"),
               (checks, "record_check", "record_check"), (checks, "publish_quiet", "publish_quiet (one pipeline per batch)"),
               (peewee.Database, "execute", "load_claimed + record_check: peewee Database.execute (build SQL + run)"),
               (peewee.Database, "execute_sql", "  of which Database.execute_sql (psycopg2 send/receive, row fetch excluded)")]
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in wrapped]
    for owner, name, label in wrapped:
        timed(owner, name, label)
    with connection():
        claimed = claim_due(utcnow(), n)
    total = connect_close = 0.0
    process0 = time.process_time()
    batches = checks.batches(claimed)
    for batch in batches:
        start = time.thread_time()
        database.connect(reuse_if_open=True)
        mid = time.thread_time()
        checks.check_monitors.fn([list(claim) for claim in batch])
        end = time.thread_time()
        database.close()
        done = time.thread_time()
        connect_close += (mid - start) + (done - end)
        total += done - start
    process = time.process_time() - process0
    for owner, name, original in originals:
        setattr(owner, name, original)
    count = len(claimed)
    lines = [f"### 1. Sequential breakdown: {count} quiet checks, one thread, thread CPU time (inclusive)", "",
             "| step | µs/check | share | calls |", "|---|---:|---:|---:|",
             f"| whole process (this thread + helper threads, e.g. the fetch-deadline watchdog) | "
             f"{1e6 * process / count:.0f} | {100 * process / total:.0f}% | |",
             f"| this thread: whole actor incl. connect/close | {1e6 * total / count:.0f} | 100% | |",
             f"| DatabaseConnection connect + close | {1e6 * connect_close / count:.0f} | "
             f"{100 * connect_close / total:.0f}% | |"]
    for _, _, label in wrapped:
        lines.append(f"| {label} | {1e6 * _spent[label] / count:.0f} | {100 * _spent[label] / total:.0f}% | "
                     f"{_calls[label]:,} |")
    steps = [label for label in _spent if not label.startswith(" ") and not label.startswith("load_claimed +")]
    rest = total - connect_close - sum(_spent[label] for label in steps)
    lines.append(f"| rest of the actor (Prior, specs, the window, utcnow) | {1e6 * rest / count:.0f} | "
                 f"{100 * rest / total:.0f}% | |")
    return "\n".join(lines) + "\n"


def worker_profile(stats: Stats, n: int, top: int, profile: bool, threads: int = 4) -> tuple[float, str]:
    import dramatiq
    from dramatiq.worker import ConsumerThread, WorkerThread
    import tasks.main as main

    profiles: list[cProfile.Profile] = []
    originals = {cls: cls.run for cls in (ConsumerThread, WorkerThread)}
    if profile:
        for cls, original in originals.items():
            def run(self, _original=original):
                profiler = cProfile.Profile(time.thread_time)  # CPU, not wall: waits cost nothing
                profiles.append(profiler)
                profiler.enable()
                try:
                    _original(self)
                finally:
                    profiler.disable()
            cls.run = run
    try:
        checks0, _ = stats.progress()
        claimed = claim_all(n)
        cpu0 = time.process_time()
        worker = dramatiq.Worker(main.broker, worker_threads=threads)
        worker.start()
        while stats.progress()[0] < checks0 + claimed:
            time.sleep(0.05)
        cpu = time.process_time() - cpu0
        worker.stop()
    finally:
        for cls, original in originals.items():
            cls.run = original
    if not profile:
        return 1000 * cpu / claimed, ""
    out = io.StringIO()
    merged = pstats.Stats(profiles[0], stream=out)
    for p in profiles[1:]:
        merged.add(p)
    merged.strip_dirs().sort_stats("tottime").print_stats(top)
    merged.sort_stats("cumulative").print_stats(top)
    return 1000 * cpu / claimed, out.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--monitors", type=int, default=500)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--threads", type=int, default=4, help="worker threads of the in-process Worker (default 4)")
    parser.add_argument("--shared", type=int, metavar="D", help="the monitors watch D distinct urls (shared fetches)")
    args = parser.parse_args()
    (RESULTS / "logs").mkdir(parents=True, exist_ok=True)
    procs = Processes(RESULTS / "logs")
    try:
        port = free_port()
        procs.start("pages", [PYTHON, "-m", "bench.pages", "--count", str(args.monitors), "--port", str(port)])
        wait_listening(port, procs)
        ensure_database()
        reset_schema()
        if args.shared:
            from bench.quiet_shared import monitors_over
            monitors_over(args.shared)(f"http://127.0.0.1:{port}", args.monitors)
        else:
            create_monitors(f"http://127.0.0.1:{port}", args.monitors)
        os.environ.update(VIGIL_ENV)
        import redis
        redis.Redis.from_url(REDIS_URL).flushdb()
        import tasks.main  # noqa: F401  settings, database and broker exactly as the worker process builds them
        stats = Stats()
        stats.events = EventCounter(REDIS_URL)
        # make everything due, warm (connections, imports), then measure
        stats.make_all_due()
        worker_profile(stats, args.monitors, args.top, profile=False, threads=args.threads)
        stats.make_all_due()
        print(breakdown(stats, args.monitors))
        stats.make_all_due()
        plain, _ = worker_profile(stats, args.monitors, args.top, profile=False, threads=args.threads)
        stats.make_all_due()
        profiled, text = worker_profile(stats, args.monitors, args.top, profile=True, threads=args.threads)
        print(f"### 2. In-process dramatiq Worker (RedisBroker, {args.threads} threads): {plain:.2f} CPU-ms/check without "
              f"the profiler, {profiled:.2f} with it (cProfile in every consumer and worker thread)\n")
        print(text)
        stats.close()
    finally:
        procs.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
