#!/usr/bin/env python
"""Trigger-ingest benchmark: what POST /api/triggers/{token} sustains next to a bare INSERT, and how fast
a delivery becomes a wake on the owner's event stream.

    .venv/bin/python bench/trigger_ingest.py [--deliveries 4000] [--blocks 4] [--concurrency 16] [--profile]

Vigil runs in production mode: `vigil web` (uvicorn, 1 process), `python -m dramatiq tasks.main --processes 1
--threads 4` and `vigil scheduler`, on PostgreSQL (database vigil_bench_triggers, created if missing, schema
recreated) and Redis (db 10, flushed). 20 unsigned webhook monitors are created through the tool endpoint.
The baseline is a bare Litestar app in this file (`--serve-baseline`, its own uvicorn process, 1 process):
one POST route that does one INSERT of the body through a peewee pool in a worker thread, and answers 202.

Everything is reported as ratios and latencies measured in this same run; nothing asserts on time.
See bench/README.md for how to read the output.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
import requests  # noqa: E402

from bench import common, quiet_checks  # noqa: E402
from bench.quiet_checks import (  # noqa: E402
    PG, PYTHON, RESULTS, VIGIL, BenchError, Processes, free_port, tree_cpu, versions, wait_listening,
)
from tests.processes import vigil as vigil_command  # noqa: E402
from bench.common import failed, figure, hold_signals, prepare, publish, record  # noqa: E402
from bench.trigger_parts import (  # noqa: E402
    Db, EventStream, Load, Paced, Profiler, bodies_and_keys, collect, fmt, paced, pct, pg_cpu_since, post_load,
)

DB_NAME = "vigil_bench_triggers"
DATABASE_URL = f"postgresql://vigil:vigil@127.0.0.1:5432/{DB_NAME}"
REDIS_URL = "redis://127.0.0.1:6379/10"
MONITORS = 20
EMAIL = "trigger-bench@example.com"
CONVERSATION = "trigger-bench-"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
#: process (and log file) names: another benchmark may be running at the same moment with its own
WEB, WORKER, SCHEDULER, BASELINE = "triggers-web", "triggers-worker", "triggers-scheduler", "triggers-baseline"
BASELINE_TABLE = "bench_baseline_deliveries"
ROUND_ORDER = ("baseline", "Vigil", "Vigil", "baseline")
PROFILE_RATE = 100  # py-spy samples per second


def vigil_env(port: int) -> dict:
    return {
        "DATABASE_URL": DATABASE_URL, "REDIS_URL": REDIS_URL, "PUBLIC_API_BASE_URL": f"http://127.0.0.1:{port}",
        "LOG_LEVEL": "WARNING",
        # no link, wake or hit limit may refuse or pause anything during the run
        "TRIGGER_RATE_PER_MINUTE": "10000000", "MONITOR_MAX_WAKES": "100000",
        "MONITOR_MAX_WAKES_PER_HOUR": "1000000", "MONITOR_MAX_FIRES_PER_CONVERSATION_DAY": "1000000", "TRIGGER_MAX_HITS": "1000000",
        "SECRET_KEY": quiet_checks.VIGIL_ENV["SECRET_KEY"], "VIGIL_DATA_DIR": quiet_checks.VIGIL_ENV["VIGIL_DATA_DIR"],
    }


# ----------------------------------------------------------------------------------------------
# the baseline server: `trigger_ingest.py --serve-baseline --port P` (its own process)


def serve_baseline(port: int) -> int:
    """A bare Litestar app: POST /api/triggers/{token} does one INSERT of the body and answers 202."""
    import uvicorn
    from litestar import Litestar, Request, Response, get, post
    from litestar.concurrency import sync_to_thread
    from playhouse.pool import PooledPostgresqlDatabase

    # the pool Vigil's models.db.bind() builds: max 32 connections, opened and closed around each unit of work
    db = PooledPostgresqlDatabase(DB_NAME, host=PG["host"], port=PG["port"], user=PG["user"],
                                  password=PG["password"], max_connections=32, stale_timeout=300, timeout=10,
                                  autoconnect=False)
    sql = f"INSERT INTO {BASELINE_TABLE} (token, body, received_at) VALUES (%s, %s, %s)"

    def insert(token: str, body: bytes) -> None:
        db.connect(reuse_if_open=True)
        try:
            db.execute_sql(sql, (token, body.decode("utf-8"), datetime.now(timezone.utc).replace(tzinfo=None)))
        finally:
            db.close()

    @post("/api/triggers/{token:str}")
    async def deliver(request: Request, token: str) -> Response:
        body = await request.body()
        await sync_to_thread(insert, token, body)
        return Response({"accepted": True}, status_code=202)

    @get("/healthz", sync_to_thread=False)
    def healthz() -> dict:
        return {"ok": True}

    app = Litestar(route_handlers=[deliver, healthz], signature_namespace={"Request": Request, "Response": Response})
    config = uvicorn.Config(app, host="127.0.0.1", port=port,
                            timeout_graceful_shutdown=2, log_level="warning", proxy_headers=False)
    uvicorn.Server(config).run()
    return 0


# ----------------------------------------------------------------------------------------------
# database


def create_monitors(base: str, token: str) -> dict[str, str]:
    """MONITORS unsigned webhook monitors through the tool endpoint, one conversation each: {monitor id: url}."""
    links = {}
    session = requests.Session()
    session.trust_env = False
    for i in range(MONITORS):
        response = session.post(f"{base}/api/tool/monitor", headers={"Authorization": f"Bearer {token}"}, json={
            "action": "monitor_create",
            "context": {"conversation_id": f"{CONVERSATION}{i}", "channel": "chat", "agent_id": "bench"},
            "arguments": {"description": f"deploy {i} finishes", "source": {"type": "webhook", "signature": "none",
                                                                            "max_hits": 1_000_000},
                          "max_wakes": 100_000, "on_match": "Tell the user."}}, timeout=30)
        body = response.json()
        if response.status_code != 200 or not body.get("ok"):
            raise BenchError(f"monitor_create failed: {response.status_code} {body}")
        result = body["result"]
        if result["max_hits"] != 1_000_000 or result["wakes_left"] < 100_000 \
                or any("capped" in note for note in result["notes"]):
            raise BenchError(f"a limit was capped: {result}")
        links[result["monitor_id"]] = result["url"]
    session.close()
    return links


def signal_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def unprocessed(db: Db) -> int:
    return db.scalar("SELECT count(*) FROM deliveries WHERE processed_at IS NULL")


def wait_processed(db: Db, procs: Processes, timeout: float) -> None:
    """Until no stored delivery is left unprocessed."""
    start = time.perf_counter()
    while True:
        left = unprocessed(db)
        if left == 0:
            return
        if time.perf_counter() - start > timeout:
            raise BenchError(f"{left} deliveries still unprocessed after {timeout:.0f}s;\n"
                             f"worker log:\n{procs.tail(WORKER)}")
        procs.check_alive()
        time.sleep(0.05)


def load_row(label: str, m: Load) -> str:
    return (f"| {label} | {m.accepted:,} | {fmt(m.wall, 2)} | {fmt(m.rate)} | {fmt(pct(m.latencies, 50))} | "
            f"{fmt(pct(m.latencies, 99))} | {fmt(m.ms(m.server_cpu), 2)} | {fmt(m.ms(m.worker_cpu), 2)} | "
            f"{fmt(m.ms(m.pg_cpu), 2)} | {fmt(m.ms(m.client_cpu), 2)} |")


def latency_rows(p: Paced) -> list[str]:
    both = [m for m in p.sent if m in p.stored and m in p.streamed]
    rtt = [p.sent[m][1] - p.sent[m][0] for m in p.sent]
    stored = [p.stored[m] - p.sent[m][1] for m in both]
    stored_from_post = [p.stored[m] - p.sent[m][0] for m in both]
    streamed = [p.streamed[m] - p.sent[m][1] for m in both]
    streamed_from_post = [p.streamed[m] - p.sent[m][0] for m in both]
    rows = []
    for label, values in (("POST sent → 202 received", rtt), ("202 received → wake stored (messages.created_at)", stored),
                          ("202 received → `message.created` on /api/events", streamed),
                          ("POST sent → wake stored", stored_from_post),
                          ("POST sent → `message.created` on /api/events", streamed_from_post)):
        rows.append(f"| {p.name} | {label} | {len(values)} | {fmt(pct(values, 50))} | {fmt(pct(values, 90))} | "
                    f"{fmt(pct(values, 99))} | {fmt(1000 * max(values) if values else float('nan'))} |")
    return rows


#: the row about whether one worker process keeps up with one web process (issue 18)
DRAIN_FIGURE = "worker drain ÷ web ingest, deliveries/s per process, same run"
#: its goal: the worker drains at least as fast as the web takes in
DRAIN_GOAL = 1.0


def drain_ratio(drain: tuple[int, float, float], ingest: Load) -> float:
    """Deliveries/s one worker process (4 threads) drained the paused backlog at, over what one web process took
    in while the worker was paused."""
    drained, drain_wall, _ = drain
    return (drained / drain_wall) / ingest.rate if drain_wall and ingest.rate else float("nan")


def figures(base: Load, ingest: Load, drain: tuple[int, float, float], steady: Paced,
            sparse: Paced | None) -> list[dict]:
    """The summary's rows: ingest against the bare endpoint (worker paused), the worker's drain against that
    ingest, wake latency at the SSE client."""
    drained, drain_wall, _ = drain
    ratio = drain_ratio(drain, ingest)
    rows = [figure("trigger deliveries/s vs bare INSERT endpoint", f"{ingest.rate:,.0f}/s", f"{base.rate:,.0f}/s",
                   ingest.rate / base.rate if base.rate else None, "≥ 0.7", ingest.rate >= 0.7 * base.rate),
            figure(DRAIN_FIGURE, f"{drained / drain_wall if drain_wall else float('nan'):,.0f}/s",
                   f"{ingest.rate:,.0f}/s", ratio, f"≥ {DRAIN_GOAL:g}", ratio >= DRAIN_GOAL)]
    for p in (50, 99):
        vigil, bare = pct(ingest.latencies, p), pct(base.latencies, p)
        rows.append(figure(f"trigger 202 latency p{p} vs bare INSERT endpoint", f"{fmt(vigil)} ms", f"{fmt(bare)} ms",
                           vigil / bare if bare else None))
    for phase, goal in ((steady, 250.0), (sparse, None)):
        if phase is None:
            continue
        waits = [phase.streamed[m] - phase.sent[m][1] for m in phase.sent if m in phase.streamed]
        p50, p99 = pct(waits, 50), pct(waits, 99)
        rows.append(figure(f"wake latency p50 / p99, 202 → SSE event, {phase.name}", f"{fmt(p50)} / {fmt(p99)} ms",
                           "—", None, f"p99 ≤ {goal:g} ms" if goal else "—",
                           p99 <= goal and len(waits) == len(phase.sent) if goal else None))
    return rows


def report(args, header: list[str], vers: str, base: Load, ingest: Load, blocks: list[tuple[Load, Load]], live: Load,
           drain: tuple[int, float, float], drain_pg: float, steady: Paced, sparse: Paced | None, checks: list[str],
           stream: EventStream) -> str:
    goal_ratio = ingest.rate / base.rate if base.rate else float("nan")
    per_block = ", ".join(fmt(vigil.rate / bare.rate if bare.rate else float("nan"), 2) for bare, vigil in blocks)
    steady_p99 = pct([steady.streamed[m] - steady.sent[m][1] for m in steady.sent
                      if m in steady.streamed], 99)
    drained, drain_wall, drain_cpu = drain
    worker_note = (f" (worker with dramatiq_worker_timeout={args.worker_timeout} ms)" if args.worker_timeout
                   else "")
    record("trigger_ingest", figures(base, ingest, drain, steady, sparse))
    drain_vs_ingest = drain_ratio(drain, ingest)
    lines = ["# Vigil trigger ingest vs. a bare INSERT", "", *header, f"- {vers}",
             f"- Vigil: `vigil web` (uvicorn, 1 process), `python -m dramatiq tasks.main --processes 1 --threads 4`, "
             f"`vigil scheduler`{worker_note}; PostgreSQL database {DB_NAME}, Redis db 10; {MONITORS} unsigned webhook monitors "
             "(no check: every delivery wakes), one conversation each",
             "- Baseline: bare Litestar app (same uvicorn settings, 1 process): `await request.body()`, one INSERT "
             "through a peewee pool in a worker thread (`sync_to_thread`, like Vigil's handler), 202",
             f"- Load: {args.concurrency} client threads, one keep-alive `requests.Session` each, distinct JSON bodies "
             f"(~400 B) with a unique `Idempotency-Key`; {args.blocks} blocks of rounds in the order baseline, Vigil, "
             f"Vigil, baseline ({args.deliveries // (2 * args.blocks):,} deliveries a round, "
             f"{args.deliveries:,} for each system), then Vigil with its worker running ({args.deliveries // 2:,})",
             "",
             "| run | 202s | wall s | deliveries/s | p50 ms | p99 ms | server CPU-ms/delivery | worker CPU-ms/delivery "
             "| PostgreSQL CPU-ms/delivery | client CPU-ms/request |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
             load_row("Baseline: bare Litestar + 1 INSERT", base),
             load_row("Vigil web, worker paused (ingest only)", ingest),
             load_row("Vigil web, worker running (production)", live),
             f"| Vigil worker draining the paused backlog (4 threads) | {drained:,} | {fmt(drain_wall, 2)} | "
             f"{fmt(drained / drain_wall if drain_wall else float('nan'))} | — | — | — | "
             f"{fmt(1000 * drain_cpu / drained if drained else float('nan'), 2)} | "
             f"{fmt(1000 * drain_pg / drained if drained else float('nan'), 2)} | — |", "",
             "| ratio (same run) | measured | goal | met |", "|---|---:|---:|:---:|",
             f"| Vigil ingest throughput ÷ baseline throughput (worker paused) | {fmt(goal_ratio, 3)} | ≥ 0.7 | "
             f"{'yes' if goal_ratio >= 0.7 else 'NO'} |",
             f"| the same, block by block (how much it moves within this run) | {per_block} | — | — |",
             f"| Vigil throughput with its worker running ÷ baseline throughput | {fmt(live.rate / base.rate, 3)} | — | — |",
             f"| Vigil web CPU per delivery ÷ baseline server CPU per delivery | "
             f"{fmt(ingest.ms(ingest.server_cpu) / base.ms(base.server_cpu), 2)} | — | — |",
             f"| Vigil PostgreSQL CPU per delivery ÷ baseline's | "
             f"{fmt(ingest.ms(ingest.pg_cpu) / base.ms(base.pg_cpu), 2)} | — | — |",
             f"| Vigil p50 latency ÷ baseline p50 (worker paused) | "
             f"{fmt(pct(ingest.latencies, 50) / pct(base.latencies, 50), 2)} | — | — |",
             f"| {DRAIN_FIGURE} (worker paused, then draining) | {fmt(drain_vs_ingest, 3)} | ≥ {DRAIN_GOAL:g} | "
             f"{'yes' if drain_vs_ingest >= DRAIN_GOAL else 'NO'} |",
             f"| `message.created` p99, 202 → event, at {steady.rate:g}/s | {fmt(steady_p99)} ms | ≤ 250 ms | "
             f"{'yes' if steady_p99 <= 250 else 'NO'} |", "",
             "Wake latency (one delivery at a time, worker and scheduler running, SSE client connected; "
             "the worker stamps messages.created_at just before its transaction commits):", "",
             "| phase | interval | n | p50 ms | p90 ms | p99 ms | max ms |", "|---|---|---:|---:|---:|---:|---:|",
             *latency_rows(steady), *(latency_rows(sparse) if sparse else []), "",
             "Checks:", "", *[f"- {line}" for line in checks],
             f"- events on the stream: {dict(stream.names)}; of them about monitors or conversations that are not "
             f"this bench's: {dict(stream.foreign) or 'none'}" + (
                 " (WARNING: another Vigil using another db of this Redis server published them: pub/sub channels "
                 "are not per database)" if stream.foreign else ""),
             f"- errors (non-202 or failed requests): baseline {dict(base.errors) or 'none'}, Vigil ingest "
             f"{dict(ingest.errors) or 'none'}, Vigil live {dict(live.errors) or 'none'}, paced "
             f"{dict(steady.errors + (sparse.errors if sparse else Counter())) or 'none'}",
             f"- load average at end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}"]
    return "\n".join(lines) + "\n"


def verify(db: Db, accepted: int, links: dict[str, str]) -> tuple[list[str], bool]:
    """Exactly one wake per accepted delivery, each with its message, and nothing left unprocessed."""
    deliveries = db.scalar("SELECT count(*) FROM deliveries")
    wakes = db.scalar("SELECT count(*) FROM wakes")
    messages = db.scalar("SELECT count(*) FROM messages WHERE role = 'wake'")
    orphan = db.scalar("SELECT count(*) FROM wakes WHERE message_id IS NULL")
    outcomes = dict(db.query("SELECT outcome, count(*) FROM deliveries GROUP BY outcome"))
    per_monitor = db.query(
        "SELECT l.monitor_id, l.hits, (SELECT count(*) FROM deliveries d WHERE d.link_id = l.id), "
        "(SELECT count(*) FROM wakes w WHERE w.monitor_id = l.monitor_id) FROM trigger_links l")
    uneven = [row for row in per_monitor if not (row[1] == row[2] == row[3])]
    statuses = dict(db.query("SELECT status, count(*) FROM monitors GROUP BY status"))
    baseline_rows = db.scalar(f"SELECT count(*) FROM {BASELINE_TABLE}")
    ok = deliveries == accepted == wakes == messages and not orphan and not uneven \
        and set(outcomes) == {"fired"} and statuses == {"active": len(links)}
    lines = [f"wakes {wakes:,} = deliveries stored {deliveries:,} = 202s the bench got from Vigil {accepted:,} = "
             f"wake messages {messages:,}: {'OK, exactly one wake per delivery' if ok else 'WARNING: NOT ONE WAKE PER DELIVERY'}",
             f"delivery outcomes {outcomes}; monitors {statuses}; wakes without a message {orphan}; links whose "
             f"hits, deliveries and wakes differ {len(uneven)}",
             f"baseline rows inserted {baseline_rows:,}"]
    return lines, ok


# ----------------------------------------------------------------------------------------------
# main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Trigger-ingest benchmark: Vigil vs. a bare INSERT.")
    parser.add_argument("--deliveries", type=int, default=4000,
                        help="deliveries per measured system, over all its rounds (default 4000)")
    parser.add_argument("--blocks", type=int, default=4,
                        help="blocks of rounds in the order baseline, Vigil, Vigil, baseline (default 4): this "
                             "machine's speed drifts within seconds, and short alternating rounds share the drift")
    parser.add_argument("--concurrency", type=int, default=16, help="client threads (default 16)")
    parser.add_argument("--rate", type=float, default=20.0, help="paced deliveries per second (default 20)")
    parser.add_argument("--paced-seconds", type=float, default=10.0, help="length of the paced phase (default 10)")
    parser.add_argument("--sparse", type=int, default=8,
                        help="deliveries 1.5 s apart after the paced phase, to an idle worker (default 8; 0: none)")
    parser.add_argument("--worker-timeout", type=int, metavar="MS", default=100,
                        help="dramatiq_worker_timeout for the worker: its longest idle poll of Redis (default 100 ms, "
                             "as the Procfile and `vigil worker` run it; 0 leaves dramatiq's own 1000 ms)")
    parser.add_argument("--profile", action="store_true",
                        help="extra unmeasured round with py-spy on the web process, and on the worker's drain")
    parser.add_argument("--serve-baseline", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_baseline:
        return serve_baseline(args.port)
    if args.blocks < 1 or args.concurrency < 1 or args.deliveries < 100 * args.blocks:
        parser.error("--deliveries must be at least 100 per block, --blocks and --concurrency at least 1")
    header, procs = prepare()
    run = uuid.uuid4().hex[:8]
    half = args.deliveries // 2
    per_round = args.deliveries // (2 * args.blocks)
    db: Db | None = None
    stream: EventStream | None = None
    paused: list[subprocess.Popen] = []
    profiles: list[str] = []
    started = time.monotonic()
    try:
        print(f"setting up (database {DB_NAME}, Redis db 10) …", flush=True)
        common.fresh_database(DB_NAME)  # its own: a judge_calls/quiet_checks run at the same moment is left alone
        rds = redis.Redis.from_url(REDIS_URL)
        rds.flushdb()
        port, base_port = free_port(), free_port()
        env = vigil_env(port)
        try:
            vigil_command("migrate", env=env)
            vigil_command("user", "create", EMAIL, "--password", "bench-password-not-secret", env=env)
            token = vigil_command("token", "create", "--user", EMAIL, env=env).strip().splitlines()[-1]
        except AssertionError as exc:
            raise BenchError(str(exc)) from None
        db = Db()
        db.query(f"CREATE TABLE {BASELINE_TABLE} (id bigserial PRIMARY KEY, token varchar(100) NOT NULL, "
                 "body text NOT NULL, received_at timestamp NOT NULL)")
        web = procs.start(WEB, [VIGIL, "web", "--host", "127.0.0.1", "--port", str(port)], env)
        worker_env = {**env, **({"dramatiq_worker_timeout": str(args.worker_timeout)} if args.worker_timeout else {})}
        worker = procs.start(WORKER, [PYTHON, "-m", "dramatiq", "tasks.main", "--processes", "1", "--threads", "4"],
                             worker_env)
        scheduler = procs.start(SCHEDULER, [VIGIL, "scheduler"], env)
        baseline = procs.start(BASELINE, [PYTHON, str(Path(__file__).resolve()), "--serve-baseline",
                                          "--port", str(base_port)])
        wait_listening(port, procs)
        wait_listening(base_port, procs)
        vigil_base, bare_base = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{base_port}"
        links = create_monitors(vigil_base, token)
        vigil_urls = list(links.values())
        bare_urls = [f"{bare_base}/api/triggers/{url.rsplit('/', 1)[1]}" for url in vigil_urls]
        accepted = 0

        def vigil_round(name: str, tag: str, n: int, worker_pid: int | None = None) -> Load:
            nonlocal accepted
            bodies, keys = bodies_and_keys(run, tag, n)
            result = post_load(name, vigil_urls, bodies, keys, args.concurrency, web.pid, db, worker_pid)
            accepted += result.accepted
            return result

        def bare_round(name: str, tag: str, n: int) -> Load:
            bodies, keys = bodies_and_keys(run, tag, n)
            return post_load(name, bare_urls, bodies, keys, args.concurrency, baseline.pid, db)

        print("warm-up (200 deliveries each, not measured) …", flush=True)
        bare_round("warm-up", "wb", 200)
        vigil_round("warm-up", "wv", 200, worker.pid)
        wait_processed(db, procs, 120)

        print("pausing Vigil's worker and scheduler (SIGSTOP): the web tier alone takes the load …", flush=True)
        for proc in (worker, scheduler):
            signal_group(proc, signal.SIGSTOP)
            paused.append(proc)
        base, ingest = Load("baseline"), Load("Vigil ingest")
        blocks = [(Load("baseline"), Load("Vigil ingest")) for _ in range(args.blocks)]
        for n, label in enumerate(ROUND_ORDER * args.blocks, start=1):
            tag = f"{label[0]}{n}"
            result = (bare_round(f"baseline {n}", tag, per_round) if label == "baseline"
                      else vigil_round(f"Vigil {n}", tag, per_round))
            (base if label == "baseline" else ingest).add(result)
            blocks[(n - 1) // len(ROUND_ORDER)][0 if label == "baseline" else 1].add(result)
            print(f"  {result.name}: {result.accepted} in {result.wall:.2f}s = {result.rate:.0f}/s, "
                  f"p50 {pct(result.latencies, 50):.1f} ms, p99 {pct(result.latencies, 99):.1f} ms"
                  + (f", errors {dict(result.errors)}" if result.errors else ""), flush=True)

        print("resuming the worker; timing its drain of the backlog …", flush=True)
        drained, worker_cpu0, drain0 = unprocessed(db), tree_cpu(worker.pid), time.perf_counter()
        drain_pg0 = db.backend_cpu()
        signal_group(worker, signal.SIGCONT)
        paused.remove(worker)
        wait_processed(db, procs, 300)
        drain_wall = time.perf_counter() - drain0
        drain = (drained, drain_wall, tree_cpu(worker.pid) - worker_cpu0)
        drain_pg = pg_cpu_since(db, drain_pg0)
        print(f"  {drained} deliveries processed in {drain_wall:.2f}s = {drained / drain_wall:.0f}/s", flush=True)
        signal_group(scheduler, signal.SIGCONT)
        paused.remove(scheduler)

        live = vigil_round("Vigil live", "vl", half, worker.pid)
        print(f"  Vigil with its worker running: {live.accepted} in {live.wall:.2f}s = {live.rate:.0f}/s, "
              f"p50 {pct(live.latencies, 50):.1f} ms, p99 {pct(live.latencies, 99):.1f} ms", flush=True)
        wait_processed(db, procs, 300)

        if args.profile:
            print("profiling (py-spy, unmeasured round): web process under load …", flush=True)
            signal_group(worker, signal.SIGSTOP)
            paused.append(worker)
            profiler = Profiler("web", web.pid, procs)
            vigil_round("profiled", "pw", half)
            profiles.append("## Vigil web process, ingest round (worker paused)\n\n" + profiler.stop())
            print("  … and the worker draining it", flush=True)
            profiler = Profiler("worker", worker.pid, procs)
            signal_group(worker, signal.SIGCONT)
            paused.remove(worker)
            wait_processed(db, procs, 300)
            profiles.append("## Vigil worker, draining that backlog\n\n" + profiler.stop())

        print(f"wake latency: SSE client on /api/events, {args.rate:g} deliveries/s for {args.paced_seconds:g}s …",
              flush=True)
        stream = EventStream(port, token, set(links), re.compile(rf"tib-{run}-(?:ls|lq)\d+"))
        if not stream.connected.wait(10):
            raise BenchError("the event stream did not say it was connected")
        time.sleep(0.5)
        steady = paced(f"{args.rate:g}/s", run, "ls", vigil_urls, int(args.rate * args.paced_seconds), 1 / args.rate)
        accepted += len(steady.sent)
        collect(steady, run, "ls", stream, db, procs)
        sparse = None
        if args.sparse:
            print(f"  {args.sparse} deliveries 1.5 s apart (an idle worker) …", flush=True)
            time.sleep(1.5)
            sparse = paced("1 per 1.5 s", run, "lq", vigil_urls, args.sparse, 1.5)
            accepted += len(sparse.sent)
            collect(sparse, run, "lq", stream, db, procs)
        stream_events = stream
        wait_processed(db, procs, 60)
        checks, _ = verify(db, accepted, links)
        for phase in (steady, sparse) if sparse else (steady,):
            complete = len(phase.stored) == len(phase.streamed) == len(phase.sent)
            checks.append(f"paced {phase.name}: {len(phase.sent)} accepted, {len(phase.stored)} wakes found stored, "
                          f"{len(phase.streamed)} `message.created` events received"
                          + ("" if complete else " (WARNING: some never arrived)"))
        if stream.duplicates:
            checks.append(f"WARNING: {stream.duplicates} wakes arrived twice on the stream")
        if stream.error:
            checks.append(f"WARNING: the event stream failed: {stream.error}")
        checks.append(f"whole run {time.monotonic() - started:.0f}s")
        text_out = report(args, header, versions(), base, ingest, blocks, live, drain, drain_pg, steady, sparse,
                          checks, stream_events)
    except (KeyboardInterrupt, BenchError) as exc:
        return failed(exc)
    finally:
        hold_signals()
        if stream is not None:
            stream.close()
        for proc in paused:  # a stopped process group would not see its SIGTERM
            signal_group(proc, signal.SIGCONT)
        procs.stop()
        if db is not None:
            db.close()
        with contextlib.suppress(Exception):
            redis.Redis.from_url(REDIS_URL).flushdb()
    if profiles:
        profile_text = "\n\n".join(profiles) + "\n"
        (RESULTS / "trigger_ingest_profile.md").write_text(profile_text)
        text_out += "\nProfiles (py-spy) are in bench/results/trigger_ingest_profile.md.\n"
    return publish("trigger_ingest.md", text_out)


if __name__ == "__main__":
    sys.exit(main())
