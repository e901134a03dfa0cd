#!/usr/bin/env python
"""Memory benchmark: RSS of `vigil web` and of the worker with 10,000 monitors, next to bare frameworks.

    .venv/bin/python bench/memory.py [--monitors 10000] [--checked 300] [--rounds 3] [--requests 40]

Vigil runs in production mode on PostgreSQL (database vigil_bench_mem, created if missing, schema dropped and
recreated with `vigil migrate`) and Redis (db 8, flushed): `vigil web`, `python -m dramatiq tasks.main
--processes 1 --threads 4` and `vigil scheduler`. First with no monitor at all, then with `--monitors`:
`--checked` page monitors made by create_monitor for one owner (after a real baseline check against
bench/pages.py), the rest copies owned by other accounts (50 each), due long after the run.
Each is measured idle after start, then after load: `--rounds` rounds in which the owner's monitors are all
due (quiet checks by the worker), and `--requests` rounds of the owner's pages and API calls (Settings →
Monitors, a conversation page, GET /api/monitors, the tool's monitor_list).

Baselines, started and loaded the same way: a bare Litestar app under uvicorn (bench/bare_web.py) and a bare
Dramatiq worker with a peewee pool (bench/bare_worker.py, one query per message).
Memory is RSS and PSS (pages shared by the worker's forked processes split between them) of each process
tree, from /proc/<pid>/smaps_rollup. Nothing asserts; see bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
import requests  # noqa: E402

from bench.common import (  # noqa: E402
    PYTHON, Db, RESULTS, VIGIL, BenchError, Processes, change_spec, clone_monitors, database_url, failed, figure,
    fresh_database, free_port, prepare, publish, record, seed_page_monitors, tree_memory, versions,
    wait_listening, clean_up)
from bench.quiet_checks import EventCounter  # noqa: E402
from tests.processes import vigil as vigil_command  # noqa: E402

DB_NAME = "vigil_bench_mem"
REDIS_URL = "redis://127.0.0.1:6379/8"
EMAIL, PASSWORD = "bench@example.com", "bench-password-not-secret"  # the owner seed_page_monitors makes
CONVERSATION = "bench-conversation"
INTERVAL_SECONDS = 3600
#: after start, before the idle reading: imports done, pools and connections opened, first ticks run
SETTLE_SECONDS = 5.0
WORKER_ARGS = ["--processes", "1", "--threads", "4"]
WORKER_ENV = {"dramatiq_worker_timeout": "100"}  # as `vigil worker` and the Procfile run it
GOAL_GROWTH = 1.1


def vigil_env(port: int) -> dict:
    return {"DATABASE_URL": database_url(DB_NAME), "REDIS_URL": REDIS_URL, "FETCH_ALLOW_LOOPBACK": "true",
            "LOG_LEVEL": "WARNING", "PUBLIC_API_BASE_URL": f"http://127.0.0.1:{port}",
            "SECRET_KEY": "bench-only-secret-key-not-used-for-anything-real", "VIGIL_DATA_DIR": str(RESULTS / "var")}


@dataclass
class Reading:
    """RSS and PSS (MiB) of each measured process tree at one moment."""
    label: str
    mib: dict[str, tuple[float, float]] = field(default_factory=dict)


def read(label: str, pids: dict[str, int]) -> Reading:
    reading = Reading(label, {name: tree_memory(pid) for name, pid in pids.items()})
    print(f"  {label}: " + ", ".join(f"{name} {rss:.1f} MiB RSS / {pss:.1f} PSS"
                                     for name, (rss, pss) in reading.mib.items()), flush=True)
    return reading


def start_vigil(procs: Processes, env: dict, port: int, tag: str) -> dict[str, int]:
    web = procs.start(f"mem-web-{tag}", [VIGIL, "web", "--host", "127.0.0.1", "--port", str(port)], env)
    worker = procs.start(f"mem-worker-{tag}", [PYTHON, "-m", "dramatiq", "tasks.main", *WORKER_ARGS],
                         {**env, **WORKER_ENV})
    scheduler = procs.start(f"mem-scheduler-{tag}", [VIGIL, "scheduler"], env)
    wait_listening(port, procs)
    time.sleep(SETTLE_SECONDS)
    procs.check_alive()
    return {"web": web.pid, "worker": worker.pid, "scheduler": scheduler.pid}


def seed(base: str, monitors: int, checked: int, env: dict) -> int:
    """The owner's `checked` page monitors and `monitors - checked` copies for other accounts; the owner's
    conversation id."""
    seed_page_monitors(env, base, checked, change_spec(INTERVAL_SECONDS), lambda now: now + timedelta(days=1))
    from engine.tokens import hash_password

    db = Db(DB_NAME)
    db.query("UPDATE users SET password_hash = %s WHERE email = %s", (hash_password(PASSWORD), EMAIL))
    template, created, conversation = db.query(
        "SELECT m.id, m.created_at, c.id FROM monitors m JOIN conversations c ON c.id = m.conversation_id "
        "ORDER BY m.created_at LIMIT 1")[0]
    db.close()
    if monitors > checked:
        clone_monitors(DB_NAME, template, monitors - checked, created + timedelta(days=1), INTERVAL_SECONDS,
                       INTERVAL_SECONDS, created + timedelta(days=29))
    return conversation


def check_rounds(rounds: int, checked: int, procs: Processes, env: dict) -> None:
    """Make the owner's monitors due `rounds` times; each time, wait until the worker has checked them all."""
    events = EventCounter(REDIS_URL, env["DATABASE_URL"])
    db = Db(DB_NAME)
    try:
        for number in range(rounds):
            target = events.count + checked
            db.query("UPDATE monitors SET next_check_at = now() at time zone 'utc' - interval '1 second' "
                     "FROM users WHERE users.id = monitors.user_id AND users.email = %s", (EMAIL,))
            deadline = time.monotonic() + 120
            while events.count < target:
                if time.monotonic() > deadline:
                    raise BenchError(f"round {number + 1}: {events.count - target + checked} of {checked} checks "
                                     f"done after 120 s")
                procs.check_alive()
                time.sleep(0.1)
    finally:
        events.close()
        db.close()


def web_requests(base: str, token: str, conversation: int, rounds: int) -> int:
    """The owner signs in, then `rounds` times: Settings → Monitors, the conversation page, GET /api/monitors
    and the tool's monitor_list. Returns how many requests; any answer but 200 stops the bench."""
    browser, runtime = requests.Session(), requests.Session()
    browser.trust_env = runtime.trust_env = False
    runtime.headers["Authorization"] = f"Bearer {token}"
    csrf = re.search(r'name="_csrf" value="([^"]+)"', browser.get(f"{base}/login", timeout=30).text)
    signed_in = browser.post(f"{base}/login", data={"email": EMAIL, "password": PASSWORD, "_csrf": csrf.group(1)},
                             timeout=30)
    if signed_in.status_code != 200 or not signed_in.url.endswith("/settings/monitors"):
        raise BenchError(f"sign-in failed: {signed_in.status_code} {signed_in.url}")
    tool_call = {"action": "monitor_list", "arguments": {},
                 "context": {"conversation_id": CONVERSATION, "channel": "chat", "agent_id": "bench"}}
    calls = [lambda: browser.get(f"{base}/settings/monitors", timeout=30),
             lambda: browser.get(f"{base}/conversations/{conversation}", timeout=30),
             lambda: runtime.get(f"{base}/api/monitors", timeout=30),
             lambda: runtime.post(f"{base}/api/tool/monitor", json=tool_call, timeout=30)]
    for _ in range(rounds):
        for call in calls:
            response = call()
            if response.status_code != 200 or (response.request.method == "POST" and not response.json().get("ok")):
                raise BenchError(f"{response.request.method} {response.url}: {response.status_code} "
                                 f"{response.text[:300]}")
    browser.close()
    runtime.close()
    return 2 + rounds * len(calls)


def run_vigil(args, procs: Processes, base: str) -> tuple[list[Reading], dict]:
    port = free_port()
    env = vigil_env(port)
    fresh_database(DB_NAME)
    redis.Redis.from_url(REDIS_URL).flushdb()
    try:
        vigil_command("migrate", env=env)
    except AssertionError as exc:
        raise BenchError(str(exc)) from None
    print("Vigil, no monitors …", flush=True)
    pids = start_vigil(procs, env, port, "empty")
    readings = [read("0 monitors, idle", pids)]
    procs.stop(*(f"mem-{name}-empty" for name in pids))

    print(f"Vigil, {args.monitors:,} monitors ({args.checked} of them checked during the load) …", flush=True)
    conversation = seed(base, args.monitors, args.checked, env)
    try:
        token = vigil_command("token", "create", "--user", EMAIL, env=env).strip().splitlines()[-1]
    except AssertionError as exc:
        raise BenchError(str(exc)) from None
    db = Db(DB_NAME)
    monitors = db.scalar("SELECT count(*) FROM monitors WHERE status = 'active'")
    db.close()
    pids = start_vigil(procs, env, port, "full")
    readings.append(read(f"{monitors:,} monitors, idle", pids))
    check_rounds(args.rounds, args.checked, procs, env)
    served = web_requests(f"http://127.0.0.1:{port}", token, conversation, args.requests)
    time.sleep(1)
    readings.append(read(f"{monitors:,} monitors, after {args.rounds * args.checked:,} checks and {served} "
                         "requests", pids))
    procs.stop(*(f"mem-{name}-full" for name in pids))
    return readings, {"monitors": monitors, "checks": args.rounds * args.checked, "requests": served}


def run_baselines(args, procs: Processes, load: dict) -> list[Reading]:
    print("baselines: bare Litestar + uvicorn, bare Dramatiq + peewee …", flush=True)
    port = free_port()
    web = procs.start("mem-bare-web", [PYTHON, "-m", "bench.bare_web", "--port", str(port)])
    worker = procs.start("mem-bare-worker", [PYTHON, "-m", "dramatiq", "bench.bare_worker", *WORKER_ARGS],
                         {"BARE_REDIS_URL": REDIS_URL, "BARE_DATABASE": DB_NAME, **WORKER_ENV})
    wait_listening(port, procs)
    time.sleep(SETTLE_SECONDS)
    procs.check_alive()
    pids = {"web": web.pid, "worker": worker.pid}
    readings = [read("bare, idle", pids)]
    rds = redis.Redis.from_url(REDIS_URL)
    rds.flushdb()
    os.environ.update(BARE_REDIS_URL=REDIS_URL, BARE_DATABASE=DB_NAME)
    from bench import bare_worker  # its broker, pointed at the same Redis db, to send the messages

    for n in range(load["checks"]):
        bare_worker.ping.send(n)
    deadline = time.monotonic() + 120
    while rds.llen("dramatiq:default") or rds.hlen("dramatiq:default.msgs"):
        if time.monotonic() > deadline:
            raise BenchError("the bare worker did not finish its messages within 120 s")
        procs.check_alive()
        time.sleep(0.1)
    session = requests.Session()
    session.trust_env = False
    for i in range(load["requests"]):
        response = session.get(f"http://127.0.0.1:{port}/{'api/items' if i % 2 else 'healthz'}", timeout=30)
        if response.status_code != 200:
            raise BenchError(f"bare web answered {response.status_code}")
    session.close()
    time.sleep(1)
    readings.append(read(f"bare, after {load['checks']:,} messages and {load['requests']} requests", pids))
    procs.stop("mem-bare-web", "mem-bare-worker")
    return readings


def report(args, header: list[str], vers: str, vigil: list[Reading], bare: list[Reading], load: dict
           ) -> tuple[str, list[dict]]:
    empty, idle, loaded = vigil
    bare_idle, bare_loaded = bare

    def cell(reading: Reading, name: str) -> str:
        rss, pss = reading.mib.get(name, (float("nan"), float("nan")))
        return f"{rss:.1f} / {pss:.1f}"

    lines = ["# Vigil memory: web and worker with many monitors vs. bare frameworks", "", *header, f"- {vers}",
             f"- Vigil: `vigil web` (uvicorn, 1 process), `python -m dramatiq tasks.main {' '.join(WORKER_ARGS)}`, "
             f"`vigil scheduler`; PostgreSQL database {DB_NAME}, Redis db 8",
             "- Baselines: bench/bare_web.py (Litestar + uvicorn, same settings), bench/bare_worker.py (Dramatiq on "
             "Redis + a peewee pool, one query per message), same worker options",
             f"- load: {load['checks']:,} checks of {args.checked} page monitors ({args.rounds} rounds) and "
             f"{load['requests']} requests (Settings → Monitors, a conversation page, GET /api/monitors, the tool's "
             f"monitor_list; {args.checked} monitors listed); the baselines get as many messages and requests",
             f"- idle readings {SETTLE_SECONDS:g} s after start; memory is RSS / PSS in MiB of the process tree "
             "(the worker: dramatiq's CLI and its forked worker process)", "",
             "| reading | web | worker | scheduler |", "|---|---:|---:|---:|"]
    for reading in (empty, idle, loaded, bare_idle, bare_loaded):
        lines.append(f"| {reading.label} | {cell(reading, 'web')} | {cell(reading, 'worker')} | "
                     f"{cell(reading, 'scheduler') if 'scheduler' in reading.mib else '—'} |")

    def ratio(a: Reading, b: Reading, name: str, kind: int = 0) -> float:
        return a.mib[name][kind] / b.mib[name][kind]

    rows = []
    for name in ("web", "worker"):
        growth = ratio(idle, empty, name)
        rows += [(f"{name} RSS idle, {load['monitors']:,} monitors ÷ 0 monitors", growth, f"≤ {GOAL_GROWTH:g}",
                  growth <= GOAL_GROWTH),
                 (f"{name} RSS after load ÷ bare framework after the same load", ratio(loaded, bare_loaded, name), "—",
                  None),
                 (f"{name} PSS after load ÷ bare framework's", ratio(loaded, bare_loaded, name, 1), "—", None),
                 (f"{name} RSS idle ÷ bare framework idle", ratio(idle, bare_idle, name), "—", None),
                 (f"{name} RSS after load ÷ idle ({load['monitors']:,} monitors)", ratio(loaded, idle, name), "—", None)]
    lines += ["", "| ratio (same run) | measured | goal | met |", "|---|---:|---:|:---:|"]
    lines += [f"| {label} | {value:.3f} | {goal} | {'—' if met is None else 'yes' if met else 'NO'} |"
              for label, value, goal, met in rows]
    lines += ["", f"- load average at end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}"]
    figures = []
    for name in ("web", "worker"):
        figures.append(figure(f"{name} RSS after load, {load['monitors']:,} monitors, vs bare framework",
                              f"{loaded.mib[name][0]:.0f} MiB", f"{bare_loaded.mib[name][0]:.0f} MiB",
                              ratio(loaded, bare_loaded, name)))
        growth = ratio(idle, empty, name)
        figures.append(figure(f"{name} RSS idle, {load['monitors']:,} monitors vs 0", f"{idle.mib[name][0]:.0f} MiB",
                              f"{empty.mib[name][0]:.0f} MiB", growth, f"≤ {GOAL_GROWTH:g}", growth <= GOAL_GROWTH))
    return "\n".join(lines) + "\n", figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Memory: Vigil's web and worker with many monitors vs. bare frameworks.")
    parser.add_argument("--monitors", type=int, default=10_000, help="monitors in the loaded phase (default 10000)")
    parser.add_argument("--checked", type=int, default=300, help="of them, the owner's, checked in the load (default 300)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of checks of the owner's monitors (default 3)")
    parser.add_argument("--requests", type=int, default=40, help="rounds of the owner's four requests (default 40)")
    args = parser.parse_args(argv)
    if not 0 < args.checked <= args.monitors:
        parser.error("--checked must be between 1 and --monitors")
    header, procs = prepare()
    try:
        port = free_port()
        procs.start("mem-pages", [PYTHON, "-m", "bench.pages", "--count", str(args.checked), "--port", str(port)])
        wait_listening(port, procs)
        vigil, load = run_vigil(args, procs, f"http://127.0.0.1:{port}")
        bare = run_baselines(args, procs, load)
        text_out, figures = report(args, header, versions(), vigil, bare, load)
    except (KeyboardInterrupt, BenchError) as exc:
        return failed(exc)
    finally:
        clean_up(procs, REDIS_URL)
    record("memory", figures)
    return publish("memory.md", text_out)


if __name__ == "__main__":
    sys.exit(main())
