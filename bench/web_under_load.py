#!/usr/bin/env python
"""Web-under-load benchmark: do slow first checks stall the cheap paths of one web process?

    .venv/bin/python bench/web_under_load.py [--creates 100] [--slow-seconds 25] [--blocks 2] [--round-seconds 10]

One `vigil web` process (uvicorn, 1 process) on PostgreSQL (database vigil_bench_load, schema recreated) and
Redis (db 7, flushed), with Vigil's own defaults for the create pool (CREATE_CONCURRENCY 8, 2 per account,
CREATE_FETCH_TIMEOUT_SECONDS 10), the thread lanes (WEB_THREADS 16, WEB_PUBLIC_THREADS 8) and the header
deadline (WEB_HEADER_TIMEOUT_SECONDS 10); only the rate limits are raised, so that nothing is refused.
No worker runs: deliveries are stored and queued, never processed, so no worker competes for the CPUs.

Every round measures the same two things for --round-seconds: trigger deliveries (--concurrency client threads,
keep-alive sessions, unique Idempotency-Keys: deliveries/s and the 202's latency), and a process of its own
(this file with --sample-gets, away from the bench's GIL) that GETs `/approve/<token>`, `/login` and
`/api/monitors` (bearer token) in turn at a steady pace, on keep-alive connections opened before the round.
A quiet round has nothing else. A storm round first connects a slowloris client (one header byte a second,
reconnected whenever the server closes it), then fires --creates concurrent `monitor_create` calls from 20
accounts against a source (a thread of this bench) that answers after --slow-seconds, and measures while they
are in flight. Rounds go quiet, storm, storm, quiet, --blocks times (the machine's speed drifts within seconds).

Afterwards: how each create was answered and when, monitors stored for the slow accounts (none may be
half-created), deliveries stored against 202s received, and errors in the web log. Storm figures are reported
as ratios to the quiet rounds of this same run; nothing asserts on time. See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from adapters.settings import Settings  # noqa: E402
from bench import common  # noqa: E402
from bench.common import (  # noqa: E402
    VIGIL, BenchError, Db, Processes, clean_up, failed, free_port, prepare, publish, tree_cpu, versions,
    wait_listening,
)
from bench.load_parts import (  # noqa: E402
    DATABASE_URL, DB_NAME, GETS, REDIS_URL, ROUND_ORDER, SLOW_ACCOUNTS, WEBHOOKS, Round, Sampler, Setup, SlowSource,
    Slowloris, Triggers, deliver, fire_creates, in_flight, serve_sampler, session,
)
from bench.load_report import report  # noqa: E402
from bench.quiet_checks import VIGIL_ENV  # noqa: E402
from bench.trigger_parts import pct  # noqa: E402
from tests.processes import vigil as vigil_command  # noqa: E402

WEB = "load-web"  # process and log name: another benchmark may be running with its own
OWNER = "load-owner@bench.example"
PASSWORD = "bench-password-not-secret"
LOG_ERRORS = re.compile(r"MaxConnectionsExceeded|pool|Traceback|ERROR|Exception", re.IGNORECASE)


def vigil_env(port: int) -> dict:
    return {
        "DATABASE_URL": DATABASE_URL, "REDIS_URL": REDIS_URL, "PUBLIC_API_BASE_URL": f"http://127.0.0.1:{port}",
        "LOG_LEVEL": "WARNING", "FETCH_ALLOW_LOOPBACK": "true",
        # nothing the bench does may be refused by a rate or hit limit
        "API_RATE_PER_MINUTE": "1000000", "TRIGGER_RATE_PER_MINUTE": "1000000", "TRIGGER_MAX_HITS": "1000000",
        "SECRET_KEY": VIGIL_ENV["SECRET_KEY"], "VIGIL_DATA_DIR": VIGIL_ENV["VIGIL_DATA_DIR"],
    }


def measure(s: Setup, r: Round, tag: str) -> None:
    """The trigger load and the GET sampler side by side for --round-seconds; the web process's CPU meanwhile."""
    cpu0 = tree_cpu(s.web_pid)
    s.sampler.start(s.args.round_seconds, s.args.get_interval)
    deliver(s.links, s.args.round_seconds, s.args.concurrency, tag, r.triggers)
    s.sampler.collect(r)
    r.web_cpu = tree_cpu(s.web_pid) - cpu0


def quiet_round(s: Setup, n: int) -> Round:
    r = Round("quiet", n)
    s.source.wait_idle()
    s.sampler.open()
    measure(s, r, f"{s.run}-q{n}")
    return r


def storm_round(s: Setup, n: int) -> Round:
    """Slowloris connected, then --creates calls fired at once; measured while they are in flight."""
    r = Round("storm", n)
    s.source.wait_idle()
    requests0 = s.source.requests
    r.slowloris = Slowloris(s.port)
    loris_deadline = time.monotonic() + s.settings.WEB_HEADER_TIMEOUT_SECONDS + 3
    time.sleep(1.0)
    s.sampler.open()
    r.creates, threads = fire_creates(s.base, s.accounts, s.source, s.args.creates, f"{s.run}-s{n}")
    start = time.monotonic()
    measure(s, r, f"{s.run}-s{n}")
    r.in_flight = in_flight(r.creates, start, time.monotonic())
    for thread in threads:
        thread.join(90)
    r.slowloris.wait_closed(loris_deadline)  # a round shorter than the header deadline still sees it act
    r.slowloris.stop()
    r.source_requests = s.source.requests - requests0
    return r


def progress(r: Round) -> str:
    t = r.triggers
    line = (f"  {r.kind} {r.n}: {t.accepted} deliveries in {t.wall:.1f}s = {t.rate:.0f}/s, 202 p50 "
            f"{pct(t.latencies, 50):.1f} ms p99 {pct(t.latencies, 99):.1f} ms; GET p99 "
            + ", ".join(f"{name} {pct(r.gets[name], 99):.0f}" for name in GETS) + " ms")
    if r.kind == "storm":
        kinds = Counter(c.kind for c in r.creates)
        slowest = max((c.seconds for c in r.creates), default=float("nan"))
        line += (f"; creates {dict(kinds)}, slowest {slowest:.2f}s, {r.in_flight:.1f} in flight on average; "
                 f"slowloris held {', '.join(f'{h:.1f}' for h in r.slowloris.held) or 'never closed'} s")
    errors = r.triggers.errors + r.get_errors
    return line + (f"; errors {dict(errors)}" if errors else "")


# ----------------------------------------------------------------------------------------------
# set-up


def make_accounts(n: int) -> list[tuple[int, str]]:
    """The owner (first) and n slow-create accounts, each with a runtime token: (user id, token). Made in this
    process with the functions `vigil user create` and `vigil token create` call (40 CLI runs would take long)."""
    from models import connection, database
    from models.accounts import create_token, create_user
    from models.db import bind

    bind(DATABASE_URL, max_connections=2)
    emails = [OWNER] + [f"load-slow-{i}@bench.example" for i in range(n)]
    with connection():
        accounts = [(create_user(email, PASSWORD).id, create_token(email, "bench")) for email in emails]
    with contextlib.suppress(AttributeError):
        database.obj.close_all()
    return accounts


def tool_create(base: str, token: str, conversation: str, arguments: dict) -> dict:
    with session() as s:
        response = s.post(f"{base}/api/tool/monitor", headers={"Authorization": f"Bearer {token}"}, timeout=30,
                          json={"action": "monitor_create", "context": {"conversation_id": conversation},
                                "arguments": arguments})
    body = response.json()
    if response.status_code != 200 or not body.get("ok"):
        raise BenchError(f"monitor_create failed: {response.status_code} {body}")
    return body["result"]


def owner_monitors(base: str, token: str) -> tuple[list[str], str]:
    """WEBHOOKS unsigned webhook monitors (their trigger links) and one approval monitor (its page)."""
    links = [tool_create(base, token, f"load-owner-{i}", {
        "description": f"deploy {i} finishes", "source": {"type": "webhook", "signature": "none",
                                                          "max_hits": 1_000_000}})["url"] for i in range(WEBHOOKS)]
    approval = tool_create(base, token, "load-owner-approval", {
        "description": "the release is approved", "source": {"type": "approval", "question": "Ship it?"}})
    return links, approval["approval_url"]


def start_web(procs: Processes) -> tuple[int, dict]:
    port = free_port()
    env = vigil_env(port)
    try:
        vigil_command("migrate", env=env)
    except AssertionError as exc:
        raise BenchError(str(exc)) from None
    procs.start(WEB, [VIGIL, "web", "--host", "127.0.0.1", "--port", str(port)], env)
    wait_listening(port, procs)
    return port, env


def set_up(args, procs: Processes, source: SlowSource) -> Setup:
    common.fresh_database(DB_NAME)
    redis.Redis.from_url(REDIS_URL).flushdb()
    port, env = start_web(procs)
    base = f"http://127.0.0.1:{port}"
    accounts = make_accounts(SLOW_ACCOUNTS)
    owner_token = accounts[0][1]
    links, approval_url = owner_monitors(base, owner_token)
    targets = {"approve": (approval_url, {}), "login": (f"{base}/login", {}),
               "monitors": (f"{base}/api/monitors", {"Authorization": f"Bearer {owner_token}"})}
    web_pid = next(proc.pid for name, proc in procs.started if name == WEB)
    sampler = Sampler(targets, procs.logs)
    return Setup(args, base, port, web_pid, links, sampler, accounts[1:], source, uuid.uuid4().hex[:8],
                 Settings.from_env({**os.environ, **env}))


# ----------------------------------------------------------------------------------------------
# checks


def half_created(db: Db, rounds: list[Round], accounts: list[tuple[int, str]]) -> tuple[int, int, int]:
    """(monitors stored for the slow accounts, creates answered ok, conversations the calls made)."""
    ids = [user_id for user_id, _ in accounts]
    stored = db.scalar("SELECT count(*) FROM monitors WHERE user_id = ANY(%s)", (ids,))
    conversations = db.scalar("SELECT count(*) FROM conversations WHERE user_id = ANY(%s)", (ids,))
    created = sum(c.kind == "created" for r in rounds for c in r.creates)
    return stored, created, conversations


def web_log_errors(procs: Processes) -> list[str]:
    path = procs.logs / f"{WEB}.log"
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    return [line for line in lines if LOG_ERRORS.search(line)]


def checks(s: Setup, db: Db, rounds: list[Round], warm: Triggers, procs: Processes) -> tuple[list[str], int]:
    """The report's check lines, and how many monitors are half-created (stored without an ok answer, or
    answered ok and not stored)."""
    s.source.wait_idle()
    time.sleep(1.0)  # a create whose fetch just ended would store now, if it were going to
    stored, created, conversations = half_created(db, rounds, s.accounts)
    deliveries = db.scalar("SELECT count(*) FROM deliveries")
    accepted = warm.accepted + sum(r.triggers.accepted for r in rounds)
    errors = web_log_errors(procs)
    lines = [f"monitors stored for the {len(s.accounts)} slow-create accounts: {stored}; creates answered ok: "
             f"{created} ({'OK, nothing half-created' if stored == created else 'WARNING: HALF-CREATED MONITORS'}); "
             f"conversations those calls made: {conversations}",
             f"deliveries stored {deliveries:,}, 202s received {accepted:,}"
             + ("" if deliveries == accepted else " (WARNING: they differ)"),
             f"web log lines matching {LOG_ERRORS.pattern}: {len(errors)}"
             + "".join(f"\n  - `{line[:300]}`" for line in errors[:10])]
    return lines, abs(stored - created)



def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="One web process: cheap paths while slow first checks are in flight.")
    parser.add_argument("--creates", type=int, default=100, help="monitor_create calls per storm round (default 100)")
    parser.add_argument("--slow-seconds", type=float, default=25.0,
                        help="how long the slow source takes to answer (default 25)")
    parser.add_argument("--blocks", type=int, default=2, help="blocks of rounds quiet, storm, storm, quiet (default 2)")
    parser.add_argument("--round-seconds", type=float, default=10.0,
                        help="length of each round's measurement (default 10: the creates' deadline)")
    parser.add_argument("--concurrency", type=int, default=16, help="trigger client threads (default 16)")
    parser.add_argument("--get-interval", type=float, default=0.03,
                        help="seconds between two sampled GETs (default 0.03; the three paths take turns)")
    parser.add_argument("--sample-gets", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.creates, args.blocks, args.concurrency) < 1 or args.round_seconds <= 0 or args.get_interval <= 0:
        parser.error("--creates, --blocks and --concurrency must be at least 1, the times more than 0")
    return args


def warm_up(s: Setup) -> Triggers:
    """Two seconds of the round's load, not measured."""
    warm = Round("warm-up", 0)
    s.sampler.open()
    s.sampler.start(2.0, s.args.get_interval)
    deliver(s.links, 2.0, s.args.concurrency, f"{s.run}-w", warm.triggers)
    s.sampler.collect(warm)
    if warm.get_errors or warm.triggers.errors:
        raise BenchError(f"errors in the warm-up: {dict(warm.get_errors + warm.triggers.errors)}")
    return warm.triggers


def run_rounds(s: Setup, procs: Processes) -> list[Round]:
    rounds = []
    for n, kind in enumerate(ROUND_ORDER * s.args.blocks, start=1):
        r = storm_round(s, n) if kind == "storm" else quiet_round(s, n)
        rounds.append(r)
        print(progress(r), flush=True)
        procs.check_alive()
    return rounds


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.sample_gets:
        return serve_sampler()
    header, procs = prepare()
    source: SlowSource | None = None
    s: Setup | None = None
    db: Db | None = None
    started = time.monotonic()
    try:
        print(f"setting up (database {DB_NAME}, Redis db 7, one vigil web) …", flush=True)
        source = SlowSource(args.slow_seconds)
        s = set_up(args, procs, source)
        db = Db(DB_NAME, "load-bench")
        warm = warm_up(s)
        rounds = run_rounds(s, procs)
        check_lines, half = checks(s, db, rounds, warm, procs)
        check_lines.append(f"whole run {time.monotonic() - started:.0f}s")
        text = report(s, header, versions(), rounds, check_lines, half)
    except (KeyboardInterrupt, BenchError) as exc:
        return failed(exc)
    finally:
        clean_up(procs, REDIS_URL)
        if s is not None:
            s.sampler.stop()
        if db is not None:
            db.close()
        if source is not None:
            source.close()
    return publish("web_under_load.md", text)


if __name__ == "__main__":
    sys.exit(main())
