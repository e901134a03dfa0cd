#!/usr/bin/env python
"""Wake push, coalescing: `bench/wake_push.py --coalesce` runs this case on wake_push's stack.

Bursts of --burst-size webhook monitors of ONE conversation fire within --burst-seconds; with
context.coalesce_seconds (--window) the conversation's wakes are held and delivered as one message (one push, one
SSE event), against the same bursts to a conversation with coalescing off, in the order off, on, on, off. Measured:
messages, pushes and events per burst, every fact present exactly once, window close → push latency, and the
worker's and scheduler's CPU per fired delivery, raw and net of idle polling. Nothing asserts on time; the figures
are in docs/performance.md.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

import requests

import bench.wake_push as push
from bench import common
from bench.common import (
    BenchError, Processes, cpu_since, failed, figure, publish, record, run_notes, threads_cpu, tree_pids, versions,
)
from bench.time_docs_parts import pct, require, wait_for
from bench.trigger_parts import fmt, paced
from bench.wake_push import (
    IDLE_SECONDS, RECEIVER, SCHEDULER, WEB, WORKER, Stack, arrived, close_stack, create_monitors, ms, register,
    start_vigil,
)
from bench.wake_push_parts import (
    VIGIL_PATH, Burst, MessageStream, close_to_push, close_to_stored, epoch, facts_once, read_bursts,
    stored_to_push,
)

COALESCE_DB, COALESCE_REDIS_DB = "vigil_bench_coalesce", 11
#: the two conversations of the case, each with K webhook monitors: one coalescing (context.coalesce_seconds on
#: its tool calls), one with coalescing off (0); the same bursts go to each
CONVERSATIONS = {"on": "push-coalesce-on", "off": "push-coalesce-off"}
BURST_ORDER = ("off", "on", "on", "off")
CLOSE_GOAL = 1.5  # s: window closed → the receiver has the push, p99 (a tick or so)
CPU_GOAL = 1.2    # worker CPU per fired delivery, on ÷ off


def use_target(db_name: str, redis_db: int) -> None:
    """Run wake_push's stack on another database and Redis db than the plain case (its own, so that both may run
    at once)."""
    push.DB_NAME, push.DATABASE_URL = db_name, common.database_url(db_name)
    push.REDIS_DB, push.REDIS_URL = redis_db, f"redis://127.0.0.1:6379/{redis_db}"


@dataclass
class Coalesce:
    k: int
    window: int
    burst_seconds: float
    run: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    links: dict[str, dict[str, str]] = field(default_factory=dict)  # "on"/"off" → {monitor id: trigger url}
    conversation: dict[str, int] = field(default_factory=dict)      # "on"/"off" → conversations.id
    bursts: list[Burst] = field(default_factory=list)
    idle_worker_cpu: float = 0.0     # CPU seconds a second, doing nothing (polling Redis)
    idle_scheduler_cpu: float = 0.0  # the same, its ticks with nothing due
    errors: Counter = field(default_factory=Counter)


def held(s: Stack, conversation_id: int) -> tuple[int, float | None]:
    """(wakes the conversation holds, when its window closes)."""
    count, due = s.db.query("SELECT count(*), min(due_at) FROM held_wakes WHERE conversation_id = %s",
                            (conversation_id,))[0]
    return count, epoch(due)


def cpu_now(s: Stack) -> tuple[dict, dict, float]:
    """Thread CPU (nanoseconds, schedstat: a burst is a few 10 ms ticks) of the worker's tree and the scheduler."""
    return threads_cpu(tree_pids(s.pids[WORKER])), threads_cpu([s.pids[SCHEDULER]]), time.monotonic()


def add_span(b: Burst, s: Stack, start: tuple[dict, dict, float]) -> None:
    b.worker_cpu += cpu_since(start[0], tree_pids(s.pids[WORKER]))
    b.scheduler_cpu += cpu_since(start[1], [s.pids[SCHEDULER]])
    b.seconds += time.monotonic() - start[2]


def burst(s: Stack, c: Coalesce, mode: str, n: int) -> Burst:
    """K deliveries, one to each monitor of the mode's conversation, within `burst_seconds`; then until the receiver
    has every one's push. With coalescing on, the wait for the window's close (all held, nothing to do but poll)
    is left out of the CPU spans, up to 0.2 s before it."""
    tag = ("c" if mode == "on" else "f") + "".join(chr(ord("a") + int(d)) for d in str(n))
    b, start = Burst(mode, tag), cpu_now(s)
    out = paced(f"{mode} burst {n}", c.run, tag, list(c.links[mode].values()), c.k, c.burst_seconds / c.k)
    b.sent = out.sent
    c.errors.update(out.errors)
    if mode == "on":
        wait_for(lambda: held(s, c.conversation["on"])[0] >= len(out.sent), f"the held wakes of burst {n}", 30,
                 s.procs.check_alive, poll=0.02)
        add_span(b, s, start)
        due = held(s, c.conversation["on"])[1]
        with contextlib.suppress(ValueError, TypeError):
            time.sleep(due - 0.2 - time.time())
        start = cpu_now(s)
    wait_for(lambda: set(out.sent) <= arrived(s, c.run, VIGIL_PATH), f"the pushes of burst {n}", 30 + c.window,
             s.procs.check_alive, poll=0.02)
    add_span(b, s, start)
    return b


def coalesce_rounds(s: Stack, c: Coalesce, per_mode: int) -> None:
    print("warm-up: one burst each way, not measured …", flush=True)
    burst(s, c, "off", 0)
    burst(s, c, "on", 0)
    idle = Burst("idle", "")
    start = cpu_now(s)
    time.sleep(IDLE_SECONDS)
    add_span(idle, s, start)
    c.idle_worker_cpu, c.idle_scheduler_cpu = idle.worker_cpu / idle.seconds, idle.scheduler_cpu / idle.seconds
    order = (BURST_ORDER * per_mode)[:2 * per_mode]
    print(f"{len(order)} bursts of {c.k} deliveries in {c.burst_seconds:g} s, {', '.join(BURST_ORDER)} …", flush=True)
    for n, mode in enumerate(order, start=1):
        b = burst(s, c, mode, n)
        c.bursts.append(b)
        print(f"  {mode} burst {n}: {len(b.sent)} deliveries accepted", flush=True)


def of_mode(c: Coalesce, mode: str) -> list[Burst]:
    return [b for b in c.bursts if b.mode == mode]


def per_burst(bursts: list[Burst], count) -> list[int]:
    return [count(b) for b in bursts]


def cpu_per_delivery(c: Coalesce, mode: str, net: bool = True, which: str = "worker") -> float:
    """CPU seconds per accepted delivery over the mode's spans; `net` takes off what idling as long would cost."""
    bursts = of_mode(c, mode)
    cpu = sum(getattr(b, f"{which}_cpu") for b in bursts)
    idle = getattr(c, f"idle_{which}_cpu") * sum(b.seconds for b in bursts) if net else 0.0
    deliveries = sum(len(b.sent) for b in bursts)
    return (cpu - idle) / deliveries if deliveries else float("nan")


def coalesce_checks(c: Coalesce) -> tuple[dict, list[str]]:
    on, off = of_mode(c, "on"), of_mode(c, "off")
    pushes = [rec for b in c.bursts for rec in b.pushes]
    valid = sum(1 for rec in pushes if rec["valid"])
    facts = sum(facts_once(b) for b in on)
    accepted = sum(len(b.sent) for b in on)
    full = all(len(b.sent) == c.k for b in c.bursts) and not c.errors
    one = {"messages": all(len(b.messages) == 1 for b in on), "pushes": all(len(b.pushes) == 1 for b in on),
           "events": all(b.events == 1 for b in on)}
    k = {"messages": all(len(b.messages) == c.k for b in off), "pushes": all(len(b.pushes) == c.k for b in off),
         "events": all(b.events == c.k for b in off)}
    ok = {"counts": full and all(one.values()) and all(k.values()), "valid": valid == len(pushes) > 0,
          "facts": facts == accepted == c.k * len(on)}
    lines = [f"deliveries accepted {sum(len(b.sent) for b in c.bursts):,} of {c.k * len(c.bursts):,}; trigger POST "
             f"errors {dict(c.errors) or 'none'}",
             f"coalescing on: one message / push / event in every burst: {one}; off: {c.k} of each: {k}",
             f"signatures: {valid:,} of {len(pushes):,} pushes verified by `standardwebhooks`",
             f"facts: {facts:,} of {accepted:,} deliveries of the coalescing bursts in exactly one section of exactly "
             "one message"]
    return ok, lines


def coalesce_figures(c: Coalesce, ok: dict) -> list[dict]:
    on, off = of_mode(c, "on"), of_mode(c, "off")
    late = [x for b in on for x in close_to_push(b, c.window)]
    plain = [x for b in off for x in stored_to_push(b)]

    def mean(values: list[int]) -> float:
        return sum(values) / len(values) if values else float("nan")
    counts = {name: (mean(per_burst(on, fn)), mean(per_burst(off, fn)))
              for name, fn in (("messages", lambda b: len(b.messages)), ("pushes", lambda b: len(b.pushes)),
                               ("message.created events", lambda b: b.events))}
    cpu_on, cpu_off = cpu_per_delivery(c, "on"), cpu_per_delivery(c, "off")
    pushes = sum(len(b.pushes) for b in c.bursts)
    return [
        *[figure(f"{name} per burst of {c.k} wakes of one conversation within {c.burst_seconds:g} s, coalescing "
                 f"{c.window} s vs off ({len(on)} + {len(off)} bursts)", fmt(a, 2), fmt(b, 2), a / b,
                 f"1 vs {c.k}", ok["counts"]) for name, (a, b) in counts.items()],
        figure(f"window closed (first wake + {c.window} s) → receiver got the push, p50 / p99 (baseline: coalescing "
               "off, wake stored → push)", f"{fmt(pct(late, 50), 2)} / {fmt(pct(late, 99), 2)} s",
               f"{fmt(pct(plain, 50), 2)} / {fmt(pct(plain, 99), 2)} s", None, f"p99 ≤ {CLOSE_GOAL:g} s",
               pct(late, 99) <= CLOSE_GOAL and ok["counts"]),
        figure("pushes with valid signatures (standardwebhooks) / facts in exactly one coalesced section",
               f"{sum(1 for b in c.bursts for rec in b.pushes if rec['valid']):,} of {pushes:,} / "
               f"{sum(facts_once(b) for b in on):,} of {sum(len(b.sent) for b in on):,}", "—", None, "all",
               ok["valid"] and ok["facts"]),
        figure("worker CPU per fired delivery, coalescing on vs off (net of idle polling)",
               f"{fmt(1000 * cpu_on, 2)} ms", f"{fmt(1000 * cpu_off, 2)} ms", cpu_on / cpu_off, f"≤ {CPU_GOAL:g}",
               cpu_on / cpu_off <= CPU_GOAL),
    ]


def burst_line(b: Burst, window: int) -> str:
    late = close_to_push(b, window) if b.mode == "on" else stored_to_push(b)
    n = len(b.sent) or 1
    return (f"| {b.mode} {b.tag} | {len(b.sent)} | {len(b.messages)} | {len(b.pushes)} | {b.events} | "
            f"{fmt(1000 * max(late, default=float('nan')))} | {fmt(1000 * b.worker_cpu / n, 2)} | "
            f"{fmt(1000 * b.scheduler_cpu / n, 2)} | {fmt(b.seconds, 2)} |")


def coalesce_report(args, header: list[str], vers: str, c: Coalesce, notes: list[str]) -> str:
    ok, lines_checks = coalesce_checks(c)
    rows = coalesce_figures(c, ok)
    record("wake_push_coalesce", rows)
    on, off = of_mode(c, "on"), of_mode(c, "off")
    met = {True: "yes", False: "NO", None: "—"}
    ms_pair = lambda v: f"{ms(v, 50)} / {ms(v, 99)}"  # noqa: E731
    return "\n".join([
        "# Vigil wake coalescing: K wakes of one conversation within a second, one message and one push", "",
        *header, f"- {vers}",
        f"- Vigil as for the plain case (`vigil web`, `python -m dramatiq tasks.main --processes 1 --threads 4`, "
        f"dramatiq_worker_timeout {args.worker_timeout}, `vigil scheduler`, tick 1 s); PostgreSQL database {push.DB_NAME}, "
        f"Redis db {push.REDIS_DB}; one wake endpoint (the receiver)",
        f"- two conversations of {c.k} unsigned webhook monitors each (tool endpoint): `{CONVERSATIONS['on']}` with "
        f"context.coalesce_seconds {c.window}, `{CONVERSATIONS['off']}` with 0; a burst is one delivery to each of "
        f"its {c.k} monitors, {1000 * c.burst_seconds / c.k:.0f} ms apart, from one keep-alive client; bursts "
        f"{', '.join(BURST_ORDER)} …, {len(on)} + {len(off)}, each until the receiver has all its pushes",
        f"- CPU: thread CPU (schedstat) of the worker's tree and of the scheduler over each burst's busy spans (with "
        f"coalescing on the wait for the window's close is left out, from 0.2 s before it); net = minus what idling "
        f"as long costs (worker {fmt(1000 * c.idle_worker_cpu, 1)} ms/s, scheduler "
        f"{fmt(1000 * c.idle_scheduler_cpu, 1)} ms/s, read in this run)", "",
        "| burst | accepted | messages | pushes | events | slowest push ms (on: from the close; off: from stored) | "
        "worker CPU ms/delivery | scheduler CPU ms/delivery | span s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|", *[burst_line(b, c.window) for b in c.bursts], "",
        f"- coalescing on: window closed → message stored (the tick) p50 / p99 "
        f"{ms_pair([x for b in on for x in close_to_stored(b, c.window)])} ms; stored → push "
        f"{ms_pair([x for b in on for x in stored_to_push(b)])} ms",
        f"- worker CPU per delivery, raw: on {fmt(1000 * cpu_per_delivery(c, 'on', net=False), 2)} ms, off "
        f"{fmt(1000 * cpu_per_delivery(c, 'off', net=False), 2)} ms; scheduler net: on "
        f"{fmt(1000 * cpu_per_delivery(c, 'on', which='scheduler'), 2)} ms, off "
        f"{fmt(1000 * cpu_per_delivery(c, 'off', which='scheduler'), 2)} ms (the tick writes the coalesced message)",
        "", "| figure | Vigil | baseline | ratio | goal | met? |", "|---|---:|---:|---:|---:|:---:|",
        *[f"| {x['figure']} | {x['vigil']} | {x['baseline']} | "
          f"{'—' if x['ratio'] is None else format(x['ratio'], '.2f')} | {x['goal']} | {met[x['met']]} |"
          for x in rows], "",
        "Checks:", "", *[f"- {line}" for line in lines_checks + notes]]) + "\n"


def coalesce_main(args, header: list[str], procs: Processes) -> int:
    use_target(COALESCE_DB, COALESCE_REDIS_DB)
    s, started = Stack(procs), time.monotonic()
    c = Coalesce(args.burst_size, args.window, args.burst_seconds)
    stream = None
    try:
        print(f"setting up (database {push.DB_NAME}, Redis db {push.REDIS_DB}) …", flush=True)
        start_vigil(s, args.worker_timeout)
        register(s)
        for mode, conversation in CONVERSATIONS.items():
            c.links[mode] = create_monitors(s, c.k, conversation, c.window if mode == "on" else 0)
            c.conversation[mode] = s.db.scalar("SELECT id FROM conversations WHERE external_id = %s", (conversation,))
        stream = MessageStream(s.port, s.token, c.run)
        require(stream.connected.wait(10), "the event stream did not connect")
        coalesce_rounds(s, c, args.bursts)
        time.sleep(1)  # a doubled push, if any, would be here by now
        s.receiver.refresh()
        read_bursts(s.db, s.receiver, stream.messages, c.bursts, c.run)
        text = coalesce_report(args, header, versions(), c, run_notes(procs, (WEB, WORKER, SCHEDULER, RECEIVER),
                                                                      started))
    except (KeyboardInterrupt, BenchError, subprocess.SubprocessError, requests.RequestException) as exc:
        return failed(exc)
    finally:
        close_stack(s, procs, stream)
    return publish("wake_push_coalesce.md", text)


