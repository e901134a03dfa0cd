#!/usr/bin/env python
"""Dry run: `monitor_create` with `"dry_run": true` answers as fast as a real create of the same page monitor and
writes nothing to the database.

    .venv/bin/python bench/dry_run.py [--calls 200] [--blocks 2]

A dry run validates the call, reads the page once (the same gate and timeout as a create's first check) and
evaluates the check on it, then answers would_fire and a forecast (models/dry_run.py). So its answer should take
about as long as a real create's, whose first check reads the page the same way and then stores the monitor; and
it should write no row at all. Vigil: `vigil web` (1 process; no worker or scheduler is needed, a create's first
check runs in the web process) on PostgreSQL (database vigil_bench_dryrun, created if missing, schema recreated)
and Redis db 11 (flushed; the bench refuses to start while another client uses it), FETCH_ALLOW_LOOPBACK=true so
that the pages may be on 127.0.0.1, the armed-monitor caps raised so that no create is refused. The pages are
bench/pages.py's (~5 KB, never changing), in a process of their own; the i-th dry call and the i-th real create
watch the same page /p/<i> with the same arguments.
Rounds dry, real, real, dry, `--blocks` times, the calls one at a time from one keep-alive client (`--calls` of
each in all). Rows written are pg_stat_user_tables' inserts + updates + deletes, read after an 11 s wait
(PostgreSQL flushes an idle backend's counters up to 10 s late) before and after the first dry round and the first
real round; the monitors' count is also read before and after every dry round. Nothing asserts on time.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
import requests  # noqa: E402

from bench import common  # noqa: E402
from bench.common import (  # noqa: E402
    PYTHON, RESULTS, VIGIL, BenchError, Db, clean_up, failed, figure, free_port, prepare, publish, record, run_notes,
    versions, wait_listening,
)
from bench.time_docs_parts import pct, require  # noqa: E402
from bench.trigger_parts import fmt  # noqa: E402
from bench.wake_push import owner_token  # noqa: E402

DB_NAME = "vigil_bench_dryrun"
REDIS_DB = 11  # as bench/wake_push.py --coalesce: the two are not run at once (each refuses a used db)
REDIS_URL = f"redis://127.0.0.1:6379/{REDIS_DB}"
EMAIL = "dry-run-bench@example.com"
CONVERSATION = "dry-run-bench"
WEB, PAGES = "dry-web", "dry-pages"
ROUND_ORDER = ("dry", "real", "real", "dry")
#: unmeasured calls of each kind first (the pools' connections, the token's first use, the conversation)
WARM = 5
#: PostgreSQL's backends report their counters when idle, at most this late (PGSTAT_IDLE_INTERVAL 10 s)
STATS_WAIT = 11


def vigil_env(port: int) -> dict:
    return {"DATABASE_URL": common.database_url(DB_NAME), "REDIS_URL": REDIS_URL, "LOG_LEVEL": "WARNING",
            "PUBLIC_API_BASE_URL": f"http://127.0.0.1:{port}", "FETCH_ALLOW_LOOPBACK": "true",
            "API_RATE_PER_MINUTE": "1000000", "MONITOR_MAX_ARMED_PER_CONVERSATION": "100000",
            "MONITOR_MAX_ARMED_PER_ACCOUNT": "100000",
            "SECRET_KEY": "bench-only-secret-key-not-used-for-anything-real", "VIGIL_DATA_DIR": str(RESULTS / "var")}


@dataclass
class Run:
    calls: int
    blocks: int
    base: str = ""
    pages: str = ""
    token: str = ""
    db: Db | None = None
    latency: dict[str, list[float]] = field(default_factory=lambda: {"dry": [], "real": []})
    made: dict[str, int] = field(default_factory=lambda: {"dry": 0, "real": 0})   # the next page of each kind
    writes: dict[str, dict[str, int]] = field(default_factory=dict)               # kind → {table: rows written}
    counted: dict[str, int] = field(default_factory=dict)                         # kind → calls the writes are of
    monitors_by_dry: int = 0      # monitors stored across every dry round (goal 0)
    would_fire: int = 0
    errors: list[str] = field(default_factory=list)


def start(procs, r: Run) -> None:
    rds = redis.Redis.from_url(REDIS_URL)
    others = [c["addr"] for c in rds.client_list() if c.get("db") == str(REDIS_DB) and c["id"] != str(rds.client_id())]
    require(not others, f"Redis db {REDIS_DB} is in use by {len(others)} other client(s); stop them, or change "
            "REDIS_DB")
    common.fresh_database(DB_NAME)
    rds.flushdb()
    port, pages_port = free_port(), free_port()
    env = vigil_env(port)
    r.token = owner_token(env, EMAIL)
    r.db = Db(DB_NAME, "dry-run-bench")
    procs.start(WEB, [VIGIL, "web", "--host", "127.0.0.1", "--port", str(port)], env)
    procs.start(PAGES, [PYTHON, "-m", "bench.pages", "--count", str(r.calls + WARM), "--port", str(pages_port)])
    wait_listening(port, procs)
    wait_listening(pages_port, procs)
    r.base, r.pages = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{pages_port}"


def call(session: requests.Session, r: Run, kind: str) -> float:
    """One monitor_create of the kind's next page; seconds to the answer."""
    page = r.made[kind]
    r.made[kind] += 1
    arguments = {"description": f"page {page} changes", "on_match": "Tell the user.",
                 "source": {"type": "page", "url": f"{r.pages}/p/{page}"}, **({"dry_run": True} if kind == "dry" else {})}
    began = time.perf_counter()
    answer = session.post(f"{r.base}/api/tool/monitor", headers={"Authorization": f"Bearer {r.token}"}, json={
        "action": "monitor_create", "context": {"conversation_id": CONVERSATION, "channel": "chat", "agent_id": "bench"},
        "arguments": arguments}, timeout=60)
    took = time.perf_counter() - began
    body = answer.json()
    result = body.get("result") or {}
    if answer.status_code != 200 or not body.get("ok") or (kind == "dry") != bool(result.get("dry_run")):
        r.errors.append(f"{kind} {page}: {answer.status_code} {str(body)[:200]}")
    r.would_fire += bool(result.get("would_fire"))
    return took


def written(db: Db) -> dict[str, int]:
    """Rows inserted + updated + deleted so far, by table, once the backends have reported them."""
    time.sleep(STATS_WAIT)
    return dict(db.query("SELECT relname, n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_user_tables"))


def rounds(r: Run) -> None:
    per_round = max(1, r.calls // (2 * r.blocks))
    with requests.Session() as session:
        session.trust_env = False
        r.made = {"dry": r.calls, "real": r.calls}  # the warm-up watches the last pages, the measured calls the rest
        for kind in ("dry", "real") * WARM:
            call(session, r, kind)
        r.made, r.would_fire = {"dry": 0, "real": 0}, 0
        print(f"warm-up done; {r.blocks} blocks of rounds {', '.join(ROUND_ORDER)}, {per_round} calls a round …",
              flush=True)
        before = written(r.db)
        for n, kind in enumerate(ROUND_ORDER * r.blocks):
            monitors = r.db.scalar("SELECT count(*) FROM monitors")
            r.latency[kind] += [call(session, r, kind) for _ in range(per_round)]
            if kind == "dry":
                r.monitors_by_dry += r.db.scalar("SELECT count(*) FROM monitors") - monitors
            if kind not in r.writes:  # the first round of each kind: its rows written
                after = written(r.db)
                r.writes[kind] = {t: after[t] - before.get(t, 0) for t in after if after[t] != before.get(t, 0)}
                r.counted[kind], before = per_round, after
            print(f"  {kind} {n + 1}: {per_round} calls", flush=True)


def per_call(r: Run, kind: str) -> float:
    return sum(r.writes[kind].values()) / r.counted[kind]


def figures(r: Run) -> list[dict]:
    dry, real = r.latency["dry"], r.latency["real"]
    ms = lambda v, p: fmt(1000 * pct(v, p))  # noqa: E731
    return [
        figure(f"monitor_create answer p50 / p99, dry_run vs a real create of the same page monitor "
               f"({len(dry)} + {len(real)} calls)", f"{ms(dry, 50)} / {ms(dry, 99)} ms",
               f"{ms(real, 50)} / {ms(real, 99)} ms", pct(dry, 99) / pct(real, 99), "≈ 1 (p99)"),
        figure("database rows written per call (pg_stat_user_tables), dry_run vs real create",
               fmt(per_call(r, "dry"), 2), fmt(per_call(r, "real"), 2), None, "0 vs ≥ 1",
               per_call(r, "dry") == 0 and per_call(r, "real") >= 1 and r.monitors_by_dry == 0 and not r.errors),
    ]


def report(args, header: list[str], vers: str, r: Run, notes: list[str]) -> str:
    rows = figures(r)
    record("dry_run", rows)
    met = {True: "yes", False: "NO", None: "—"}
    dry, real = r.latency["dry"], r.latency["real"]

    def line(label: str, values: list[float]) -> str:
        return (f"| {label} | {len(values)} | {fmt(1000 * pct(values, 50))} | {fmt(1000 * pct(values, 90))} | "
                f"{fmt(1000 * pct(values, 99))} | {fmt(1000 * max(values, default=float('nan')))} |")
    tables = lambda kind: ", ".join(f"{t} {n}" for t, n in sorted(r.writes[kind].items())) or "none"  # noqa: E731
    return "\n".join([
        "# Vigil dry run: monitor_create with dry_run beside a real create of the same page monitor", "",
        *header, f"- {vers}",
        f"- `vigil web` (1 process, no worker or scheduler); PostgreSQL database {DB_NAME}, Redis db {REDIS_DB}; "
        f"FETCH_ALLOW_LOOPBACK=true; ~5 KB pages from bench/pages.py in its own process; one keep-alive client, one "
        f"call at a time; rounds {', '.join(ROUND_ORDER)} × {args.blocks}", "",
        "| answer | n | p50 ms | p90 ms | p99 ms | max ms |", "|---|---:|---:|---:|---:|---:|",
        line("**dry_run: true**", dry), line("**real create**", real), "",
        f"- rows written over the first dry round ({r.counted['dry']} calls): {tables('dry')}",
        f"- rows written over the first real round ({r.counted['real']} calls): {tables('real')}",
        f"- monitors stored during the dry rounds: {r.monitors_by_dry}; dry runs that answered would_fire: "
        f"{r.would_fire} of {len(dry)} (a change check's first reading is its baseline)", "",
        "| figure | Vigil | baseline | ratio | goal | met? |", "|---|---:|---:|---:|---:|:---:|",
        *[f"| {x['figure']} | {x['vigil']} | {x['baseline']} | "
          f"{'—' if x['ratio'] is None else format(x['ratio'], '.2f')} | {x['goal']} | {met[x['met']]} |"
          for x in rows], "",
        "Checks:", "", f"- calls answered otherwise than ok: {len(r.errors)}" + (f", e.g. {r.errors[:2]}" if r.errors
                                                                                 else ""),
        *[f"- {note}" for note in notes]]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="dry runs, and as many real creates (default 200)")
    parser.add_argument("--blocks", type=int, default=2, help="blocks of rounds dry, real, real, dry (default 2)")
    args = parser.parse_args(argv)
    if args.blocks < 1 or args.calls < 2 * args.blocks:
        parser.error("--blocks ≥ 1 and at least one call a round (--calls ≥ 2 × --blocks)")
    header, procs = prepare()
    r, started = Run(args.calls, args.blocks), time.monotonic()
    try:
        print(f"setting up (database {DB_NAME}, Redis db {REDIS_DB}) …", flush=True)
        start(procs, r)
        rounds(r)
        text = report(args, header, versions(), r, run_notes(procs, (WEB, PAGES), started))
    except (KeyboardInterrupt, BenchError, subprocess.SubprocessError, requests.RequestException) as exc:
        return failed(exc)
    finally:
        clean_up(procs, REDIS_URL)
        if r.db is not None:
            r.db.close()
    return publish("dry_run.md", text)


if __name__ == "__main__":
    sys.exit(main())
