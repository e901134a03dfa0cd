#!/usr/bin/env python
"""Stream-lines benchmark: a line a paired device's watched command prints → its wake stored → the
`message.created` event on the owner's stream, and what the runner spends on a line, beside a bare loop that
POSTs each line to a bare endpoint.

    .venv/bin/python bench/stream_lines.py [--rate 5] [--seconds 20] [--burst 500] [--flood 4000] [--idle 3]
                                           [--embedded]

Vigil runs as in production: `vigil web` (1 process), `python -m dramatiq tasks.main --processes 1 --threads 4`,
`vigil scheduler`, on PostgreSQL (database vigil_bench_stream, created if missing, schema recreated) and Redis
(db 6, flushed), with one real `vigil runner` subprocess paired to it (`vigil device pair-code`, `vigil runner
pair`, approval mode full) and MONITOR_MAX_WAKES_PER_HOUR raised so no watch is paused.
Each load gets a stream monitor of its own (the flood guard counts lines per watch) whose command is
bench/stream_bare.py's printer: `t=<time.time()> n=<k>` a line, flushed, on orders from a FIFO:
`--rate` lines/s for `--seconds`, a `--burst` as fast as it prints, a `--flood` (well under the 5,000-line guard).

Measured for every line: printed → its wake's messages.created_at (naive UTC, this machine's clock) and printed
→ its `message.created` event at an SSE client on /api/events (bearer token); wakes per line (the framer merges
lines within 200 ms); lines/s from the first printed to the last stored; CPU (/proc utime+stime) of the runner
process alone (the watched command is its child, and left out), of `vigil web` and of the database's PostgreSQL
backends, per line. The baseline, in the same run and fed the same lines by the same printer through a pipe:
bench/stream_bare.py's `loop` (one urllib POST a line, like `while read line; do curl -d "$line" …; done`) to
its `serve` (http.server, one log line a POST). Nothing asserts on time; goal: p99 ≤ 400 ms at --rate, printed
→ SSE event, 200 ms batching window included; and the web process's CPU per line batch (a `lines` record) ≤ 2 ms.
With --embedded it runs Vigil as the default install does instead (bench/stream_embedded.py): one `vigil serve` on
SQLite in a temporary VIGIL_DATA_DIR, no PostgreSQL or Redis, the same runner, loads and baseline; its report is
bench/results/stream_lines_embedded.md. See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
import requests  # noqa: E402

from bench import common, quiet_checks  # noqa: E402
from bench.common import (  # noqa: E402
    PYTHON, VIGIL, BenchError, Db, Processes, clean_up, cpu_since, failed, figure, free_port, hold_signals, prepare,
    publish, record, threads_cpu, tree_pids, versions, wait_listening,
)
from bench.stream_embedded import description as embedded_description, start_embedded  # noqa: E402
from bench.stream_parts import (  # noqa: E402
    PHASE_HEADER, LineEvents, Phase, backends, checks, count_lines, cpu_figures, fmt, open_control, p99, pct,
    phase_row, ratio, read_received, read_wakes, wait_until, waited_rows,
)
from tests.processes import vigil as vigil_command  # noqa: E402

DB_NAME = "vigil_bench_stream"
REDIS_URL = "redis://127.0.0.1:6379/6"
EMAIL = "stream-bench@example.com"
DEVICE = "bench-device"
BARE = ROOT / "bench" / "stream_bare.py"
GOAL_P99_MS = 400.0
#: process (and log file) names: another benchmark may be running at the same moment with its own
WEB, WORKER, SCHEDULER, RUNNER, ENDPOINT = "stream-web", "stream-worker", "stream-scheduler", "stream-runner", \
    "stream-endpoint"
NAMES = {"web": WEB, "worker": WORKER, "scheduler": SCHEDULER, "runner": RUNNER, "endpoint": ENDPOINT,
         "prefix": "stream"}
#: --embedded: `serve` is the one Vigil process
EMBEDDED_NAMES = {"web": "stream-embedded-serve", "runner": "stream-embedded-runner",
                  "endpoint": "stream-embedded-endpoint", "prefix": "stream-embedded"}
SETTLE_SECONDS = 0.25  # after the last line arrives, for the acknowledgements' last CPU


def vigil_env(port: int) -> dict:
    return {"DATABASE_URL": common.database_url(DB_NAME), "REDIS_URL": REDIS_URL, "LOG_LEVEL": "WARNING",
            "PUBLIC_API_BASE_URL": f"http://127.0.0.1:{port}", "dramatiq_worker_timeout": "100",
            "MONITOR_MAX_WAKES_PER_HOUR": "1000000", "MONITOR_MAX_FIRES_PER_CONVERSATION_DAY": "1000000", "API_RATE_PER_MINUTE": "100000",
            "SECRET_KEY": quiet_checks.VIGIL_ENV["SECRET_KEY"],
            "VIGIL_DATA_DIR": quiet_checks.VIGIL_ENV["VIGIL_DATA_DIR"]}


@dataclass
class Stack:
    """What the phases use: the processes, the bench's database connection, the owner's token and stream."""

    procs: Processes
    tmp: Path
    embedded: bool = False
    names: dict = field(default_factory=lambda: NAMES)
    db: Db | None = None
    port: int = 0
    token: str = ""
    web: subprocess.Popen | None = None
    runner: subprocess.Popen | None = None
    others: list[subprocess.Popen] = field(default_factory=list)  # the worker and the scheduler (production)
    endpoint: subprocess.Popen | None = None
    endpoint_url: str = ""
    endpoint_log: Path | None = None
    events: LineEvents | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


# ----------------------------------------------------------------------------------------------
# set-up


def start_vigil(s: Stack) -> None:
    """A fresh database and Redis db, an owner with a token, web + worker + scheduler, a paired runner."""
    common.fresh_database(DB_NAME)
    redis.Redis.from_url(REDIS_URL).flushdb()
    s.port = free_port()
    env = vigil_env(s.port)
    try:
        vigil_command("migrate", env=env)
        vigil_command("user", "create", EMAIL, "--password", "bench-password-not-secret", env=env)
        s.token = vigil_command("token", "create", "--user", EMAIL, env=env).strip().splitlines()[-1]
        code = vigil_command("device", "pair-code", "--user", EMAIL, "--name", DEVICE, env=env).split()[-1]
    except AssertionError as exc:
        raise BenchError(str(exc)) from None
    s.db = Db(DB_NAME, "stream-bench")
    s.web = s.procs.start(WEB, [VIGIL, "web", "--host", "127.0.0.1", "--port", str(s.port)], env)
    s.others = [s.procs.start(WORKER, [PYTHON, "-m", "dramatiq", "tasks.main", "--processes", "1", "--threads", "4"],
                              env), s.procs.start(SCHEDULER, [VIGIL, "scheduler"], env)]
    wait_listening(s.port, s.procs)
    state = s.tmp / "runner-state"
    paired = subprocess.run([VIGIL, "runner", "pair", "--server", s.base, "--code", code, "--state-dir", str(state)],
                            capture_output=True, text=True, timeout=60)
    if paired.returncode != 0:
        raise BenchError(f"vigil runner pair failed: {paired.stderr}")
    s.runner = s.procs.start(RUNNER, [VIGIL, "runner", "--state-dir", str(state)])
    s.db.query("UPDATE devices SET approval_mode = 'full' WHERE name = %s", (DEVICE,))


def device_online(s: Stack) -> bool:
    answer = requests.get(f"{s.base}/api/devices", headers={"Authorization": f"Bearer {s.token}"}, timeout=10)
    return any(d["name"] == DEVICE and d["online"] for d in answer.json().get("devices", []))


def start_endpoint(s: Stack) -> None:
    port = free_port()
    s.endpoint_log = s.tmp / "endpoint.log"
    s.endpoint_log.touch()
    s.endpoint = s.procs.start(s.names["endpoint"], [PYTHON, str(BARE), "serve", "--port", str(port),
                                          "--log", str(s.endpoint_log)])
    wait_listening(port, s.procs)
    s.endpoint_url = f"http://127.0.0.1:{port}/"


def create_watch(s: Stack, conversation: str, description: str, command: str) -> str:
    """A stream monitor through the tool endpoint, armed at once (the device's approval mode is full)."""
    answer = requests.post(f"{s.base}/api/tool/monitor", headers={"Authorization": f"Bearer {s.token}"}, timeout=30,
                           json={"action": "monitor_create",
                                 "context": {"conversation_id": conversation, "channel": "chat", "agent_id": "bench"},
                                 "arguments": {"description": description, "on_match": "Tell the user.",
                                               "source": {"type": "command", "device": DEVICE, "mode": "stream",
                                                          "command": command}}})
    body = answer.json()
    if answer.status_code != 200 or not body.get("ok") or body["result"].get("status") != "active":
        raise BenchError(f"monitor_create failed: {answer.status_code} {body}")
    return body["result"]["monitor_id"]


# ----------------------------------------------------------------------------------------------
# phases


def start_watch(s: Stack, name: str, tag: str) -> tuple[str, str, object]:
    """A stream monitor whose printer is running and whose `started` record is stored: (monitor id,
    conversation, the printer's control FIFO open for writing)."""
    conversation, fifo = f"stream-bench-{tag}", s.tmp / f"vigil-{tag}.ctl"
    os.mkfifo(fifo)
    command = f"{shlex.quote(PYTHON)} {shlex.quote(str(BARE))} print --control {shlex.quote(str(fifo))}"
    monitor_id = create_watch(s, conversation, f"bench stream {name}", command)
    s.events.monitor_ids.add(monitor_id)
    control = open_control(str(fifo), s.procs)
    wait_until(lambda: s.db.scalar("SELECT coalesce(max(acked_seq), 0) FROM command_runs WHERE monitor_id = %s",
                                   (monitor_id,)) >= 1, f"{name}: the watch's `started` record", 30, s.procs, 0.1)
    time.sleep(0.5)
    return monitor_id, conversation, control


def idle_cpu(s: Stack, seconds: float) -> tuple[float, float, float]:
    """CPU seconds a second of the runner, of `vigil web` (`vigil serve`) and of the rest of the server side (the
    worker's tree, the scheduler and PostgreSQL; nothing embedded) while nothing is printed."""
    rest = [pid for proc in s.others for pid in tree_pids(proc.pid)] + ([] if s.embedded else backends(s.db))
    runner0, web0, rest0 = threads_cpu([s.runner.pid]), threads_cpu([s.web.pid]), threads_cpu(rest)
    time.sleep(seconds)
    return tuple(cpu_since(before, pids) / seconds for before, pids in ((runner0, [s.runner.pid]),
                                                                       (web0, [s.web.pid]), (rest0, rest)))


def vigil_phase(s: Stack, name: str, tag: str, order: str, count: int, timeout: float,
                idle: float = 0.0) -> tuple[Phase, tuple[float, float, float] | None]:
    """One load through a watch of its own; first, when `idle` is given, the idle CPU a second with the watch open
    (see idle_cpu)."""
    monitor_id, conversation, control = start_watch(s, name, tag)
    idle_rate = idle_cpu(s, idle) if idle else None
    phase, arrived, runner, web = Phase(name, "Vigil", count), s.events.lines[monitor_id], [s.runner.pid], [s.web.pid]
    pg = [] if s.embedded else backends(s.db)  # the web, worker and scheduler pools' connections, open by now
    others = [pid for proc in s.others for pid in tree_pids(proc.pid)]  # dramatiq's CLI and its forked worker
    cpu0, web0, pg0, others0 = threads_cpu(runner), threads_cpu(web), threads_cpu(pg), threads_cpu(others)
    start = time.monotonic()
    control.write(order)
    wait_until(lambda: len(arrived) >= count, f"{name}: all {count:,} lines on /api/events", timeout, s.procs)
    time.sleep(SETTLE_SECONDS)
    phase.device_cpu, phase.server_cpu = cpu_since(cpu0, runner), cpu_since(web0, web)
    phase.pg_cpu = float("nan") if s.embedded else cpu_since(pg0, backends(s.db))
    phase.other_cpu, phase.window = cpu_since(others0, others), time.monotonic() - start
    control.write("quit\n")
    control.close()
    wait_until(lambda: monitor_id in s.events.ended, f"{name}: the watch's exit wake", 30, s.procs, 0.05)
    phase.streamed = dict(arrived)
    read_wakes(s.db, conversation, phase)
    phase.posts, phase.batches = s.db.query("SELECT count(DISTINCT r.received_at), count(*) FROM run_records r "
                                            "JOIN command_runs c ON c.id = r.run_id WHERE c.monitor_id = %s "
                                            "AND r.kind = 'lines'", (monitor_id,))[0]
    return phase, idle_rate


def baseline_phase(s: Stack, name: str, tag: str, order: str, count: int, timeout: float) -> Phase:
    """The same load from the same printer, through a pipe into the bare loop, to the bare endpoint."""
    control_fifo, out_fifo = s.tmp / f"bare-{tag}.ctl", s.tmp / f"bare-{tag}.out"
    os.mkfifo(control_fifo)
    os.mkfifo(out_fifo)
    offset = s.endpoint_log.stat().st_size
    names = (f"{s.names['prefix']}-printer-{tag}", f"{s.names['prefix']}-loop-{tag}")
    printer = s.procs.start(names[0], [PYTHON, str(BARE), "print", "--control", str(control_fifo),
                                       "--out", str(out_fifo)])
    loop = s.procs.start(names[1], [PYTHON, str(BARE), "loop", "--url", s.endpoint_url, "--input", str(out_fifo)])
    control = open_control(str(control_fifo), s.procs)
    time.sleep(0.5)
    phase = Phase(name, "baseline", count)
    cpu0, end0, start = threads_cpu([loop.pid]), threads_cpu([s.endpoint.pid]), time.monotonic()
    control.write(order)
    wait_until(lambda: count_lines(s.endpoint_log, offset) >= count, f"{name}: all {count:,} lines at the bare "
               "endpoint", timeout, s.procs, 0.05)
    time.sleep(SETTLE_SECONDS)
    phase.device_cpu, phase.server_cpu = cpu_since(cpu0, [loop.pid]), cpu_since(end0, [s.endpoint.pid])
    phase.window = time.monotonic() - start
    control.write("quit\n")
    control.close()
    for proc in (printer, loop):
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
    s.procs.stop(*names)
    read_received(s.endpoint_log, offset, phase)
    return phase


def run_phases(s: Stack, args) -> tuple[list[tuple[Phase, Phase]], tuple[float, float, float] | None]:
    """(Vigil, baseline) for each load, in turn."""
    paced_count = round(args.rate * args.seconds)
    loads = [(f"{args.rate:g} lines/s", "paced", f"pace {args.rate} {paced_count}\n", paced_count,
              args.seconds + 30, args.idle),
             (f"burst of {args.burst:,}", "burst", f"burst {args.burst}\n", args.burst, 60, 0.0),
             (f"flood of {args.flood:,}", "flood", f"burst {args.flood}\n", args.flood, 120, 0.0)]
    pairs, idle_rate = [], None
    for name, tag, order, count, timeout, idle in loads:
        print(f"{name}: Vigil (watch, runner, web) …", flush=True)
        vigil, rate = vigil_phase(s, name, tag, order, count, timeout, idle)
        idle_rate = rate if rate is not None else idle_rate
        print(f"  {len(vigil.streamed):,}/{count:,} lines on the stream in {vigil.wakes:,} wakes, printed → SSE p50 "
              f"{fmt(pct(vigil.latencies(vigil.streamed), 50))} ms, p99 {fmt(p99(vigil.latencies(vigil.streamed)))} "
              f"ms; {fmt(vigil.rate, 0)} lines/s", flush=True)
        print(f"{name}: baseline (bare loop → bare endpoint) …", flush=True)
        bare = baseline_phase(s, name, tag, order, count, timeout)
        print(f"  {len(bare.stored):,}/{count:,} lines received, printed → received p50 "
              f"{fmt(pct(bare.latencies(bare.stored), 50))} ms, p99 {fmt(p99(bare.latencies(bare.stored)))} ms; "
              f"{fmt(bare.rate, 0)} lines/s", flush=True)
        pairs.append((vigil, bare))
    return pairs, idle_rate


# ----------------------------------------------------------------------------------------------
# report


def figures(pairs: list[tuple[Phase, Phase]]) -> list[dict]:
    """The summary's rows: latency at the paced rate and in the burst, flood throughput, runner CPU a line."""
    (paced, paced_b), (burst, burst_b), (flood, flood_b) = pairs
    stored, received = paced.latencies(paced.stored), paced_b.latencies(paced_b.stored)
    rows = [figure(f"stream line printed → wake stored p50 / p99, {paced.name} (baseline: bare POST-a-line loop, "
                   "printed → received)", f"{fmt(pct(stored, 50))} / {fmt(p99(stored))} ms",
                   f"{fmt(pct(received, 50))} / {fmt(p99(received))} ms", ratio(p99(stored), p99(received)))]
    for vigil, bare, goal in ((paced, paced_b, GOAL_P99_MS), (burst, burst_b, None)):
        v, b = vigil.latencies(vigil.streamed), bare.latencies(bare.stored)
        met = p99(v) <= goal and len(vigil.streamed) == vigil.count and not vigil.lost if goal else None
        rows.append(figure(f"stream line printed → SSE event p50 / p99, {vigil.name} (baseline: bare POST-a-line "
                           "loop, printed → received)", f"{fmt(pct(v, 50))} / {fmt(p99(v))} ms",
                           f"{fmt(pct(b, 50))} / {fmt(p99(b))} ms", ratio(p99(v), p99(b)),
                           f"p99 ≤ {GOAL_P99_MS:g} ms" if goal else "—", met))
    rows.append(figure(f"wakes per line at {paced.name} (lines within 200 ms share a wake)",
                       f"{fmt(paced.wakes / len(paced.stored) if paced.stored else float('nan'), 2)} "
                       f"({len(paced.waited)} of {paced.count} lines waited for a later one)", "1 POST a line", None))
    rows.append(figure(f"lines/s one runner + one Vigil server sustain, {flood.name} (first printed → last stored)",
                       f"{fmt(flood.rate, 0)}/s", f"{fmt(flood_b.rate, 0)}/s", ratio(flood.rate, flood_b.rate)))
    for vigil, bare in ((paced, paced_b), (flood, flood_b)):
        rows.append(figure(f"runner CPU per line, {vigil.name}, vs bare POST-a-line loop",
                           f"{fmt(vigil.per_line(vigil.device_cpu), 3)} ms",
                           f"{fmt(bare.per_line(bare.device_cpu), 3)} ms",
                           ratio(vigil.device_cpu / vigil.count, bare.device_cpu / bare.count)))
    return rows


def report(args, header: list[str], vers: str, pairs: list[tuple[Phase, Phase]],
           idle_rate: tuple[float, float, float] | None, events: LineEvents, notes: list[str]) -> tuple[str, str]:
    """The report's text and its goal line."""
    server = "`vigil serve`" if args.embedded else "`vigil web`"
    cpu_rows, goal = cpu_figures(pairs, idle_rate, server)
    rows = figures(pairs) + cpu_rows
    record("stream_lines_embedded" if args.embedded else "stream_lines", rows)
    met = {True: "yes", False: "NO", None: "—"}
    vigil = (embedded_description() if args.embedded else
             f"- Vigil: `vigil web` (1 process), `python -m dramatiq tasks.main --processes 1 --threads 4`, `vigil "
             f"scheduler`; PostgreSQL database {DB_NAME}, Redis db 6")
    lines = [f"# Vigil stream lines{', embedded' if args.embedded else ''}: printed → wake stored → SSE event, beside "
             "a bare POST-a-line loop", "", *header, f"- {vers}", vigil,
             f"- one `vigil runner` paired as device "
             f"{DEVICE!r} (approval mode full); a stream monitor (no check: every line wakes) a load, its command "
             "bench/stream_bare.py's printer (output to the runner's file, tailed every 50 ms, lines framed in 200 ms "
             "batches, spooled in SQLite, POSTed as records)",
             "- Baseline: the same printer and orders, its output piped into bench/stream_bare.py `loop` (one urllib "
             "POST a line, a new connection each, as the runner's client makes them) to `serve` (stdlib http.server, "
             "one log line a POST)",
             f"- Loads, Vigil then baseline each: {args.rate:g} lines/s for {args.seconds:g} s; a burst of "
             f"{args.burst:,} and a flood of {args.flood:,} lines printed as fast as the printer writes (a write and "
             "flush a line). Device CPU: the runner process alone (its watched command left out), or the bare loop; "
             f"server CPU: {server}, or the bare endpoint; from the order to the last line's arrival + "
             f"{SETTLE_SECONDS} s; a line batch is one `lines` record (the lines the runner read within 200 ms of the "
             "batch's first), or one POST of the baseline", "", f"**{goal}**", "",
             *PHASE_HEADER, *[phase_row(p) for pair in pairs for p in pair], "",
             f"Printed → SSE event at {pairs[0][0].name}, by the line's place in its wake (the framer closes a batch "
             "200 ms after the last line it read and reads every 50 ms, so a line printed 200 ms after the one before "
             "may be read less than 200 ms after it and join its batch; the earlier line then waits ~200 ms more):",
             "", "| load | lines | n | p50 / p99 / max ms |", "|---|---|---:|---:|", *waited_rows(pairs[0][0]), "",
             "| figure | Vigil | baseline | ratio | goal | met? |", "|---|---:|---:|---:|---:|:---:|",
             *[f"| {r['figure']} | {r['vigil']} | {r['baseline']} | "
               f"{fmt(float('nan') if r['ratio'] is None else r['ratio'], 2)} | {r['goal']} | {met[r['met']]} |"
               for r in rows], ""]
    lines += ["Notes:", ""]
    if idle_rate is not None:
        runner, web, rest = (1000 * rate for rate in idle_rate)
        lines.append(f"- idle, one watch open, {args.idle:g} s before the paced load: the runner (tail every 50 ms, "
                     f"long-poll, uploader) {fmt(runner, 2)} CPU-ms a second, so {fmt(runner / args.rate, 2)} ms of "
                     f"its CPU a line at {args.rate:g} lines/s is the watch just being open (the bare loop, blocked "
                     f"in read(), spends nothing idle); {server} {fmt(web, 2)} CPU-ms a second "
                     f"({fmt(web / args.rate, 2)} ms a line at that rate)"
                     + ("" if args.embedded else f"; the worker's tree, the scheduler and PostgreSQL {fmt(rest, 2)} "
                        "CPU-ms a second"))
    lines.append("- first to last line printed, Vigil (to the runner's file) / baseline (to a pipe): " + ", ".join(
        f"{vigil.name} {fmt(1000 * vigil.print_span)} / {fmt(1000 * bare.print_span)} ms" for vigil, bare in pairs)
        + "; a printer blocks once the 64 KiB pipe is full, so the baseline's later flood lines are stamped only "
        "when the loop has taken the earlier ones, which flatters its latency (not its lines/s)")
    flood, names, vigils = pairs[-1][0], events.names, [vigil for vigil, _ in pairs]
    lines.append(f"- the {flood.name} reached {server} in {flood.posts} POST(s) carrying {flood.batches} `lines` "
                 "record(s), so its lines/s is how fast one flood gets through, not a rate kept up for long; each "
                 "POST is one transaction and its events are published after it commits, so a POST's first lines "
                 "reach the stream with its last")
    if not args.embedded:
        lines.append("- server-side CPU beside `vigil web`'s, per line: the worker's tree and the scheduler "
                     + ", ".join(f"{v.name} {fmt(v.per_line(v.other_cpu), 3)} ms" for v in vigils)
                     + "; Redis's CPU is not counted")
    lines.append(f"- the event stream carried {names['monitor.updated']} `monitor.updated`, "
                 f"{names['conversation.updated']} `conversation.updated` and {names['device.work']} `device.work` "
                 f"events beside {sum(v.wakes for v in vigils)} line wakes in {sum(v.posts for v in vigils)} lines "
                 "POSTs: a records POST publishes only its wakes' `message.created`; the other three come from "
                 "each watch's creation and its end (its status moving)")
    lines += [f"- {note}" for note in notes]
    return "\n".join(lines) + "\n", goal


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=5.0, help="paced lines a second (default 5)")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the paced load (default 20)")
    parser.add_argument("--burst", type=int, default=500, help="lines of the burst (default 500)")
    parser.add_argument("--flood", type=int, default=4000, help="lines of the flood (default 4000; < 5000, the "
                        "flood guard)")
    parser.add_argument("--idle", type=float, default=3.0, help="seconds the runner's idle CPU is read (default 3)")
    parser.add_argument("--embedded", action="store_true", help="`vigil serve` on SQLite instead of web, worker and "
                        "scheduler on PostgreSQL and Redis")
    args = parser.parse_args(argv)
    if not (0 < args.rate * args.seconds < 5000 and 0 < args.burst < 5000 and 0 < args.flood < 5000):
        parser.error("each load must be 1 to 4,999 lines (the flood guard stops a watch at 5,000)")
    header, procs = prepare()
    s = Stack(procs, Path(tempfile.mkdtemp(prefix="vigil-bench-stream-")), args.embedded,
              EMBEDDED_NAMES if args.embedded else NAMES)
    started = time.monotonic()
    try:
        print(f"setting up ({'vigil serve on SQLite' if args.embedded else f'database {DB_NAME}, Redis db 6'}, a "
              "paired runner) …", flush=True)
        if args.embedded:
            start_embedded(s, vigil_env, EMAIL, DEVICE, s.names)
        else:
            start_vigil(s)
        wait_until(lambda: device_online(s), "the device online", 30, s.procs, poll=0.2)
        start_endpoint(s)
        s.events = LineEvents(s.port, s.token)
        if not s.events.connected.wait(10):
            raise BenchError("the event stream did not say it was connected")
        pairs, idle_rate = run_phases(s, args)
        logs = {name: (procs.logs / f"{name}.log").read_text(errors="replace")
                for name in (s.names[key] for key in ("runner", "web", "worker") if key in s.names)}
        notes = checks([p for pair in pairs for p in pair], s.events, logs)
        notes.append(f"whole run {time.monotonic() - started:.0f} s; load average at end "
                     f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
        vers = f"SQLite {sqlite3.sqlite_version} (no PostgreSQL or Redis)" if args.embedded else versions()
        text, goal = report(args, header, vers, pairs, idle_rate, s.events, notes)
    except (KeyboardInterrupt, BenchError) as exc:
        return failed(exc)
    finally:
        if s.events is not None:
            s.events.close()
        if args.embedded:  # no Redis of its own to empty
            hold_signals()
            procs.stop()
        else:
            clean_up(procs, REDIS_URL)
        if s.db is not None:
            s.db.close()
        shutil.rmtree(s.tmp, ignore_errors=True)
    code = publish("stream_lines_embedded.md" if args.embedded else "stream_lines.md", text)
    print(goal)
    return code


if __name__ == "__main__":
    sys.exit(main())
