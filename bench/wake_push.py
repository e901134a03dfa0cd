#!/usr/bin/env python
"""Wake push: how long a stored wake takes to reach the runtime's receiver as a Standard Webhooks message, at
20 wakes/s, beside a bare signed POST to the same receiver.

    .venv/bin/python bench/wake_push.py [--rate 20] [--seconds 24] [--blocks 2] [--monitors 20]
        [--worker-timeout 100] [--trace]

Vigil runs as in production: `vigil web` (1 process), `python -m dramatiq tasks.main --processes 1 --threads 4`
(dramatiq_worker_timeout 100, as `vigil worker` runs it), `vigil scheduler`, on PostgreSQL (database
vigil_bench_push, created if missing, schema recreated) and Redis (db 5, flushed; the bench refuses to start while
another client uses that db), FETCH_ALLOW_LOOPBACK=true so that the push may go to 127.0.0.1.

The receiver is a ThreadingHTTPServer of its own process (HTTP/1.1 keep-alive): it notes when each POST's body
has been read and answers 200 at once, then verifies the signature with `standardwebhooks`. The runtime registers
it with `POST /api/wake-endpoints` (runtime token) and hands it the secret; `--monitors` unsigned webhook monitors
are made through the tool endpoint, and their trigger URLs are POSTed at `--rate`/s (one keep-alive client, one
delivery at a time, on a fixed schedule). Each delivery wakes its monitor, and the wake is pushed.
Measured: the wake's `created_at` as the pushed body carries it (`data.message.created_at`, stamped by the worker
just before the wake's commit) → the receiver had the body (same machine clock). Baseline, same run: a bare loop
POSTing a body of the same shape and size, built and signed with `standardwebhooks`, from one keep-alive
`requests.Session`, at the same rate, to the same receiver; send → the receiver had it. Rounds baseline, Vigil,
Vigil, baseline, `--blocks` times (`--seconds` of Vigil's wakes in all, as many baseline POSTs).
The breakdown reads every stage's time back from the tables (deliveries, messages, wake_pushes, wake_attempts);
`--trace` adds the two queue hops (when Redis ran each enqueue, and the consumer's fetch that took it) from a Redis
MONITOR the bench reads, which costs CPU: compare a traced run's latencies with an untraced one's.
`--worker-timeout MS` starts the worker with another dramatiq_worker_timeout (its longest idle sleep between polls).
`--coalesce` runs the coalescing case instead (bench/wake_push_coalesce.py, on this module's stack).
Nothing asserts on time; the figures and how to read them are in docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
import requests  # noqa: E402

from bench import common  # noqa: E402
from bench.common import (  # noqa: E402
    PYTHON, RESULTS, VIGIL, BenchError, Db, Processes, clean_up, failed, figure, free_port, prepare, publish,
    record, run_notes, tree_cpu, versions, wait_listening,
)
from bench.time_docs_parts import pct, require, wait_for  # noqa: E402
from bench.trigger_parts import fmt, paced  # noqa: E402
from bench.wake_push_parts import (  # noqa: E402
    BASELINE_PATH, VIGIL_PATH, Baseline, Receiver, RedisTrace, Wake, baseline_round, gaps, markers_in, new_secret,
    read_wakes, serve_receiver,
)
from tests.processes import vigil as vigil_command  # noqa: E402

DB_NAME = "vigil_bench_push"
DATABASE_URL = common.database_url(DB_NAME)
REDIS_DB = 5
REDIS_URL = f"redis://127.0.0.1:6379/{REDIS_DB}"
EMAIL = "push-bench@example.com"
CONVERSATION = "push-bench-"
#: process (and log file) names: another benchmark may be running at the same moment with its own
WEB, WORKER, SCHEDULER, RECEIVER = "push-web", "push-worker", "push-scheduler", "push-receiver"
GOAL_MS = 250.0
ROUND_ORDER = ("baseline", "Vigil", "Vigil", "baseline")
#: unmeasured deliveries first (and as many baseline POSTs): the worker's first push opens its connection
WARM = 20
#: seconds the idle worker's CPU is read for, before anything is sent
IDLE_SECONDS = 3


def vigil_env(port: int, worker_timeout: int = 100) -> dict:
    return {"DATABASE_URL": DATABASE_URL, "REDIS_URL": REDIS_URL, "LOG_LEVEL": "WARNING",
            "PUBLIC_API_BASE_URL": f"http://127.0.0.1:{port}", "dramatiq_worker_timeout": str(worker_timeout),
            "FETCH_ALLOW_LOOPBACK": "true",  # the receiver is on 127.0.0.1
            "MONITOR_MAX_ARMED_PER_CONVERSATION": "1000", "MONITOR_MAX_ARMED_PER_ACCOUNT": "1000",
            # no link, wake or hit limit may refuse or pause anything during the run
            "TRIGGER_RATE_PER_MINUTE": "10000000", "MONITOR_MAX_WAKES": "100000",
            "MONITOR_MAX_WAKES_PER_HOUR": "1000000", "MONITOR_MAX_FIRES_PER_CONVERSATION_DAY": "1000000",
            "TRIGGER_MAX_HITS": "1000000", "API_RATE_PER_MINUTE": "1000000",
            "SECRET_KEY": "bench-only-secret-key-not-used-for-anything-real", "VIGIL_DATA_DIR": str(RESULTS / "var")}


@dataclass
class Stack:
    procs: Processes
    db: Db | None = None
    port: int = 0
    token: str = ""
    pids: dict = field(default_factory=dict)
    receiver: Receiver | None = None
    secret: str = ""
    links: dict[str, str] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def start_vigil(s: Stack, worker_timeout: int) -> None:
    rds = redis.Redis.from_url(REDIS_URL)
    me = rds.client_id()
    others = [c["addr"] for c in rds.client_list() if c.get("db") == str(REDIS_DB) and c["id"] != str(me)]
    require(not others, f"Redis db {REDIS_DB} is in use by {len(others)} other client(s) ({', '.join(others[:3])}): "
            "another Vigil's worker there would take this bench's messages; stop it, or change REDIS_DB")
    common.fresh_database(DB_NAME)
    rds.flushdb()
    s.port = free_port()
    env = vigil_env(s.port, worker_timeout)
    s.token = owner_token(env, EMAIL)
    s.db = Db(DB_NAME, "push-bench")
    receiver_port = free_port()
    for name, args in ((WEB, [VIGIL, "web", "--host", "127.0.0.1", "--port", str(s.port)]),
                       (WORKER, [PYTHON, "-m", "dramatiq", "tasks.main", "--processes", "1", "--threads", "4"]),
                       (SCHEDULER, [VIGIL, "scheduler"]),
                       (RECEIVER, [PYTHON, str(Path(__file__).resolve()), "--serve-receiver",
                                   "--port", str(receiver_port)])):
        s.pids[name] = s.procs.start(name, args, env if name != RECEIVER else None).pid
    wait_listening(s.port, s.procs)
    wait_listening(receiver_port, s.procs)
    s.receiver = Receiver(receiver_port)


def owner_token(env: dict, email: str) -> str:
    """The schema (`vigil migrate`), an owner and a runtime token of theirs, as the CLI makes them."""
    try:
        vigil_command("migrate", env=env)
        vigil_command("user", "create", email, "--password", "bench-password-not-secret", env=env)
        return vigil_command("token", "create", "--user", email, env=env).strip().splitlines()[-1]
    except AssertionError as exc:
        raise BenchError(str(exc)) from None


def close_stack(s: Stack, procs: Processes, *readers) -> None:
    """The end of a run, however it ended: the bench's readers (a trace, a stream), the receiver, the processes."""
    for reader in readers:
        if reader is not None:
            reader.close()
    if s.receiver is not None:
        s.receiver.close()
    clean_up(procs, REDIS_URL)
    if s.db is not None:
        s.db.close()


def register(s: Stack) -> dict:
    """The runtime registers the receiver as its account's wake endpoint; the secret goes to the receiver."""
    answer = requests.post(f"{s.base}/api/wake-endpoints", headers={"Authorization": f"Bearer {s.token}"},
                           json={"url": s.receiver.url(VIGIL_PATH), "description": "bench receiver"}, timeout=30)
    body = answer.json()
    require(answer.status_code == 201 and str(body.get("secret", "")).startswith("whsec_"),
            f"POST /api/wake-endpoints answered {answer.status_code} {body}")
    s.secret = body["secret"]
    s.receiver.give_secret(VIGIL_PATH, s.secret)
    return body


def create_monitors(s: Stack, count: int, conversation: str = "", coalesce: int | None = None) -> dict[str, str]:
    """`count` unsigned webhook monitors through the tool endpoint, one conversation each, or all in
    `conversation` (with context.coalesce_seconds `coalesce` when given): {monitor id: url}."""
    links = {}
    extra = {} if coalesce is None else {"coalesce_seconds": coalesce}
    with requests.Session() as session:
        session.trust_env = False
        for i in range(count):
            answer = session.post(f"{s.base}/api/tool/monitor", headers={"Authorization": f"Bearer {s.token}"}, json={
                "action": "monitor_create",
                "context": {"conversation_id": conversation or f"{CONVERSATION}{i}", "channel": "chat",
                            "agent_id": "bench", **extra},
                "arguments": {"description": f"deploy {i} finishes", "on_match": "Tell the user.",
                              "source": {"type": "webhook", "signature": "none", "max_hits": 1_000_000},
                              "max_wakes": 100_000}}, timeout=30)
            body = answer.json()
            require(answer.status_code == 200 and body.get("ok"), f"monitor_create failed: {answer.status_code} {body}")
            result = body["result"]
            require(result["max_hits"] == 1_000_000 and result["wakes_left"] >= 100_000
                    and not any("capped" in note for note in result["notes"]), f"a limit was capped: {result}")
            links[result["monitor_id"]] = result["url"]
    return links


# ----------------------------------------------------------------------------------------------
# the rounds


@dataclass
class Run:
    rate: float
    run: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    template: dict | None = None
    sent: dict[str, tuple[float, float]] = field(default_factory=dict)   # Vigil: marker → (POST sent, 202)
    rounds: list[tuple[str, list[str]]] = field(default_factory=list)    # (kind, its markers or webhook-ids)
    baseline: Baseline = field(default_factory=lambda: Baseline("baseline"))
    baseline_secret: str = ""
    errors: Counter = field(default_factory=Counter)
    worker_cpu: float = 0.0
    web_cpu: float = 0.0
    busy_seconds: float = 0.0    # the Vigil rounds' wall time, for the idle share of worker_cpu
    idle_worker_cpu: float = 0.0  # the worker's CPU a second with nothing to do (its polls of Redis)
    wakes: dict[str, Wake] = field(default_factory=dict)
    records: dict[str, list[dict]] = field(default_factory=dict)  # the receiver's, by path, after the run


def arrived(s: Stack, run: str, path: str) -> set[str]:
    """Markers (Vigil; a coalesced push carries several) or webhook-ids (baseline) the receiver has got."""
    s.receiver.refresh()
    if path == BASELINE_PATH:
        return {rec["headers"].get("webhook-id") for rec in s.receiver.of(path)}
    return {m for rec in s.receiver.of(path) for m in markers_in(rec["body"], run)}


def vigil_round(s: Stack, r: Run, name: str, tag: str, count: int, measured: bool = True) -> None:
    """`count` trigger deliveries at the run's rate; then until the receiver has every accepted one's push."""
    worker0, web0, wall0 = tree_cpu(s.pids[WORKER]), tree_cpu(s.pids[WEB]), time.monotonic()
    out = paced(name, r.run, tag, list(s.links.values()), count, 1 / r.rate)
    wait_for(lambda: set(out.sent) <= arrived(s, r.run, VIGIL_PATH), f"the pushes of {name}", 30, s.procs.check_alive)
    if measured:
        r.worker_cpu += tree_cpu(s.pids[WORKER]) - worker0
        r.web_cpu += tree_cpu(s.pids[WEB]) - web0
        r.busy_seconds += time.monotonic() - wall0
        r.sent.update(out.sent)
        r.errors.update(out.errors)
        r.rounds.append(("Vigil", list(out.sent)))
    print(f"  {name}: {len(out.sent)} deliveries accepted" + (f", errors {dict(out.errors)}" if out.errors else ""),
          flush=True)


def bare_round(s: Stack, r: Run, name: str, tag: str, count: int, measured: bool = True) -> None:
    out = baseline_round(name, s.receiver.url(BASELINE_PATH), r.baseline_secret, r.template, r.run, tag, count,
                         1 / r.rate)
    wait_for(lambda: set(out.sent) <= arrived(s, r.run, BASELINE_PATH), f"the baseline POSTs of {name}", 10,
             s.procs.check_alive)
    if measured:
        r.baseline.sent.update(out.sent)
        r.baseline.errors.update(out.errors)
        r.rounds.append(("baseline", list(out.sent)))
    print(f"  {name}: {len(out.sent)} POSTs answered" + (f", errors {dict(out.errors)}" if out.errors else ""),
          flush=True)


def rounds(s: Stack, r: Run, seconds: float, blocks: int) -> None:
    print(f"warm-up: {WARM} deliveries and {WARM} baseline POSTs, not measured …", flush=True)
    vigil_round(s, r, "warm-up", "w", WARM, measured=False)
    first = next(rec for rec in s.receiver.of(VIGIL_PATH) if r.run in rec["body"])
    r.template = json.loads(first["body"])
    r.baseline_secret = new_secret()
    s.receiver.give_secret(BASELINE_PATH, r.baseline_secret)
    bare_round(s, r, "warm-up", "x", WARM, measured=False)
    cpu0, wall0 = tree_cpu(s.pids[WORKER]), time.monotonic()
    time.sleep(IDLE_SECONDS)
    r.idle_worker_cpu = (tree_cpu(s.pids[WORKER]) - cpu0) / (time.monotonic() - wall0)
    per_round = max(1, round(r.rate * seconds / (2 * blocks)))
    print(f"{blocks} blocks of rounds {', '.join(ROUND_ORDER)}, {per_round} wakes or POSTs a round at {r.rate:g}/s …",
          flush=True)
    for n, kind in enumerate(ROUND_ORDER * blocks):
        # letters only (the round's number as letters a–j): the marker ends in the delivery's number
        tag = ("v" if kind == "Vigil" else "b") + "".join(chr(ord("a") + int(d)) for d in str(n))
        (vigil_round if kind == "Vigil" else bare_round)(s, r, f"{kind} {n + 1}", tag, per_round)


# ----------------------------------------------------------------------------------------------
# report


def ms(values: list[float], p: float) -> str:
    return fmt(1000 * pct(values, p))


def row(label: str, values: list[float]) -> str:
    return (f"| {label} | {len(values):,} | {ms(values, 50)} | {ms(values, 90)} | {ms(values, 99)} | "
            f"{fmt(1000 * max(values, default=float('nan')))} |")


def headline(r: Run) -> tuple[list[float], list[float]]:
    """(Vigil: the body's created_at → the receiver had it; baseline: send → the receiver had it), seconds."""
    vigil = gaps(r.wakes.values(), "body_stored", "arrived")
    got = {rec["headers"].get("webhook-id"): rec["arrived"] for rec in r.records[BASELINE_PATH]}
    bare = [got[i] - sent for i, (sent, _) in r.baseline.sent.items() if i in got]
    return vigil, bare


def breakdown(r: Run, traced: bool) -> list[str]:
    w = r.wakes.values()
    rows = [row("trigger POST sent → 202 (the bench's client)", [x.post_answered - x.post_sent for x in w]),
            row("trigger POST sent → delivery stored (`deliveries.received_at`, web)",
                gaps(w, "post_sent", "received")),
            row("delivery stored → delivery actor began (`processed_at`: relay, Redis, the worker's poll)",
                gaps(w, "received", "processed"))]
    if traced:
        rows += [row("… delivery stored → Redis ran the relay's enqueue", gaps(w, "received", "d_enqueued")),
                 row("… enqueued → fetched by the worker's `deliveries` consumer", gaps(w, "d_enqueued", "d_fetched")),
                 row("… fetched → delivery actor began", gaps(w, "d_fetched", "processed"))]
    rows += [row("delivery actor began → wake stored (`messages.created_at`)", gaps(w, "processed", "stored")),
             row("wake stored → push actor's send() began (`next_attempt_at` − lease: commit, events, enqueue, "
                 "the worker's poll of `pushes`, `pushes_for`)", gaps(w, "stored", "claimed"))]
    if traced:
        rows += [row("… wake stored → Redis ran the enqueue of `push_message` (the rest of the transaction, "
                     "commit, building the events)", gaps(w, "stored", "p_enqueued")),
                 row("… enqueued → fetched by the worker's `pushes` consumer", gaps(w, "p_enqueued", "p_fetched")),
                 row("… fetched → send() began (a worker thread free, `pushes_for`)", gaps(w, "p_fetched", "claimed"))]
    return rows + [
        row("send() began → push POST began (`attempted_at` − `latency_ms`, ±1 ms: claim, loads, body, signing)",
            gaps(w, "claimed", "post_began")),
        row("push POST began → receiver had the body", gaps(w, "post_began", "arrived")),
        row("receiver had the body → attempt recorded (`attempted_at`)", gaps(w, "arrived", "recorded")),
        row("trigger POST sent → receiver had the push (end to end)", gaps(w, "post_sent", "arrived"))]


def per_round(r: Run) -> str:
    got = {rec["headers"].get("webhook-id"): rec["arrived"] for rec in r.records[BASELINE_PATH]}
    parts = []
    for kind, keys in r.rounds:
        if kind == "Vigil":
            values = gaps([r.wakes[k] for k in keys], "body_stored", "arrived")
        else:
            values = [got[k] - r.baseline.sent[k][0] for k in keys if k in got]
        parts.append(f"{kind} {ms(values, 99)}")
    return ", ".join(parts)


def checks(r: Run) -> tuple[list[str], bool]:
    w = list(r.wakes.values())
    stored = sum(1 for x in w if x.stored is not None)
    got = sum(1 for x in w if x.arrived is not None)
    doubled = sum(1 for x in w if x.pushes_received > 1)
    valid = sum(1 for x in w if x.valid)
    statuses = dict(Counter(x.status or "no push row" for x in w))
    retried = sum(1 for x in w if x.attempts > 1)
    same_time = sum(1 for x in w if x.body_stored is not None and x.stored is not None
                    and abs(x.body_stored - x.stored) < 1e-5)
    bare_records = r.records[BASELINE_PATH]
    bare_valid = sum(1 for rec in bare_records if rec["valid"] and rec["headers"].get("webhook-id") in r.baseline.sent)
    bad = [rec["error"] for rec in r.records[VIGIL_PATH] if rec["valid"] is False][:3]
    ok = len(w) == stored == got == valid and not doubled and statuses == {"delivered": len(w)} and not r.errors
    lines = [f"{len(w):,} deliveries accepted, {stored:,} wakes stored, {got:,} pushed to the receiver, {doubled} "
             f"received more than once: " + ("OK, every wake arrived once" if got == len(w) and not doubled
                                             else "WARNING: NOT EVERY WAKE ARRIVED ONCE"),
             f"signatures: {valid:,} of {got:,} pushes verified by `standardwebhooks` (webhook-id wake_<message id>)"
             + (f"; failures e.g. {bad}" if bad else "") + f"; baseline {bare_valid:,} of {len(r.baseline.sent):,}",
             f"push rows: {statuses}; pushes that needed more than one attempt {retried}",
             f"the body's `data.message.created_at` equals the stored `messages.created_at` for {same_time:,} of "
             f"{got:,}",
             f"errors: trigger POSTs {dict(r.errors) or 'none'}, baseline POSTs {dict(r.baseline.errors) or 'none'}"]
    return lines, ok


def figures(r: Run, ok: bool) -> list[dict]:
    vigil, bare = headline(r)
    p50, p99, b50, b99 = pct(vigil, 50), pct(vigil, 99), pct(bare, 50), pct(bare, 99)
    got = sum(1 for x in r.wakes.values() if x.arrived is not None)
    valid = sum(1 for x in r.wakes.values() if x.valid)
    return [
        figure(f"wake stored → receiver got the push, p50 / p99 at {r.rate:g} wakes/s (baseline: a bare signed "
               "requests POST to the same receiver, send → got it)", f"{ms(vigil, 50)} / {ms(vigil, 99)} ms",
               f"{ms(bare, 50)} / {ms(bare, 99)} ms", p99 / b99, f"p99 ≤ {GOAL_MS:g} ms",
               1000 * p99 <= GOAL_MS and ok),
        figure("wake push p50 vs the bare POST's p50", f"{ms(vigil, 50)} ms", f"{ms(bare, 50)} ms", p50 / b50),
        figure("wakes pushed / signatures valid (standardwebhooks)", f"{got:,} of {len(r.wakes):,} / {valid:,}",
               "—", None, "all", ok),
    ]


def report(args, header: list[str], vers: str, r: Run, notes: list[str], trace_error: str = "") -> str:
    lines_checks, ok = checks(r)
    rows = figures(r, ok)
    record("wake_push", rows)
    vigil, bare = headline(r)
    met = {True: "yes", False: "NO", None: "—"}
    n = len(r.wakes)
    size = len(json.dumps(r.template, separators=(",", ":")))
    per = lambda cpu: fmt(1000 * cpu / n if n else float("nan"), 2)  # noqa: E731
    return "\n".join([
        "# Vigil wake push: wake stored → the runtime's receiver, beside a bare signed POST", "",
        *header, f"- {vers}",
        f"- Vigil: `vigil web` (1 process), `python -m dramatiq tasks.main --processes 1 --threads 4` "
        f"(dramatiq_worker_timeout {args.worker_timeout}), `vigil scheduler`; PostgreSQL database {DB_NAME}, "
        f"Redis db {REDIS_DB}; FETCH_ALLOW_LOOPBACK=true",
        *([f"- `--trace`: Redis MONITOR read by the bench all through the run (it costs Redis and the bench CPU: "
            f"read this run's latencies beside an untraced run's)"
            + (f"; WARNING: the trace failed: {trace_error}" if trace_error else "")] if args.trace else []),
        f"- {args.monitors} unsigned webhook monitors (tool endpoint), one wake endpoint (the receiver); trigger "
        f"deliveries at {args.rate:g}/s from one keep-alive client, one at a time; pushes ~{size:,} B",
        "- Receiver: ThreadingHTTPServer in its own process, HTTP/1.1 keep-alive, 200 at once, the signature checked "
        "after answering",
        f"- Baseline: the same rate of POSTs of a body of the same shape and size, built and signed with "
        f"`standardwebhooks` in the timed interval, from one keep-alive `requests.Session`; rounds "
        f"{', '.join(ROUND_ORDER)} × {args.blocks}",
        "", "| interval | n | p50 ms | p90 ms | p99 ms | max ms |", "|---|---:|---:|---:|---:|---:|",
        row("**Vigil: wake stored (`data.message.created_at`) → receiver had the push**", vigil),
        row("**baseline: signed POST sent → receiver had it**", bare),
        "", f"- p99 by round: {per_round(r)}",
        f"- CPU per wake over the Vigil rounds: worker {per(r.worker_cpu)} ms (the delivery, the wake, the push; "
        f"{per(r.idle_worker_cpu * r.busy_seconds)} ms of it the {fmt(1000 * r.idle_worker_cpu, 1)} ms a second an "
        f"idle worker spends polling Redis), `vigil web` {per(r.web_cpu)} ms",
        "", "Where a wake's time goes, from the tables" + (" and Redis MONITOR" if args.trace else "")
        + " (every stage's clock is this machine's):", "",
        "| interval | n | p50 ms | p90 ms | p99 ms | max ms |", "|---|---:|---:|---:|---:|---:|",
        *breakdown(r, args.trace), "",
        "| figure | Vigil | baseline | ratio | goal | met? |", "|---|---:|---:|---:|---:|:---:|",
        *[f"| {x['figure']} | {x['vigil']} | {x['baseline']} | "
          f"{'—' if x['ratio'] is None else format(x['ratio'], '.1f')} | {x['goal']} | {met[x['met']]} |"
          for x in rows], "",
        "Checks:", "", *[f"- {line}" for line in lines_checks + notes]]) + "\n"


# ----------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=20.0, help="trigger deliveries (wakes) a second (default 20)")
    parser.add_argument("--seconds", type=float, default=24.0,
                        help="seconds of measured wakes in all, over the Vigil rounds (default 24)")
    parser.add_argument("--blocks", type=int, default=2,
                        help="blocks of rounds baseline, Vigil, Vigil, baseline (default 2)")
    parser.add_argument("--monitors", type=int, default=20, help="webhook monitors the deliveries go to (default 20)")
    parser.add_argument("--worker-timeout", type=int, metavar="MS", default=100,
                        help="dramatiq_worker_timeout for the worker: its longest idle poll of each queue in Redis "
                             "(default 100 ms, as the Procfile and `vigil worker` run it)")
    parser.add_argument("--trace", action="store_true",
                        help="read Redis MONITOR in the bench to split the two queue hops (enqueued, fetched)")
    parser.add_argument("--coalesce", action="store_true",
                        help="instead: bursts of --burst-size wakes of one conversation, coalescing on vs off")
    parser.add_argument("--bursts", type=int, default=8, help="--coalesce: measured bursts each way (default 8)")
    parser.add_argument("--burst-size", type=int, default=10,
                        help="--coalesce: monitors (deliveries) a burst (default 10)")
    parser.add_argument("--burst-seconds", type=float, default=1.0,
                        help="--coalesce: a burst's deliveries spread over this many seconds (default 1)")
    parser.add_argument("--window", type=int, default=5, help="--coalesce: context.coalesce_seconds (default 5)")
    parser.add_argument("--serve-receiver", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_receiver:
        return serve_receiver(args.port)
    if (args.worker_timeout < 1 or args.rate <= 0 or args.blocks < 1 or args.monitors < 1
            or args.rate * args.seconds < 4 * args.blocks):
        parser.error("--worker-timeout ≥ 1, --rate > 0, --blocks and --monitors ≥ 1, at least 2 wakes a Vigil round")
    if args.coalesce and (args.bursts < 1 or args.burst_size < 2 or args.window < 2 or args.burst_seconds <= 0
                          or args.burst_seconds >= args.window):
        parser.error("--bursts ≥ 1, --burst-size ≥ 2, --window ≥ 2, 0 < --burst-seconds < --window")
    header, procs = prepare()
    if args.coalesce:
        from bench.wake_push_coalesce import coalesce_main  # it builds on this module's stack
        return coalesce_main(args, header, procs)
    s, r, started = Stack(procs), Run(args.rate), time.monotonic()
    trace: RedisTrace | None = None
    try:
        print(f"setting up (database {DB_NAME}, Redis db {REDIS_DB}) …", flush=True)
        start_vigil(s, args.worker_timeout)
        endpoint = register(s)
        print(f"  wake endpoint {endpoint['id']} → {endpoint['url']}", flush=True)
        s.links = create_monitors(s, args.monitors)
        if args.trace:
            trace = RedisTrace(REDIS_URL, REDIS_DB)
            require(trace.ready.wait(10), "Redis MONITOR did not start")
        rounds(s, r, args.seconds, args.blocks)
        time.sleep(1)  # a doubled push, if any, would be here by now
        s.receiver.refresh()
        if trace is not None:
            trace.close()
        r.wakes = read_wakes(s.db, s.receiver, r.sent, r.run, trace)
        r.records = {path: s.receiver.of(path) for path in (VIGIL_PATH, BASELINE_PATH)}
        notes = run_notes(procs, (WEB, WORKER, SCHEDULER, RECEIVER), started)
        text = report(args, header, versions(), r, notes, trace.error if trace else "")
    except (KeyboardInterrupt, BenchError, subprocess.SubprocessError, requests.RequestException) as exc:
        return failed(exc)
    finally:
        close_stack(s, procs, trace)
    return publish("wake_push.md", text)


if __name__ == "__main__":
    sys.exit(main())
