#!/usr/bin/env python
"""Idle benchmark: CPU per second of each Vigil process at rest, with no monitor and with many none of which is due.

    .venv/bin/python bench/idle.py [--monitors 10000] [--window 20] [--settle 8] [--changedetection CMD]

Two phases, each with every process started afresh, left to settle, then measured over the same `--window`:
- 0 monitors: a freshly migrated PostgreSQL database (vigil_bench_idle, schema dropped and recreated; Redis
  db 11, flushed) and a fresh SQLite file;
- `--monitors` armed monitors, interval 1 h, the first due a day later: one page monitor made by create_monitor
  after a real baseline check against bench/pages.py, the rest copies inserted in one SQL statement.

Measured, side by side: production `vigil web`, `vigil worker --processes 2 --threads 8` (its whole process tree:
Dramatiq's CLI and its worker processes) and `vigil scheduler` on PostgreSQL and Redis; embedded `vigil serve`
(web, worker threads and scheduler thread in one process) on SQLite in a temporary VIGIL_DATA_DIR; and `sleep`
(the baseline: a process that does nothing uses 0). With `--changedetection` (or `changedetection.io` on PATH),
changedetection.io started on a fresh datastore (its two example watches) as bench/README.md describes, measured the same way.

CPU is the sum over the process's threads of /proc/<pid>/task/<tid>/schedstat (nanoseconds), differenced over the
window; the busiest threads of each process are listed, so a process over its goal says which thread spends it.
The goal (issue 32): each ≤ 2 ms of CPU a second at rest. Nothing asserts; see bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench.common import (  # noqa: E402
    PYTHON, RESULTS, VIGIL, BenchError, Db, Processes, change_spec, clean_up, clone_monitors, database_url, failed,
    figure, fresh_database, free_port, prepare, publish, record, run_notes, seed_page_monitors, threads_cpu,
    tree_pids, versions, wait_listening)
from tests.processes import vigil as vigil_command  # noqa: E402

DB_NAME = os.environ.get("VIGIL_BENCH_IDLE_DB", "vigil_bench_idle")
REDIS_URL = os.environ.get("VIGIL_BENCH_IDLE_REDIS_URL", "redis://127.0.0.1:6379/11")
INTERVAL_SECONDS = 3600
GOAL_MS = 2.0
WORKER_ARGS = ["--processes", "2", "--threads", "8"]  # `vigil worker`'s defaults
PROCESSES = ("serve", "web", "worker", "scheduler", "sleep")
LABELS = {"serve": "embedded `vigil serve`", "web": "`vigil web`", "worker": "`vigil worker` (process tree)",
          "scheduler": "`vigil scheduler`", "sleep": "`sleep` (baseline)", "changedetection": "changedetection.io (a fresh datastore: its 2 example watches)"}


def env_for(port: int, data_dir: Path, embedded: bool) -> dict:
    common = {"FETCH_ALLOW_LOOPBACK": "true", "LOG_LEVEL": "WARNING", "VIGIL_DATA_DIR": str(data_dir),
              "SECRET_KEY": "bench-only-secret-key-not-used-for-anything-real",
              "PUBLIC_API_BASE_URL": f"http://127.0.0.1:{port}"}
    if embedded:
        return {**common, "DATABASE_URL": "", "REDIS_URL": ""}
    return {**common, "DATABASE_URL": database_url(DB_NAME), "REDIS_URL": REDIS_URL}


def seed_production(env: dict, pages: str, monitors: int) -> None:
    seed_page_monitors(env, pages, 1, change_spec(INTERVAL_SECONDS), lambda now: now + timedelta(days=1))
    db = Db(DB_NAME)
    template, created = db.query("SELECT id, created_at FROM monitors ORDER BY created_at LIMIT 1")[0]
    db.close()
    if monitors > 1:
        clone_monitors(DB_NAME, template, monitors - 1, created + timedelta(days=1), INTERVAL_SECONDS,
                       INTERVAL_SECONDS, created + timedelta(days=29))


def seed_embedded(env: dict, pages: str, monitors: int, data_dir: Path) -> None:
    """The template monitor as in production, then its copies in one INSERT … SELECT over a recursive count."""
    seed_page_monitors({**env, "DATABASE_URL": f"sqlite:///{data_dir / 'vigil.db'}"}, pages, 1,
                       change_spec(INTERVAL_SECONDS), lambda now: now + timedelta(days=1))
    conn = sqlite3.connect(str(data_dir / "vigil.db"), isolation_level=None)
    try:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(monitors)") if row[1] != "id"]
        listed = ", ".join(f'"{name}"' for name in columns)
        copied = ", ".join(f't."{name}"' for name in columns)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(f"INSERT INTO monitors (id, {listed}) WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL "
                     f"SELECT n + 1 FROM g WHERE n < ?) SELECT 'clone-' || g.n, {copied} "
                     f"FROM g CROSS JOIN monitors t WHERE t.id = (SELECT id FROM monitors LIMIT 1)", (monitors - 1,))
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
    finally:
        conn.close()


def start_all(procs: Processes, tag: str, data_dir: Path, changedetection: str | None) -> dict[str, int]:
    """Every measured process, started; {name: pid}."""
    web_port, serve_port = free_port(), free_port()
    production, embedded = env_for(web_port, data_dir / "prod", False), env_for(serve_port, data_dir / "embedded", True)
    pids = {
        "web": procs.start(f"idle-web-{tag}", [VIGIL, "web", "--host", "127.0.0.1", "--port", str(web_port)],
                           production).pid,
        "worker": procs.start(f"idle-worker-{tag}", [VIGIL, "worker", *WORKER_ARGS], production).pid,
        "scheduler": procs.start(f"idle-scheduler-{tag}", [VIGIL, "scheduler"], production).pid,
        "serve": procs.start(f"idle-serve-{tag}", [VIGIL, "serve", "--host", "127.0.0.1", "--port", str(serve_port)],
                             embedded).pid,
        "sleep": procs.start(f"idle-sleep-{tag}", ["sleep", "3600"]).pid}
    if changedetection:
        cd_port, store = free_port(), data_dir / "changedetection"
        store.mkdir(parents=True, exist_ok=True)
        pids["changedetection"] = procs.start(f"idle-changedetection-{tag}", [
            changedetection, "-d", str(store), "-p", str(cd_port), "-h", "127.0.0.1"]).pid
        wait_listening(cd_port, procs, 120)
    wait_listening(web_port, procs)
    wait_listening(serve_port, procs)
    return pids


def measure(pids: dict[str, int], settle: float, window: float, procs: Processes) -> dict[str, tuple[float, list]]:
    """{name: (CPU ms per second over the window, [(thread name, ms/s) of its busiest threads])}."""
    time.sleep(settle)
    procs.check_alive()
    trees = {name: tree_pids(pid) for name, pid in pids.items()}
    before = {name: threads_cpu(tree) for name, tree in trees.items()}
    started = time.monotonic()
    time.sleep(window)
    elapsed = time.monotonic() - started
    procs.check_alive()
    found = {}
    for name, tree in trees.items():
        after = threads_cpu(tree)
        used = Counter({key: ns - before[name].get(key, 0) for key, ns in after.items()})
        busiest = [(_thread_name(pid, tid), ns / 1e6 / elapsed) for (pid, tid), ns in used.most_common(3) if ns > 0]
        found[name] = (sum(used.values()) / 1e6 / elapsed, busiest)
        print(f"  {name}: {found[name][0]:.2f} ms/s", flush=True)
    return found


def _thread_name(pid: int, tid: int) -> str:
    try:
        return f"{Path(f'/proc/{pid}/task/{tid}/comm').read_text().strip()} ({pid}/{tid})"
    except OSError:
        return f"{pid}/{tid}"


def run_phase(args, procs: Processes, pages: str, monitors: int, tag: str, changedetection: str | None):
    data_dir = Path(tempfile.mkdtemp(prefix=f"vigil-idle-{tag}-"))
    try:
        fresh_database(DB_NAME)
        redis.Redis.from_url(REDIS_URL).flushdb()
        production = env_for(0, data_dir / "prod", False)
        try:
            vigil_command("migrate", env=production)
        except AssertionError as exc:
            raise BenchError(str(exc)) from None
        if monitors:
            print(f"seeding {monitors:,} monitors in PostgreSQL and in SQLite …", flush=True)
            seed_production(production, pages, monitors)
            seed_embedded(env_for(0, data_dir / "embedded", True), pages, monitors, data_dir / "embedded")
        print(f"{monitors:,} monitors: starting the processes …", flush=True)
        pids = start_all(procs, tag, data_dir, changedetection)
        readings = measure(pids, args.settle, args.window, procs)
        procs.stop(*(name for name, _ in list(procs.started) if name.endswith(f"-{tag}")))
        return readings
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def report(args, header: list[str], vers: str, phases: dict[int, dict], notes: list[str]) -> tuple[str, list[dict]]:
    counts = sorted(phases)
    names = [name for name in (*PROCESSES, "changedetection") if name in phases[counts[0]]]
    lines = ["# Vigil at rest: CPU per second of each process, idle", "", *header, f"- {vers}",
             f"- window {args.window:g} s after {args.settle:g} s of settling; CPU from /proc schedstat of every "
             "thread of the process (the worker: its whole tree)",
             f"- monitors: page monitors, interval {INTERVAL_SECONDS} s, none due before a day; production on "
             f"PostgreSQL {DB_NAME} and Redis {REDIS_URL}, embedded on SQLite in a temporary VIGIL_DATA_DIR", "",
             "| process | " + " | ".join(f"{n:,} monitors (ms/s)" for n in counts) + f" | goal | met ({counts[-1]:,}) |",
             "|---|" + "---:|" * len(counts) + "---:|:---:|"]
    for name in names:
        cells = " | ".join(f"{phases[n][name][0]:.2f}" for n in counts)
        goal = "baseline" if name in ("sleep", "changedetection") else f"≤ {GOAL_MS:g}"
        met = "—" if goal == "baseline" else "yes" if phases[counts[-1]][name][0] <= GOAL_MS else "NO"
        lines.append(f"| {LABELS[name]} | {cells} | {goal} | {met} |")
    lines += ["", "Busiest threads (ms/s) in each phase:", ""]
    for n in counts:
        for name in names:
            busiest = ", ".join(f"{thread} {ms:.2f}" for thread, ms in phases[n][name][1]) or "none"
            lines.append(f"- {n:,} monitors, {name}: {busiest}")
    if "changedetection" not in names:
        lines += ["", "changedetection.io not measured: not installed (see bench/README.md for its recipe)."]
    lines += ["", *(f"- {note}" for note in notes)]
    figures = []
    last = phases[counts[-1]]
    baseline = f"sleep {last['sleep'][0]:.2f} ms/s" + (
        f"; changedetection.io {last['changedetection'][0]:.2f}" if "changedetection" in last else "")
    for name in ("serve", "web", "worker", "scheduler"):
        ms = last[name][0]
        ratio = ms / last["changedetection"][0] if "changedetection" in last and last["changedetection"][0] else None
        figures.append(figure(f"{LABELS[name]} idle CPU, {counts[-1]:,} armed monitors", f"{ms:.2f} ms/s", baseline,
                              ratio, f"≤ {GOAL_MS:g} ms/s", ms <= GOAL_MS))
    return "\n".join(lines) + "\n", figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="CPU of each Vigil process at rest, with 0 and many monitors.")
    parser.add_argument("--monitors", type=int, default=10_000, help="armed monitors in the second phase (10000)")
    parser.add_argument("--window", type=float, default=20.0, help="seconds measured in each phase (20)")
    parser.add_argument("--settle", type=float, default=8.0, help="seconds after start before measuring (8)")
    parser.add_argument("--changedetection", default=shutil.which("changedetection.io"),
                        help="changedetection.io's command, measured beside (default: on PATH, else left out)")
    args = parser.parse_args(argv)
    if args.monitors < 1:
        parser.error("--monitors must be at least 1")
    header, procs = prepare()
    began = time.monotonic()
    try:
        port = free_port()
        procs.start("idle-pages", [PYTHON, "-m", "bench.pages", "--count", "1", "--port", str(port)])
        wait_listening(port, procs)
        pages = f"http://127.0.0.1:{port}"
        phases = {n: run_phase(args, procs, pages, n, f"m{n}", args.changedetection) for n in (0, args.monitors)}
        logs = [f"idle-{name}-m{n}" for n in phases for name in phases[n] if name != "sleep"]
        text_out, figures = report(args, header, versions(), phases, run_notes(procs, logs, began))
    except (KeyboardInterrupt, BenchError) as exc:
        return failed(exc)
    finally:
        clean_up(procs, REDIS_URL)
    record("idle", figures)
    return publish("idle.md", text_out)


if __name__ == "__main__":
    sys.exit(main())
