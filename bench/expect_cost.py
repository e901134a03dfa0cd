#!/usr/bin/env python
"""Expected deliveries benchmark (issue 18): what `source.expect` costs the scheduler while every link is on time,
and how fast and how exactly it wakes when many links go silent at once.

    .venv/bin/python bench/expect_cost.py [--armed 10000] [--window 60] [--rounds 2] [--burst 1000]

Every phase runs on a freshly migrated vigil_bench_sched (schema dropped, Redis db 9 flushed: scheduler_cost's
database, whose parts this reuses; VIGIL_BENCH_SCHED_DB and VIGIL_BENCH_SCHED_REDIS name others) with a real
`vigil scheduler` (production settings: tick 1 s, batch 500) and no worker. The monitors are webhook monitors: one
made by the tool's monitor_create (its link too), the rest copies of its row and of its link's row in one
INSERT … SELECT each, owned by accounts of 50 in conversations of 10.

- idle: `--armed` monitors whose expect deadlines are all ahead (spread over the day after the window), against
  the same monitors made without an expect, in the order expect, baseline, baseline, expect, … (`--rounds`
  pairs). The scheduler's and PostgreSQL's CPU per minute, and the rows PostgreSQL read, side by side.
- burst: `--armed` monitors with an expect of which `--burst` have deadlines within one second; each missed
  deadline's wake is timed from that deadline to its wake row's and its message's created_at, and counted per
  monitor (exactly one each), with one scheduler, then with two.
Nothing asserts on time; see bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench.common import (  # noqa: E402
    VIGIL, BenchError, Processes, clean_up, clone_monitors, failed, figure, prepare, publish, record, run_notes,
    tree_cpu, versions)
from bench.scheduler_cost import (  # noqa: E402
    CPU_NOTE, DB_NAME, ENV, LEAD_SECONDS, REDIS_URL, SCHEDULER, TAIL_SECONDS, Db, Phase, alternate, fmt,
    fresh_schema, measure, phase_table, ratio, sleep_until, utcnow)
from bench.trigger_parts import pct  # noqa: E402

EXPECT = {"every": "24h"}  # grace: the default, a tenth of the period within 1 min – 1 h, so 1 h
#: the idle phases' deadlines: spread over a day that begins this long after the window
AHEAD = timedelta(hours=1)
#: how long the burst may take before the bench stops waiting for its wakes
BURST_TIMEOUT = 60.0
#: after the last wake, ticks enough for a double to show
SETTLE_SECONDS = 3.0
IDLE_GOAL, P99_GOAL = 1.1, 2.0
DAY = 86400


def webhook_template(expect: dict | None) -> str:
    """One webhook monitor (and its link) made by the tool's monitor_create, as an agent makes one; its id."""
    from adapters.settings import Settings
    from app.tool import create_context
    from models import connection, database, utcnow as now_utc
    from models.db import bind
    from models.tables import Conversation, User
    from models.tool_actions import monitor_create
    from tasks.runtime import configure

    configure(Settings.from_env(ENV))
    bind(ENV["DATABASE_URL"])
    source = {"type": "webhook", **({"expect": expect} if expect else {})}
    arguments = {"description": "the nightly export", "source": source, "max_wakes": 10}
    with connection():
        now = now_utc()
        user = User.create(email="bench@example.com", password_hash="-", created_at=now)
        conversation = Conversation.create(user=user, external_id="bench-conversation", channel="chat",
                                           created_at=now, updated_at=now)
        monitor, _ = monitor_create(user, conversation, arguments, create_context(), now)
    with contextlib.suppress(AttributeError):
        database.obj.close_all()  # the bench's pooled connection; the scheduler opens its own
    return monitor.id


def clone_webhooks(db: Db, template: str, count: int, prefix: str) -> None:
    """`count` copies of the template monitor (common.clone_monitors), each with a copy of its link's row."""
    interval, expires = db.query("SELECT interval_seconds, expires_at FROM monitors WHERE id = %s", (template,))[0]
    # an event monitor's next_check_at is its expiry (it is never claimed): spread 0 keeps every copy so
    clone_monitors(DB_NAME, template, count, expires, 0, interval, expires, prefix=prefix)
    columns = [f'"{name}"' for (name,) in db.query(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' "
        "AND table_name = 'trigger_links'") if name not in {"id", "monitor_id", "token_digest"}]
    done = db.scalar(
        f"INSERT INTO trigger_links (monitor_id, token_digest, {', '.join(columns)}) "
        f"SELECT m.id, md5(m.id) || md5('link ' || m.id), {', '.join('t.' + name for name in columns)} "
        "FROM monitors m CROSS JOIN trigger_links t WHERE m.id LIKE %s AND t.monitor_id = %s",
        (f"{prefix}-%", template))
    if done != count:
        raise BenchError(f"cloned {done} trigger links, not {count}")


def set_deadlines(db: Db, prefix: str, count: int, first: datetime, spread_seconds: float) -> None:
    """The copies' deadlines spread evenly over [first, first + spread_seconds), as their deliveries left them."""
    db.query("UPDATE monitors SET expect_due_at = %s + substring(id from %s)::int * %s * interval '1 second' "
             "WHERE id LIKE %s", (first, len(prefix) + 2, spread_seconds / count, f"{prefix}-%"))


def ahead(groups: dict[str, int], first: datetime):
    """deadlines for seed: every group's spread over the day from `first`."""
    def deadlines(db: Db) -> None:
        for prefix, count in groups.items():
            set_deadlines(db, prefix, count, first, DAY)
    return deadlines


def seed(groups: dict[str, int], expect: dict | None, deadlines=None) -> None:
    """A fresh schema with webhook monitors, `count` ids `<prefix>-<i>` for each prefix of `groups`;
    deadlines(db), when given, sets their expect_due_at."""
    fresh_schema()
    template = webhook_template(expect)
    db = Db()
    try:
        for prefix, count in groups.items():
            clone_webhooks(db, template, count, prefix)
        db.query("DELETE FROM monitors WHERE id = %s", (template,))
        if deadlines is not None:
            deadlines(db)
        db.query("VACUUM ANALYZE monitors")  # the update's dead rows gone, its index's statistics taken
        db.query("VACUUM ANALYZE trigger_links")
    finally:
        db.close()


def scheduler_names(count: int) -> list[str]:
    return [f"{SCHEDULER}-{k}" if k else SCHEDULER for k in range(count)]


def start_schedulers(procs: Processes, count: int) -> list:
    redis.Redis.from_url(REDIS_URL).flushdb()
    return [procs.start(name, [VIGIL, "scheduler"], ENV) for name in scheduler_names(count)]


def stop_schedulers(procs: Processes, count: int) -> None:
    procs.stop(*scheduler_names(count))


def idle_phase(name: str, armed: int, window: float, procs: Processes) -> Phase:
    """`armed` webhook monitors, with expect deadlines all ahead or without an expect: the scheduler's cost."""
    print(f"{name}: {armed:,} armed webhook monitors, {'with' if name == 'expect' else 'without'} expect …",
          flush=True)
    t0 = utcnow() + timedelta(seconds=LEAD_SECONDS + 6 + armed / 5000)  # migrate and the insert take a while
    end = t0 + timedelta(seconds=window + TAIL_SECONDS)
    groups = {"armed": armed}
    if name == "expect":
        seed(groups, EXPECT, ahead(groups, end + AHEAD))
    else:
        seed(groups, None)
    [scheduler] = start_schedulers(procs, 1)
    db = Db()
    try:
        if utcnow() > t0 - timedelta(seconds=LEAD_SECONDS - 1):
            raise BenchError("seeding took longer than planned; the scheduler had no time to start")
        sleep_until(t0, procs)
        phase = Phase(name, armed)
        measure(phase, scheduler.pid, db, end, procs)
        phase.claims = db.scalar("SELECT count(*) FROM wakes")
    finally:
        db.close()
        stop_schedulers(procs, 1)
    print(f"  scheduler {phase.per_minute(phase.scheduler_cpu):.3f} CPU-s/min, PostgreSQL "
          f"{phase.per_minute(phase.pg_cpu):.3f} CPU-s/min, {phase.claims} wakes", flush=True)
    return phase


@dataclass
class Burst:
    schedulers: int
    due: int
    #: deadline → wake row written, and → its message written, seconds, one per wake
    to_wake: list[float] = field(default_factory=list)
    to_message: list[float] = field(default_factory=list)
    woken: int = 0
    doubled: int = 0
    lost: int = 0
    strangers: int = 0
    other_wakes: int = 0
    left_due: int = 0
    last_after: float = float("nan")
    scheduler_cpu: float = 0.0
    pg_cpu: float = 0.0

    @property
    def exact(self) -> bool:
        return self.woken == self.due and not (self.doubled or self.lost or self.strangers or self.other_wakes)


def burst_phase(armed: int, due: int, schedulers: int, procs: Processes) -> Burst:
    """`due` of `armed` monitors miss their deadline within the same second; each wake is timed and counted."""
    print(f"burst: {due:,} of {armed:,} deadlines within one second, {schedulers} scheduler(s) …", flush=True)
    groups = {prefix: count for prefix, count in (("due", due), ("later", armed - due)) if count}
    seed(groups, EXPECT, ahead(groups, utcnow() + timedelta(days=2)))
    db = Db()
    procs_started = start_schedulers(procs, schedulers)
    try:
        t0 = utcnow() + timedelta(seconds=LEAD_SECONDS)
        set_deadlines(db, "due", due, t0, 1.0)  # while the scheduler starts: all within [t0, t0 + 1 s)
        deadlines = dict(db.query("SELECT id, expect_due_at FROM monitors WHERE id LIKE 'due-%%'"))
        sleep_until(t0 - timedelta(seconds=0.5), procs)
        pg0, cpu0 = db.backend_cpu(), [tree_cpu(p.pid) for p in procs_started]
        last = wait_for_wakes(db, due, t0, procs)
        result = Burst(schedulers, len(deadlines))
        result.scheduler_cpu = sum(tree_cpu(p.pid) - c for p, c in zip(procs_started, cpu0))
        result.pg_cpu = db.backend_cpu_since(pg0)
        result.last_after = (last - t0).total_seconds() if last else float("nan")
        count_wakes(db, result, deadlines)
        result.left_due = db.scalar("SELECT count(*) FROM monitors WHERE status = 'active' AND expect_due_at < %s",
                                    (t0 + timedelta(seconds=1),))
    finally:
        db.close()
        stop_schedulers(procs, schedulers)
    print(f"  {result.woken:,} woken; deadline → wake p50 / p99 {latency(result.to_wake)}", flush=True)
    return result


def wait_for_wakes(db: Db, due: int, t0: datetime, procs: Processes) -> datetime | None:
    """Until `due` missed wakes are written (or BURST_TIMEOUT), then SETTLE_SECONDS more; the last one's time."""
    give_up = t0 + timedelta(seconds=BURST_TIMEOUT)
    while utcnow() < give_up and db.scalar("SELECT count(*) FROM wakes") < due:
        procs.check_alive()
        time.sleep(0.2)
    sleep_until(utcnow() + timedelta(seconds=SETTLE_SECONDS), procs)
    return db.scalar("SELECT max(created_at) FROM wakes")


def count_wakes(db: Db, result: Burst, deadlines: dict) -> None:
    rows = db.query("SELECT w.monitor_id, w.created_at, m.created_at FROM wakes w "
                    "LEFT JOIN messages m ON m.id = w.message_id WHERE w.dedupe_key LIKE 'expect:missed:%%'")
    per_monitor: dict[str, int] = {}
    for monitor_id, woke_at, message_at in rows:
        per_monitor[monitor_id] = per_monitor.get(monitor_id, 0) + 1
        if monitor_id not in deadlines:
            result.strangers += 1
            continue
        result.to_wake.append((woke_at - deadlines[monitor_id]).total_seconds())
        if message_at is not None:
            result.to_message.append((message_at - deadlines[monitor_id]).total_seconds())
    result.woken = len(rows)
    result.doubled = sum(n - 1 for n in per_monitor.values() if n > 1)
    result.lost = sum(1 for monitor_id in deadlines if monitor_id not in per_monitor)
    result.other_wakes = db.scalar("SELECT count(*) FROM wakes WHERE dedupe_key NOT LIKE 'expect:missed:%%'")


def seconds(values: list[float], p: float) -> float:
    """trigger_parts.pct, in seconds."""
    return pct(values, p) / 1000


def latency(values: list[float]) -> str:
    return f"{seconds(values, 50):.3f} / {seconds(values, 99):.3f} s" if values else "n/a"


def burst_lines(bursts: list[Burst]) -> list[str]:
    lines = ["| schedulers | deadlines in 1 s | deadline → wake row p50 / p99 | deadline → message p50 / p99 "
             "| last wake after the first deadline | wakes | doubled | lost | other wakes | still due | "
             "scheduler + PostgreSQL CPU per wake |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for b in bursts:
        per_wake = (b.scheduler_cpu + b.pg_cpu) / b.woken * 1000 if b.woken else float("nan")
        lines.append(f"| {b.schedulers} | {b.due:,} | {latency(b.to_wake)} | {latency(b.to_message)} | "
                     f"{b.last_after:.2f} s | {b.woken:,} | {b.doubled} | {b.lost} | {b.other_wakes} | "
                     f"{b.left_due} | {per_wake:.2f} ms ({b.scheduler_cpu * 1000 / max(b.woken, 1):.2f} + "
                     f"{b.pg_cpu * 1000 / max(b.woken, 1):.2f}) |")
    return lines


def report(args, header: list[str], vers: str, expect: Phase, plain: Phase, bursts: list[Burst],
           notes: list[str]) -> tuple[str, list[dict]]:
    cpu_ratio = ratio(expect.best, plain.best)
    rows_ratio = ratio(expect.per_minute(expect.rows_read), plain.per_minute(plain.rows_read))
    quiet = expect.claims == plain.claims == 0
    lines = ["# Vigil scheduler: expected deliveries, idle and in a burst of misses", "", *header, f"- {vers}",
             f"- `vigil scheduler` (tick 1 s, batch 500), no worker; PostgreSQL database {DB_NAME}, "
             f"Redis {REDIS_URL}; webhook monitors with `expect` {EXPECT} (grace 1 h) or without",
             f"- idle: {args.armed:,} armed, deadlines all ahead; {args.rounds} windows of {args.window:g} s "
             f"(+ {TAIL_SECONDS:g} s) a phase, in the order expect, baseline, baseline, expect, …", CPU_NOTE, "",
             *phase_table((expect, plain), "wakes"), "",
             f"- idle: total CPU per minute, expect ÷ baseline, each at its least loaded window: **{fmt(cpu_ratio)}** "
             f"(goal ≤ {IDLE_GOAL:g}); over all windows {fmt(ratio(expect.per_minute(expect.total), plain.per_minute(plain.total)))}; "
             f"rows read per minute {fmt(rows_ratio)}; wakes written while idle: {expect.claims} and {plain.claims}",
             "", f"- burst: {args.burst:,} of {args.armed:,} armed monitors miss their deadline within the same "
             "second; latency from each deadline (expected time + grace) to the wake's created_at", "",
             *burst_lines(bursts), "", *(f"- {note}" for note in notes)]
    figures = [figure(f"scheduler + PostgreSQL CPU/min, {args.armed:,} armed webhook monitors with expect (deadlines "
                      "ahead) vs without", f"{fmt(expect.best)} s/min", f"{fmt(plain.best)} s/min", cpu_ratio,
                      f"≤ {IDLE_GOAL:g}", cpu_ratio <= IDLE_GOAL and quiet),
               figure(f"rows PostgreSQL reads per minute for the scheduler, {args.armed:,} with expect vs without",
                      f"{expect.per_minute(expect.rows_read):,.0f}", f"{plain.per_minute(plain.rows_read):,.0f}",
                      rows_ratio, f"≤ {IDLE_GOAL:g}", rows_ratio <= IDLE_GOAL and quiet)]
    for b in bursts:
        p99 = seconds(b.to_wake, 99)
        figures += [figure(f"missed deadline → wake row p50 / p99, {b.due:,} deadlines in one second, "
                           f"{b.schedulers} scheduler{'s' if b.schedulers > 1 else ''}", latency(b.to_wake), "—",
                           None, f"p99 ≤ {P99_GOAL:g} s", p99 <= P99_GOAL),
                    figure(f"wakes written for {b.due:,} missed deadlines, {b.schedulers} scheduler"
                           f"{'s' if b.schedulers > 1 else ''} (doubled {b.doubled}, lost {b.lost})",
                           f"{b.woken:,}", f"{b.due:,}", ratio(b.woken, b.due), f"exactly {args.burst:,}", b.exact)]
    return "\n".join(lines) + "\n", figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Expected deliveries: the scheduler's idle cost, and a burst of "
                                                 "misses.")
    parser.add_argument("--armed", type=int, default=10_000, help="armed webhook monitors (default 10000)")
    parser.add_argument("--window", type=float, default=60.0, help="measured seconds per idle phase (default 60)")
    parser.add_argument("--rounds", type=int, default=2, help="pairs of idle phases (default 2)")
    parser.add_argument("--burst", type=int, default=1000, help="deadlines passing in one second (default 1000)")
    parser.add_argument("--schedulers", default="1,2",
                        help="comma-separated: one burst run for each, with that many schedulers (default 1,2)")
    args = parser.parse_args(argv)
    if not 0 < args.burst <= args.armed or args.rounds < 1:
        parser.error("--burst must be between 1 and --armed, --rounds at least 1")
    try:
        args.schedulers = [int(n) for n in args.schedulers.split(",")]
    except ValueError:
        parser.error("--schedulers takes whole numbers separated by commas, like 1,2")
    if min(args.schedulers) < 1:
        parser.error("--schedulers: each burst run needs at least 1 scheduler")
    header, procs = prepare()
    started = time.monotonic()
    try:
        expect, plain = Phase("expect", args.armed), Phase("baseline", args.armed)
        alternate(args.rounds, expect, plain, lambda p: idle_phase(p.name, args.armed, args.window, procs))
        bursts = [burst_phase(args.armed, args.burst, n, procs) for n in args.schedulers]
        text_out, figures = report(args, header, versions(), expect, plain, bursts,
                                   run_notes(procs, scheduler_names(max(args.schedulers)), started))
    except (KeyboardInterrupt, BenchError) as exc:
        return failed(exc)
    finally:
        clean_up(procs, REDIS_URL)
    record("expect_cost", figures)
    return publish("expect_cost.md", text_out)


if __name__ == "__main__":
    sys.exit(main())
