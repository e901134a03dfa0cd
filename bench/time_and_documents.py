#!/usr/bin/env python
"""Time and document watches: how late 10,000 time watches due in the same minute fire, beside a once-a-minute
sweeper; how long a document write takes to become a wake at 50 writes/s, beside the bare write.

    .venv/bin/python bench/time_and_documents.py [--watches 10000] [--spread 60] [--history 20000] [--rate 50]
        [--seconds 20]

Vigil runs as in production: `vigil web` (1 process), `python -m dramatiq tasks.main --processes 1 --threads 4`
(dramatiq_worker_timeout 100, as `vigil worker` runs it), `vigil scheduler` (tick 1 s, batch 500), on PostgreSQL
(database vigil_bench_timedocs, created if missing, schema recreated) and Redis (db 3, flushed; the bench
refuses to start while another client uses that db: a worker there would take this one's check messages).

Time watches: `--watches` of them, stored directly, not through 10,000 tool calls: one through the models as the
tool stores it (parse_create, create_time_monitor), the rest copies of its row in one INSERT … SELECT
(common.clone_monitors, as scheduler_cost seeds), owned by accounts of 50 in conversations of 10 (seed 001's
armed limits), their fire_at whole seconds spread evenly over `--spread` seconds; first a past of `--history`
finished monitors with 5 old wakes each, so that PostgreSQL plans the wake path for tables of a deployment's
size (on empty tables, whose statistics say so, it scans them for every fire). Lateness is each wake message's
created_at minus its fire_at. The baseline is computed, not run: for the same fire_at values, the wait until the
next whole minute, when seed 001's sweeper ("the next sweeper minute after fireAt") would fire them; what that
sweep would then spend firing them is not added.

Document watches: one owner with `--rate` × `--seconds` documents at status "running", each with a fresh
watch (CEL `doc.status == 'done'`, stored through the models, 10 a conversation), and as many again that nobody
watches. PUT /api/documents flips them to "done", paced at `--rate`/s (open loop, 4 keep-alive clients), in rounds
bare, watched, watched, bare; each watched write should make exactly one wake. Measured: PUT start → the wake's
messages.created_at, and → its `message.created` on /api/events (an SSE client of the owner's). The baseline is
the same PUT on a document nobody watches: what the write costs before any watch is involved.
Nothing asserts on time; the figures and how to read them are in docs/performance.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench import common  # noqa: E402
from bench.common import (  # noqa: E402
    PYTHON, RESULTS, VIGIL, BenchError, Db, Processes, clean_up, failed, figure, free_port, prepare, publish,
    record, tree_cpu, versions, wait_listening,
)
from bench.time_docs_parts import (  # noqa: E402
    BARE_TYPE, CLIENTS, CONDITION, WATCHED_TYPE, TimeWatch, WakeEvents, Writes, pct, put_paced, read_time_watches,
    require, seed_documents, seed_history, seed_time_watches, stored_wakes, sweeper_lateness, utcnow, wait_for,
)
from bench.trigger_parts import fmt  # noqa: E402
from tests.processes import vigil as vigil_command  # noqa: E402

DB_NAME = "vigil_bench_timedocs"
DATABASE_URL = common.database_url(DB_NAME)
REDIS_DB = 3
REDIS_URL = f"redis://127.0.0.1:6379/{REDIS_DB}"
EMAIL = "timedocs-bench@example.com"
#: process (and log file) names: another benchmark may be running at the same moment with its own
WEB, WORKER, SCHEDULER = "timedocs-web", "timedocs-worker", "timedocs-scheduler"
TIME_GOAL_S, DOC_GOAL_MS = 1.0, 250.0
#: unmeasured watches and writes first: the worker's first fire opens connections, its first CEL check starts
#: the evaluator's child process
WARM = 20
ROUND_ORDER = ("bare", "watched", "watched", "bare")
#: past wakes of each finished monitor of --history
HISTORY_WAKES = 5


def vigil_env(port: int) -> dict:
    return {"DATABASE_URL": DATABASE_URL, "REDIS_URL": REDIS_URL, "LOG_LEVEL": "WARNING",
            "PUBLIC_API_BASE_URL": f"http://127.0.0.1:{port}", "dramatiq_worker_timeout": "100",
            "API_RATE_PER_MINUTE": "1000000",  # 50 writes/s from one token
            "SECRET_KEY": "bench-only-secret-key-not-used-for-anything-real", "VIGIL_DATA_DIR": str(RESULTS / "var")}


@dataclass
class Stack:
    procs: Processes
    db: Db | None = None
    port: int = 0
    token: str = ""
    pids: dict = field(default_factory=dict)
    events: WakeEvents | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def start_vigil(s: Stack) -> None:
    rds = redis.Redis.from_url(REDIS_URL)
    me = rds.client_id()
    others = [c["addr"] for c in rds.client_list() if c.get("db") == str(REDIS_DB) and c["id"] != str(me)]
    require(not others, f"Redis db {REDIS_DB} is in use by {len(others)} other client(s) ({', '.join(others[:3])}): "
            "another Vigil's worker there would take this bench's check messages; stop it, or change REDIS_DB")
    common.fresh_database(DB_NAME)
    rds.flushdb()
    s.port = free_port()
    env = vigil_env(s.port)
    try:
        vigil_command("migrate", env=env)
        vigil_command("user", "create", EMAIL, "--password", "bench-password-not-secret", env=env)
        s.token = vigil_command("token", "create", "--user", EMAIL, env=env).strip().splitlines()[-1]
    except AssertionError as exc:
        raise BenchError(str(exc)) from None
    s.db = Db(DB_NAME, "timedocs-bench")
    for name, args in ((WEB, [VIGIL, "web", "--host", "127.0.0.1", "--port", str(s.port)]),
                       (WORKER, [PYTHON, "-m", "dramatiq", "tasks.main", "--processes", "1", "--threads", "4"]),
                       (SCHEDULER, [VIGIL, "scheduler"])):
        s.pids[name] = s.procs.start(name, args, env).pid
    wait_listening(s.port, s.procs)


# ----------------------------------------------------------------------------------------------
# time watches


@dataclass
class TimePhase:
    count: int
    spread: float
    history: int
    watches: dict[str, TimeWatch] = field(default_factory=dict)
    wall: float = 0.0        # first fire_at → last wake stored
    worker_cpu: float = 0.0
    scheduler_cpu: float = 0.0
    pg_cpu: float = 0.0
    progress: list[str] = field(default_factory=list)

    def values(self, start: str, end: str) -> list[float]:
        return [(getattr(w, end) - getattr(w, start)).total_seconds() for w in self.watches.values()
                if getattr(w, start) is not None and getattr(w, end) is not None]

    @property
    def lateness(self) -> list[float]:
        return self.values("fire_at", "stored")

    @property
    def sweeper(self) -> list[float]:
        return [sweeper_lateness(w.fire_at) for w in self.watches.values()]


def finished(db: Db) -> int:
    """Monitors that have ended (a time watch that fired is done), read through the (status, …) index: this
    poll runs all through the measured minute."""
    return db.scalar("SELECT count(*) FROM monitors WHERE status IN ('done', 'error')")


def time_phase(s: Stack, count: int, spread: float, history: int) -> TimePhase:
    """Warm-up, the past, then `count` time watches due over `spread` s, watched until every one has fired."""
    print("time watches: warm-up …", flush=True)
    seed_time_watches(DB_NAME, WARM, utcnow().replace(microsecond=0) + timedelta(seconds=2), 0, "warm")
    wait_for(lambda: finished(s.db) >= WARM, "the warm-up time watches fired", 30, s.procs.check_alive)
    if history:
        print(f"time watches: a past of {history:,} finished monitors with {HISTORY_WAKES} wakes each …", flush=True)
        seed_history(DB_NAME, s.db.scalar("SELECT min(id) FROM monitors WHERE id LIKE 'warm-%%'"), history,
                     HISTORY_WAKES)
    t0 = utcnow().replace(microsecond=0) + timedelta(seconds=4 + count / 5000)
    print(f"time watches: storing {count:,} due over {spread:g} s from {t0:%H:%M:%S} UTC (one INSERT … SELECT) …",
          flush=True)
    watches = seed_time_watches(DB_NAME, count, t0, spread, "time")
    require(utcnow() < t0, "storing the time watches took longer than their lead; the first ones were due already")
    phase = TimePhase(count, spread, history)
    while utcnow() < t0:
        time.sleep(0.05)
    follow(s, phase, watches)
    phase.watches = read_time_watches(s.db, watches, "time")
    last = max((w.stored for w in phase.watches.values() if w.stored), default=t0)
    phase.wall = (last - t0).total_seconds()
    late = phase.lateness
    print(f"  {len(late):,} wakes stored; lateness p50 {fmt(pct(late, 50), 2)} s, p99 {fmt(pct(late, 99), 2)} s, "
          f"max {fmt(max(late, default=float('nan')), 2)} s; a minute sweeper's wait p50 "
          f"{fmt(pct(phase.sweeper, 50), 1)} s, p99 {fmt(pct(phase.sweeper, 99), 1)} s", flush=True)
    return phase


def follow(s: Stack, phase: TimePhase, watches: dict) -> None:
    """From the first due time until every watch has fired (or 2 minutes past the last due time): progress every
    10 s, and the CPU the scheduler, the worker and PostgreSQL spent."""
    before, count = finished(s.db), len(watches)
    cpu0 = {name: tree_cpu(pid) for name, pid in s.pids.items()}
    pg0, started = s.db.backend_cpu(), time.monotonic()
    next_note = started + 10
    while (done := finished(s.db) - before) < count:
        if time.monotonic() - started > phase.spread + 120:
            print(f"  WARNING: only {done:,} of {count:,} time watches fired {phase.spread + 120:g} s after the "
                  "first came due", flush=True)
            break
        if time.monotonic() >= next_note:
            due = sum(1 for at in watches.values() if at <= utcnow())
            phase.progress.append(f"{time.monotonic() - started:.0f} s: {done:,} fired of {due:,} due")
            print(f"  {phase.progress[-1]}", flush=True)
            next_note += 10
        s.procs.check_alive()
        time.sleep(0.5)
    phase.worker_cpu = tree_cpu(s.pids[WORKER]) - cpu0[WORKER]
    phase.scheduler_cpu = tree_cpu(s.pids[SCHEDULER]) - cpu0[SCHEDULER]
    phase.pg_cpu = s.db.backend_cpu_since(pg0)


# ----------------------------------------------------------------------------------------------
# document watches


@dataclass
class DocPhase:
    rate: float
    expected: int            # measured watched writes
    watched: Writes
    bare: Writes
    ids: dict[int, str]
    stored: dict[str, float] = field(default_factory=dict)
    streamed: dict[str, float] = field(default_factory=dict)
    wakes_per_watch: dict = field(default_factory=dict)
    web_cpu: dict = field(default_factory=lambda: {"watched": 0.0, "bare": 0.0})
    worker_cpu: float = 0.0
    events: WakeEvents | None = None

    def since_put(self, arrived: dict[str, float]) -> list[float]:
        """Seconds from each measured write's start to its wake's arrival in `arrived`."""
        return [arrived[self.ids[i]] - began for i, began in self.watched.started.items() if self.ids[i] in arrived]


def doc_phase(s: Stack, rate: float, seconds: float) -> DocPhase:
    """The documents and their watches, a warm-up, then the paced rounds; waits for every wake on the stream."""
    per_round = round(rate * seconds / 2)
    print(f"document watches: storing {WARM + 2 * per_round:,} watched documents with a watch each and "
          f"{WARM + per_round:,} unwatched …", flush=True)
    ids = seed_documents(DATABASE_URL, EMAIL, WARM + 2 * per_round, WARM + per_round)
    events = s.events = WakeEvents(s.port, s.token, set(ids.values()))
    require(events.connected.wait(10), "the event stream did not say it was connected")
    put_paced(s.base, s.token, "warm-up", WATCHED_TYPE, range(WARM), rate, True)
    put_paced(s.base, s.token, "warm-up", BARE_TYPE, range(WARM), rate, False)
    wait_for(lambda: all(ids[i] in events.arrived for i in range(WARM)), "the warm-up wakes", 30, s.procs.check_alive)
    phase = DocPhase(rate, 2 * per_round, Writes("watched", WATCHED_TYPE, rate), Writes("bare", BARE_TYPE, rate),
                     ids, events=events)
    worker0 = tree_cpu(s.pids[WORKER])
    write_rounds(s, phase, per_round)
    wanted = {ids[i] for i in phase.watched.answered}
    wait_for(lambda: wanted <= set(events.arrived), "every measured write's wake on /api/events", 30,
             s.procs.check_alive)
    phase.worker_cpu = tree_cpu(s.pids[WORKER]) - worker0
    time.sleep(1)  # a duplicate wake, if any, would be written by now
    phase.stored, phase.wakes_per_watch = stored_wakes(s.db, set(ids.values()))
    phase.streamed = dict(events.arrived)
    sse = phase.since_put(phase.streamed)
    print(f"  write → SSE event p50 {fmt(1000 * pct(sse, 50))} ms, p99 {fmt(1000 * pct(sse, 99))} ms "
          f"({len(sse):,} of {len(phase.watched.answered):,})", flush=True)
    return phase


def write_rounds(s: Stack, phase: DocPhase, per_round: int) -> None:
    """ROUND_ORDER: a watched round writes per_round watched documents, a bare one half as many unwatched."""
    next_doc = {"watched": WARM, "bare": WARM}
    for kind in ROUND_ORDER:
        watched = kind == "watched"
        numbers = range(next_doc[kind], next_doc[kind] + (per_round if watched else per_round // 2))
        next_doc[kind] = numbers.stop
        web0 = tree_cpu(s.pids[WEB])
        writes = put_paced(s.base, s.token, kind, WATCHED_TYPE if watched else BARE_TYPE, numbers, phase.rate,
                           watched)
        phase.web_cpu[kind] += tree_cpu(s.pids[WEB]) - web0
        (phase.watched if watched else phase.bare).add(writes)
        print(f"  {kind}: {len(writes.answered):,} PUTs in {writes.wall:.1f} s, answer p99 "
              f"{fmt(1000 * pct(writes.rtt, 99))} ms" + (f", errors {dict(writes.errors)}" if writes.errors else ""),
              flush=True)


# ----------------------------------------------------------------------------------------------
# report


def ms(values: list[float], p: float) -> str:
    return fmt(1000 * pct(values, p))


def time_rows(t: TimePhase) -> list[str]:
    rows = []
    for label, values in (("due → wake stored (lateness)", t.lateness),
                          ("due → claimed by the scheduler (its tick; last claim)", t.values("fire_at", "claimed")),
                          ("claimed → the worker's check began", t.values("claimed", "checked")),
                          ("check began → wake stored", t.values("checked", "stored")),
                          ("the wake's own late_seconds (0.1 s steps)",
                           [w.late_seconds for w in t.watches.values() if w.late_seconds is not None]),
                          ("baseline: a minute sweeper's wait, computed for the same fire_at", t.sweeper)):
        rows.append(f"| {label} | {len(values):,} | {fmt(pct(values, 50), 3)} | {fmt(pct(values, 90), 3)} | "
                    f"{fmt(pct(values, 99), 3)} | {fmt(max(values, default=float('nan')), 3)} |")
    return rows


def doc_rows(d: DocPhase) -> list[str]:
    rows = []
    for label, values in (("watched: PUT start → answered", d.watched.rtt),
                          ("watched: PUT start → wake stored (messages.created_at)", d.since_put(d.stored)),
                          ("watched: PUT start → `message.created` at the SSE client", d.since_put(d.streamed)),
                          ("watched: PUT answered → `message.created`",
                           [d.streamed[d.ids[i]] - d.watched.answered[i] for i in d.watched.answered
                            if d.ids[i] in d.streamed]),
                          ("baseline: PUT start → answered, nobody watching", d.bare.rtt)):
        rows.append(f"| {label} | {len(values):,} | {ms(values, 50)} | {ms(values, 90)} | {ms(values, 99)} | "
                    f"{fmt(1000 * max(values, default=float('nan')))} |")
    return rows


def checks(t: TimePhase, d: DocPhase) -> tuple[list[str], bool, bool]:
    watches = t.watches.values()
    statuses = dict(sorted((s, sum(1 for w in watches if w.status == s)) for s in {w.status for w in watches}))
    once = sum(1 for w in watches if w.wakes == 1)
    reclaimed = sum(1 for w in watches if w.claims > 1)
    time_ok = once == t.count and statuses == {"done": t.count}
    measured = {d.ids[i] for i in d.watched.answered}
    doc_once = sum(1 for m in measured if d.wakes_per_watch.get(m) == 1)
    extra = sum(n for m, n in d.wakes_per_watch.items() if n > 1)
    doc_ok = doc_once == len(measured) == d.expected and measured <= set(d.streamed) and not d.watched.errors
    lines = [f"time watches: {once:,} of {t.count:,} woke exactly once; statuses {statuses}; claimed more than once "
             f"(a check not fired within TIME_RETRY_SECONDS, 30 s, is claimed again) {reclaimed:,}: "
             + ("OK" if time_ok else "WARNING: NOT ONE WAKE PER WATCH"),
             f"document watches: {len(measured):,} writes answered 200 with watches_checked 1, {doc_once:,} of their "
             f"watches woke exactly once, {len(measured & set(d.streamed)):,} wakes reached the SSE client, "
             f"{extra} extra wakes, {d.events.duplicates} duplicate events: " + ("OK" if doc_ok else "WARNING"),
             f"write errors: watched {dict(d.watched.errors) or 'none'}, bare {dict(d.bare.errors) or 'none'}",
             f"events on the stream: {dict(d.events.names)}; wakes of monitors not the bench's: "
             f"{dict(d.events.foreign) or 'none'}" + (" (another Vigil on this Redis server: pub/sub channels are "
                                                       "not per database)" if d.events.foreign else "")]
    return lines, time_ok, doc_ok


def figures(t: TimePhase, d: DocPhase, time_ok: bool, doc_ok: bool) -> list[dict]:
    late, sweep = t.lateness, t.sweeper
    sse, bare = d.since_put(d.streamed), d.bare.rtt
    spread = "in one minute" if t.spread == 60 else f"over {t.spread:g} s"
    return [
        figure(f"time watch lateness p50 / p99, {t.count:,} due {spread} (baseline: a once-a-minute sweeper's wait, "
               "computed for the same due times)", f"{fmt(pct(late, 50), 2)} / {fmt(pct(late, 99), 2)} s",
               f"{fmt(pct(sweep, 50), 1)} / {fmt(pct(sweep, 99), 1)} s", pct(late, 99) / pct(sweep, 99),
               f"p99 ≤ {TIME_GOAL_S:g} s", pct(late, 99) <= TIME_GOAL_S and time_ok),
        figure(f"document write → wake p50 / p99 at {d.rate:g} writes/s, PUT start → SSE event (baseline: the same "
               "PUT, nobody watching)", f"{ms(sse, 50)} / {ms(sse, 99)} ms", f"{ms(bare, 50)} / {ms(bare, 99)} ms",
               pct(sse, 99) / pct(bare, 99), f"p99 ≤ {DOC_GOAL_MS:g} ms",
               1000 * pct(sse, 99) <= DOC_GOAL_MS and doc_ok),
        figure("document PUT answer p99, one watch vs none", f"{ms(d.watched.rtt, 99)} ms", f"{ms(bare, 99)} ms",
               pct(d.watched.rtt, 99) / pct(bare, 99)),
    ]


def report(args, header: list[str], vers: str, t: TimePhase, d: DocPhase, notes: list[str]) -> str:
    lines_checks, time_ok, doc_ok = checks(t, d)
    rows = figures(t, d, time_ok, doc_ok)
    record("time_and_documents", rows)
    met = {True: "yes", False: "NO", None: "—"}
    per = lambda cpu, n: fmt(1000 * cpu / n if n else float("nan"), 2)  # noqa: E731
    watched_n, bare_n = len(d.watched.answered), len(d.bare.answered)
    return "\n".join([
        "# Vigil time and document watches: lateness beside a minute sweeper, write → wake beside the bare write", "",
        *header, f"- {vers}",
        f"- Vigil: `vigil web` (1 process), `python -m dramatiq tasks.main --processes 1 --threads 4` "
        f"(dramatiq_worker_timeout 100), `vigil scheduler` (tick 1 s, batch 500); PostgreSQL database {DB_NAME}, "
        f"Redis db {REDIS_DB}",
        f"- Time watches: {t.count:,} stored directly (one by parse_create + create_time_monitor, the rest copies of "
        f"its row in one INSERT … SELECT, common.clone_monitors), fire_at whole seconds spread evenly over "
        f"{t.spread:g} s, owners of 50 in conversations of 10, beside a past of {t.history:,} finished monitors with "
        f"{HISTORY_WAKES} wakes each (so that PostgreSQL plans for tables of a deployment's size, statistics "
        "fresh); lateness = the wake message's created_at − fire_at. Baseline computed, not run: the wait until "
        "the next whole minute (seed 001: \"the next sweeper minute after fireAt\"), the sweep's own firing time "
        "not added",
        f"- Document watches: PUT /api/documents at {d.rate:g}/s, open loop from {CLIENTS} keep-alive clients, rounds "
        f"{', '.join(ROUND_ORDER)}; each watched write flips a document watched by one fresh watch (CEL "
        f"`{CONDITION}`) to true; baseline: the same PUT to a document nobody watches",
        "", "## Time watches", "",
        "| interval | n | p50 s | p90 s | p99 s | max s |", "|---|---:|---:|---:|---:|---:|", *time_rows(t), "",
        f"- first due → last wake stored {t.wall:.1f} s; CPU per fire: worker {per(t.worker_cpu, t.count)} ms, "
        f"scheduler {per(t.scheduler_cpu, t.count)} ms, PostgreSQL {per(t.pg_cpu, t.count)} ms",
        *[f"- {line}" for line in t.progress],
        "", "## Document watches", "",
        "| interval | n | p50 ms | p90 ms | p99 ms | max ms |", "|---|---:|---:|---:|---:|---:|", *doc_rows(d), "",
        f"- writes: {watched_n:,} watched in {d.watched.wall:.1f} s ({watched_n / d.watched.wall:.1f}/s), {bare_n:,} "
        f"bare in {d.bare.wall:.1f} s ({bare_n / d.bare.wall:.1f}/s)",
        f"- `vigil web` CPU per PUT: watched {per(d.web_cpu['watched'], watched_n)} ms, bare "
        f"{per(d.web_cpu['bare'], bare_n)} ms; worker CPU per wake {per(d.worker_cpu, watched_n)} ms",
        "- without the expedited check a write would wait for the document sweep (DOCUMENT_SWEEP_SECONDS, 300 s: "
        "150 s on average)",
        "", "| figure | Vigil | baseline | ratio | goal | met? |", "|---|---:|---:|---:|---:|:---:|",
        *[f"| {r['figure']} | {r['vigil']} | {r['baseline']} | "
          f"{'—' if r['ratio'] is None else format(r['ratio'], '.3f')} | {r['goal']} | {met[r['met']]} |"
          for r in rows], "",
        "Checks:", "", *[f"- {line}" for line in lines_checks + notes]]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--watches", type=int, default=10_000, help="time watches (default 10000)")
    parser.add_argument("--spread", type=float, default=60.0,
                        help="seconds their fire_at spread over (default 60; 0: all due the same second)")
    parser.add_argument("--history", type=int, default=20_000,
                        help=f"finished monitors with {HISTORY_WAKES} past wakes each, stored first "
                             "(default 20000; 0: none)")
    parser.add_argument("--rate", type=float, default=50.0, help="document writes a second (default 50)")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds of watched writes (default 20)")
    args = parser.parse_args(argv)
    if args.watches < 1 or args.spread < 0 or args.rate <= 0 or args.rate * args.seconds < 2:
        parser.error("--watches ≥ 1, --spread ≥ 0, and at least 2 watched writes")
    header, procs = prepare()
    s, started = Stack(procs), time.monotonic()
    try:
        print(f"setting up (database {DB_NAME}, Redis db {REDIS_DB}) …", flush=True)
        start_vigil(s)
        t = time_phase(s, args.watches, args.spread, args.history)
        d = doc_phase(s, args.rate, args.seconds)
        notes = run_notes(procs, (WEB, WORKER, SCHEDULER), started)
        text = report(args, header, versions(), t, d, notes)
    except (KeyboardInterrupt, BenchError, subprocess.SubprocessError) as exc:
        return failed(exc)
    finally:
        if s.events is not None:
            s.events.close()
        clean_up(procs, REDIS_URL)
        if s.db is not None:
            s.db.close()
    return publish("time_and_documents.md", text)


if __name__ == "__main__":
    sys.exit(main())
