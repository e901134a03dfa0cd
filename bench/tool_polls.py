#!/usr/bin/env python
"""Tool polls: what one poll of a watched declared HTTP tool costs the worker, beside one poll of a JSON source
on the same local endpoint; quiet polls (the output unchanged, the common case) and polls whose output changed;
a 2-step tool beside the 1-step one.

    .venv/bin/python bench/tool_polls.py [--watches 500] [--blocks 2] [--breakdown 300]

Vigil runs as in production: `vigil web`, `python -m dramatiq tasks.main --processes 1 --threads 4`
(dramatiq_worker_timeout 100, as `vigil worker` runs it), `vigil scheduler` (tick 0.2 s, batch 500), on PostgreSQL
(database vigil_bench_tools, created if missing, schema recreated) and Redis (db 4, flushed; the bench refuses to
start while another client uses that db: a worker there would take this one's check messages).

The endpoint is a local JSON API in a process of its own (bench/tool_parts.py): GET /item/<i>, ~1 KB of an
order's tracking JSON, which checks the tools' Authorization header. The runtime registers two tools with PUT
/api/agents/{agent}/tools/{name} (runtime token), each with that header (a secret): `order_status`, one GET of
/item/{{args.item}}, output.main `steps[0].body`; `order_with_carrier`, that GET and one of /carrier/{{args.item}},
output.main a map of both. One watch of each kind is made through the tool endpoint (monitor_create: a json source
on /item/0 with the CEL check `data.status == 'delivered'`; a tool source on each tool with the same check), and
`--watches` copies of each row are stored directly (same owner: a poll looks its tool up by the monitor's user),
each on its own item. The same CEL check on both kinds, and a 1-step tool whose output is the JSON the source
reads, so the difference is the tool machinery alone: the registry lookup, the fingerprint re-check, decrypting the
header values, templating the step, output.main evaluated in the CEL helper process, the steps' projection.

Rounds: the bench makes all `--watches` monitors of one kind due and waits for a monitor.updated event of each
(the worker publishes one after every check); the worker's CPU is its process tree's (the CEL helper included),
thread by thread from /proc/<pid>/task/*/schedstat. Order json, tool, tool2, tool2, tool, json, `--blocks` times:
this machine's speed drifts within seconds, and the kinds share it. First quiet rounds (nothing changed since the
last poll), then changed rounds: before each, the API's every order changes (a new `generation`), so every poll
reads a new output, runs the check, and records the change (no condition holds: no wake).
Between the two phases, `--breakdown` polls of each kind run in the bench process one step after another, each
step's thread CPU measured, to say where a tool poll's extra goes.
Nothing asserts on time; the figures and how to read them are in docs/performance.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
import requests  # noqa: E402

from bench import common  # noqa: E402
from bench.common import (  # noqa: E402
    PYTHON, RESULTS, VIGIL, BenchError, Db, Processes, clean_up, cpu_since, failed, figure, free_port, prepare,
    publish, record, run_notes, threads_cpu, versions, wait_listening,
)
from bench.tool_parts import (  # noqa: E402
    AGENT, KINDS, LABELS, SECRET, STEPS, Checked, Spent, breakdown, clone_watches, descendants, helper_pids,
    one_step_tool, two_step_tool, watch_arguments,
)
from tests.processes import vigil as vigil_command  # noqa: E402

DB_NAME = "vigil_bench_tools"
DATABASE_URL = common.database_url(DB_NAME)
REDIS_DB = 4
REDIS_URL = f"redis://127.0.0.1:6379/{REDIS_DB}"
EMAIL = "tools-bench@example.com"
SECRET_KEY = "bench-only-secret-key-not-used-for-anything-real"
#: process (and log file) names: another benchmark may be running at the same moment with its own
WEB, WORKER, SCHEDULER, API = "tools-web", "tools-worker", "tools-scheduler", "tools-api"
BLOCK = ("json", "tool", "tool2", "tool2", "tool", "json")
TOOLS = {"tool": ("order_status", one_step_tool), "tool2": ("order_with_carrier", two_step_tool)}
#: seconds a round may take before the bench gives up on it
ROUND_TIMEOUT = 120
IDLE_SECONDS = 3.0


def vigil_env(port: int) -> dict:
    return {"DATABASE_URL": DATABASE_URL, "REDIS_URL": REDIS_URL, "LOG_LEVEL": "WARNING",
            "PUBLIC_API_BASE_URL": f"http://127.0.0.1:{port}", "dramatiq_worker_timeout": "100",
            "FETCH_ALLOW_LOOPBACK": "true", "SCHEDULER_TICK_SECONDS": "0.2", "SCHEDULER_BATCH_SIZE": "500",
            # the three watches made through the tool endpoint belong to one account; nothing else is created
            "MONITOR_MAX_ARMED_TOOL_WATCHES_PER_ACCOUNT": "100", "MONITOR_MAX_ARMED_PER_ACCOUNT": "100",
            "API_RATE_PER_MINUTE": "100000",
            "SECRET_KEY": SECRET_KEY, "VIGIL_DATA_DIR": str(RESULTS / "var")}


def utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


@dataclass
class Stack:
    procs: Processes
    db: Db | None = None
    port: int = 0
    api_port: int = 0
    token: str = ""
    owner: int = 0
    pids: dict = field(default_factory=dict)
    checked: Checked | None = None
    #: item requests the bench expects at the API, by what they carry: json polls none, tool polls the secret
    expected: dict = field(default_factory=lambda: {"item none": 0, "item secret": 0, "carrier": 0})

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def polled(self, kind: str, n: int) -> None:
        self.expected["item none" if kind == "json" else "item secret"] += n
        if kind == "tool2":
            self.expected["carrier"] += n


def require(condition: bool, message: str) -> None:
    if not condition:
        raise BenchError(message)


# ----------------------------------------------------------------------------------------------
# set-up


def start_vigil(s: Stack, watches: int) -> None:
    rds = redis.Redis.from_url(REDIS_URL)
    me = rds.client_id()
    others = [c["addr"] for c in rds.client_list() if c.get("db") == str(REDIS_DB) and c["id"] != str(me)]
    require(not others, f"Redis db {REDIS_DB} is in use by {len(others)} other client(s) ({', '.join(others[:3])}): "
            "another Vigil's worker there would take this bench's check messages; stop it, or change REDIS_DB")
    common.fresh_database(DB_NAME)
    rds.flushdb()
    s.api_port, s.port = free_port(), free_port()
    s.pids[API] = s.procs.start(API, [PYTHON, "-m", "bench.tool_parts", "--port", str(s.api_port),
                                      "--items", str(watches)]).pid
    env = vigil_env(s.port)
    try:
        vigil_command("migrate", env=env)
        vigil_command("user", "create", EMAIL, "--password", "bench-password-not-secret", env=env)
        s.token = vigil_command("token", "create", "--user", EMAIL, env=env).strip().splitlines()[-1]
    except AssertionError as exc:
        raise BenchError(str(exc)) from None
    s.db = Db(DB_NAME, "tools-bench")
    s.owner = s.db.scalar("SELECT id FROM users WHERE email = %s", (EMAIL,))
    s.pids[WEB] = s.procs.start(WEB, [VIGIL, "web", "--host", "127.0.0.1", "--port", str(s.port)], env).pid
    wait_listening(s.port, s.procs)
    wait_listening(s.api_port, s.procs)


def seed(s: Stack, watches: int) -> None:
    """The tools through the registry, one watch of each kind through the tool endpoint, then the copies."""
    headers = {"Authorization": f"Bearer {s.token}"}
    with requests.Session() as http:
        http.trust_env = False
        for kind, (name, make) in TOOLS.items():
            answer = http.put(f"{s.base}/api/agents/{AGENT}/tools/{name}", json=make(s.api), headers=headers,
                              timeout=30)
            require(answer.status_code == 201, f"PUT tool {name}: {answer.status_code} {answer.text[:300]}")
            require(SECRET.split()[-1] not in answer.text, f"PUT tool {name} answered the header value back")
        templates = {}
        for kind in KINDS:
            answer = http.post(f"{s.base}/api/tool/monitor", headers=headers, timeout=30, json={
                "action": "monitor_create", "arguments": watch_arguments(kind, s.api),
                "context": {"conversation_id": f"template-{kind}", "channel": "chat", "agent_id": AGENT}})
            body = answer.json() if answer.headers.get("content-type", "").startswith("application/json") else {}
            require(answer.status_code == 200 and body.get("ok") is True,
                    f"monitor_create ({kind}): {answer.status_code} {answer.text[:400]}")
            require(body["result"]["status"] == "active", f"the {kind} template is {body['result']['status']}")
            templates[kind] = body["result"]["monitor_id"]
    s.expected["item none"] += 1  # the JSON watch's first check at create
    far = utcnow() + timedelta(hours=12)
    s.db.query("UPDATE monitors SET next_check_at = %s", (far,))  # the templates are never polled
    for kind, template in templates.items():
        clone_watches(s.db, template, kind, watches, s.owner, s.api, far)
    s.db.query("ANALYZE")


def start_workers(s: Stack) -> None:
    env = vigil_env(s.port)
    s.pids[WORKER] = s.procs.start(WORKER, [PYTHON, "-m", "dramatiq", "tasks.main", "--processes", "1",
                                            "--threads", "4"], env).pid
    s.pids[SCHEDULER] = s.procs.start(SCHEDULER, [VIGIL, "scheduler"], env).pid
    s.checked = Checked(REDIS_URL, DATABASE_URL, s.owner)


# ----------------------------------------------------------------------------------------------
# rounds


@dataclass
class Round:
    kind: str
    changed: bool
    checks: int = 0
    events: int = 0
    claims: int = 0
    wall: float = 0.0
    worker: float = 0.0   # CPU seconds of the worker's process tree
    helper: float = 0.0   # of which the CEL helper process
    scheduler: float = 0.0
    postgres: float = 0.0
    api: float = 0.0

    def ms(self, seconds: float) -> float:
        return 1000 * seconds / self.checks if self.checks else float("nan")


def claims(s: Stack, kind: str) -> int:
    """The scheduler's claims of the kind's watches so far: each claim counts a check (a recorded change bumps
    claim_seq too, so that is not the count)."""
    return s.db.scalar("SELECT coalesce(sum(check_count), 0) FROM monitors WHERE id LIKE %s", (f"{kind}-%",))


def one_round(s: Stack, kind: str, n: int, changed: bool) -> Round:
    """Make the kind's `n` watches due (after a new generation of the API's answers, when `changed`) and wait
    until each has been checked once; the CPU each process spent meanwhile."""
    if changed:
        requests.post(f"{s.api}/generation", timeout=30).raise_for_status()
    r = Round(kind, changed)
    claims0 = claims(s, kind)
    s.checked.reset()
    worker_pids = descendants(s.pids[WORKER])
    worker0, helper0 = threads_cpu(worker_pids), threads_cpu(helper_pids(s.pids[WORKER]))
    scheduler0, api0 = threads_cpu([s.pids[SCHEDULER]]), threads_cpu([s.pids[API]])
    pg0, started = s.db.backend_cpu(), time.monotonic()
    s.db.query("UPDATE monitors SET next_check_at = %s WHERE id LIKE %s",
               (utcnow() - timedelta(seconds=1), f"{kind}-%"))
    while (seen := s.checked.seen(f"{kind}-"))[0] < n:
        if time.monotonic() - started > ROUND_TIMEOUT:
            raise BenchError(f"only {seen[0]} of {n} {kind} watches checked after {ROUND_TIMEOUT} s;\nworker log:\n"
                             f"{s.procs.tail(WORKER)}")
        s.procs.check_alive()
        time.sleep(0.02)
    r.worker = cpu_since(worker0, descendants(s.pids[WORKER]))
    r.helper = cpu_since(helper0, helper_pids(s.pids[WORKER]))
    r.scheduler, r.api = cpu_since(scheduler0, [s.pids[SCHEDULER]]), cpu_since(api0, [s.pids[API]])
    r.postgres = s.db.backend_cpu_since(pg0)
    r.wall = s.checked.last_at - started
    r.checks, r.events = seen
    r.claims = claims(s, kind) - claims0
    s.polled(kind, r.checks)
    return r


def phase(s: Stack, n: int, blocks: int, changed: bool) -> list[Round]:
    rounds = []
    for b in range(blocks):
        for kind in BLOCK:
            rounds.append(one_round(s, kind, n, changed))
            r = rounds[-1]
            print(f"  {'changed' if changed else 'quiet'} block {b + 1} {LABELS[kind]}: {r.checks} checks in "
                  f"{r.wall:.2f} s ({r.checks / r.wall:.0f}/s), worker {r.ms(r.worker):.2f} ms/check "
                  f"(CEL helper {r.ms(r.helper):.2f})", flush=True)
            time.sleep(0.3)
    return rounds


def idle_cpu(s: Stack) -> float:
    """The worker tree's CPU a second with nothing to do (its consumers poll Redis every 100 ms)."""
    before = threads_cpu(descendants(s.pids[WORKER]))
    time.sleep(IDLE_SECONDS)
    return cpu_since(before, descendants(s.pids[WORKER])) / IDLE_SECONDS


def count_rows(s: Stack) -> dict:
    return {"runs": s.db.scalar("SELECT count(*) FROM monitor_runs"),
            "wakes": s.db.scalar("SELECT count(*) FROM wakes"),
            "not active": s.db.scalar("SELECT count(*) FROM monitors WHERE status <> 'active' OR last_error <> '' "
                                      "OR failure_count <> 0")}


# ----------------------------------------------------------------------------------------------
# report


def total(rounds: list[Round], kind: str, changed: bool) -> Round:
    mine = [r for r in rounds if r.kind == kind and r.changed == changed]
    out = Round(kind, changed)
    for r in mine:
        for name in ("checks", "events", "claims", "wall", "worker", "helper", "scheduler", "postgres", "api"):
            setattr(out, name, getattr(out, name) + getattr(r, name))
    return out


def fmt(value: float, digits: int = 2) -> str:
    return "n/a" if value != value else f"{value:,.{digits}f}"


def block_ratios(rounds: list[Round], changed: bool, kind: str, base: str) -> str:
    """Each block's CPU-per-check ratio kind ÷ base: how far the machine moved within the run."""
    mine = [r for r in rounds if r.changed == changed]
    per = len(BLOCK)
    out = []
    for start in range(0, len(mine), per):
        block = mine[start:start + per]
        a, b = total(block, kind, changed), total(block, base, changed)
        out.append(fmt(round(a.ms(a.worker) / b.ms(b.worker), 3)))
    return ", ".join(out)


def phase_rows(rounds: list[Round], changed: bool) -> list[str]:
    rows = []
    for kind in KINDS:
        t = total(rounds, kind, changed)
        rows.append(f"| {LABELS[kind]} | {t.checks:,} | {t.checks / t.wall:,.0f} | {fmt(t.ms(t.worker), 3)} | "
                    f"{fmt(t.ms(t.helper), 3)} | {fmt(t.ms(t.worker - t.helper), 3)} | {fmt(t.ms(t.postgres), 3)} | "
                    f"{fmt(t.ms(t.scheduler), 3)} | {fmt(t.ms(t.api), 3)} |")
    return rows


def breakdown_rows(spent: dict[str, Spent]) -> list[str]:
    cell = lambda value: "—" if value is None else fmt(value, 0)  # noqa: E731
    rows = [f"| {step} | " + " | ".join(cell(s.per_poll(step)) for s in spent.values()) + " |" for step in STEPS]
    rows.append("| **total: this thread + the helper** | "
                + " | ".join(f"**{fmt(s.total, 0)}**" for s in spent.values()) + " |")
    return rows


def figures(rounds: list[Round]) -> list[dict]:
    q = {kind: total(rounds, kind, False) for kind in KINDS}
    c = {kind: total(rounds, kind, True) for kind in KINDS}
    ms = lambda t: t.ms(t.worker)  # noqa: E731
    rate = lambda t: t.checks / t.wall  # noqa: E731
    return [
        figure("quiet tool poll (1 GET with a secret header, output.main in the CEL helper): worker CPU per check vs "
               "a JSON source on the same endpoint", f"{ms(q['tool']):.3f} ms", f"{ms(q['json']):.3f} ms",
               ms(q["tool"]) / ms(q["json"])),
        figure("quiet polls/s per worker process, 1-step tool vs JSON source", f"{rate(q['tool']):,.0f}/s",
               f"{rate(q['json']):,.0f}/s", rate(q["tool"]) / rate(q["json"])),
        figure("tool poll whose output changed (recorded, no wake): worker CPU per check vs a JSON source that "
               "changed", f"{ms(c['tool']):.3f} ms", f"{ms(c['json']):.3f} ms", ms(c["tool"]) / ms(c["json"])),
        figure("quiet poll, 2-step tool vs 1-step tool: worker CPU per check", f"{ms(q['tool2']):.3f} ms",
               f"{ms(q['tool']):.3f} ms", ms(q["tool2"]) / ms(q["tool"])),
    ]


def checks(s: Stack, rounds: list[Round], n: int, rows0: dict, rows_quiet: dict, rows_end: dict,
           stats: dict) -> list[str]:
    once = all(r.checks == n and r.events == n for r in rounds)
    claimed = sum(r.claims for r in rounds) / sum(r.checks for r in rounds)
    changed_checks = sum(r.checks for r in rounds if r.changed)
    api_ok = all(stats.get(key, 0) == want for key, want in s.expected.items()) and not stats.get("item other")
    return [
        f"every watch checked exactly once a round (one monitor.updated each): "
        + ("OK" if once else "WARNING: " + "; ".join(f"{r.kind} {r.checks}/{r.events}" for r in rounds
                                                      if r.checks != n or r.events != n)),
        f"claims per check: {claimed:.3f} (1.000: no lease expired, no duplicate message)",
        f"events with an error or a status other than active: {len(s.checked.bad)}"
        + (f" (first: {s.checked.bad[0]})" if s.checked.bad else ""),
        f"run rows written by the quiet rounds (and the breakdown): {rows_quiet['runs'] - rows0['runs']} (0 expected); "
        f"by the changed rounds: {rows_end['runs'] - rows_quiet['runs']:,} for {changed_checks:,} checks; wakes "
        f"{rows_end['wakes']}; monitors not active or with an error: {rows_end['not active']}",
        f"API requests: {', '.join(f'{k} {v:,}' for k, v in sorted(stats.items()) if k != 'generation')}; expected "
        f"{', '.join(f'{k} {v:,}' for k, v in sorted(s.expected.items()))}: "
        + ("OK, every tool request carried the decrypted header and no JSON poll did" if api_ok else "WARNING"),
        f"events on the owner's channel: {dict(s.checked.names)}",
    ]


def report(args, header: list[str], vers: str, rounds: list[Round], idle: float, spent: dict[str, Spent],
           lines_checks: list[str], notes: list[str]) -> str:
    rows = figures(rounds)
    record("tool_polls", rows)
    q = {kind: total(rounds, kind, False) for kind in KINDS}
    c = {kind: total(rounds, kind, True) for kind in KINDS}
    # rounded as the summary rounds it (common.figure keeps 3 decimals), so the two never differ
    ratio = lambda a, b: fmt(round(a.ms(a.worker) / b.ms(b.worker), 3), 2)  # noqa: E731
    table_head = ["| kind | checks | checks/s | worker CPU ms/check | … CEL helper | … the rest of the worker | "
                  "PostgreSQL ms/check | scheduler ms/check | API server ms/check |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    return "\n".join([
        "# Vigil tool polls: a watched declared HTTP tool beside a JSON source on the same endpoint", "",
        *header, f"- {vers}",
        f"- Vigil: `vigil web`, `python -m dramatiq tasks.main --processes 1 --threads 4` (dramatiq_worker_timeout "
        f"100), `vigil scheduler` (tick 0.2 s, batch 500); PostgreSQL database {DB_NAME}, Redis db {REDIS_DB}",
        f"- {args.watches:,} watches of each kind, one owner, on a local JSON API (its own process; ~1 KB an order): "
        "a JSON source (`{\"type\": \"json\", \"url\": …/item/i}`), a 1-step tool (GET …/item/{{args.item}} with a "
        "secret Authorization header, output.main `steps[0].body`), a 2-step tool (that GET, then GET "
        "…/carrier/{{args.item}}, output.main a map of both); the same CEL check `data.status == 'delivered'` "
        "(`data.order.status` for the 2-step), never true. One of each made through the tool endpoint, the rest "
        "copies of its row",
        f"- rounds of {args.watches:,} checks of one kind, in the order {', '.join(BLOCK)}, {args.blocks} blocks "
        "quiet, then as many changed (every order's JSON changed before each round); worker CPU is its process "
        "tree's (CEL helper included) from schedstat",
        "", "## Quiet polls (output unchanged)", "", *table_head, *phase_rows(rounds, False), "",
        f"- worker CPU per quiet check, 1-step tool ÷ JSON source: **{ratio(q['tool'], q['json'])}** (blocks "
        f"{block_ratios(rounds, False, 'tool', 'json')}); 2-step ÷ 1-step: **{ratio(q['tool2'], q['tool'])}** "
        f"(blocks {block_ratios(rounds, False, 'tool2', 'tool')})",
        f"- the worker idle: {1000 * idle:.1f} ms of CPU a second (consumers polling Redis), inside every round's "
        "figure as it lasts",
        "", "## Polls whose output changed (the check runs, the change is recorded, no wake)", "", *table_head,
        *phase_rows(rounds, True), "",
        f"- worker CPU per changed check, 1-step tool ÷ JSON source: **{ratio(c['tool'], c['json'])}** (blocks "
        f"{block_ratios(rounds, True, 'tool', 'json')}); 2-step ÷ 1-step: **{ratio(c['tool2'], c['tool'])}**",
        "", f"## Where a quiet poll's CPU goes (in the bench process, {args.breakdown} polls of each kind × "
        f"{args.reps}, one after another)", "",
        "Thread CPU per poll, µs; steps marked … are inside the poll. The claim, the batch's load, the event "
        "and the actor around the poll are the same for every kind and are left out.", "",
        "| step | " + " | ".join(LABELS[k] for k in spent) + " |", "|---|" + "---:|" * len(spent),
        *breakdown_rows(spent), "",
        "| figure | Vigil | baseline | ratio |", "|---|---:|---:|---:|",
        *[f"| {r['figure']} | {r['vigil']} | {r['baseline']} | "
          f"{'—' if r['ratio'] is None else format(r['ratio'], '.2f')} |" for r in rows], "",
        "Per round:", "",
        *[f"- {'changed' if r.changed else 'quiet'} {LABELS[r.kind]}: {r.checks} checks in {r.wall:.2f} s, worker "
          f"{r.ms(r.worker):.3f} ms/check (helper {r.ms(r.helper):.3f}), PostgreSQL {r.ms(r.postgres):.3f}"
          for r in rounds], "",
        "Checks:", "", *[f"- {line}" for line in lines_checks + notes]]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--watches", type=int, default=500, help="watches of each kind (default 500)")
    parser.add_argument("--blocks", type=int, default=2, help=f"blocks of rounds {', '.join(BLOCK)} per phase "
                        "(default 2)")
    parser.add_argument("--breakdown", type=int, default=300, help="polls of each kind in the in-process "
                        "breakdown (default 300; 0: none)")
    parser.add_argument("--reps", type=int, default=3, help="times the breakdown goes round the kinds (default 3)")
    args = parser.parse_args(argv)
    if args.watches < 1 or args.blocks < 1 or args.breakdown < 0 or args.reps < 1:
        parser.error("--watches ≥ 1, --blocks ≥ 1, --breakdown ≥ 0, --reps ≥ 1")
    header, procs = prepare()
    s, started, n = Stack(procs), time.monotonic(), args.watches
    try:
        print(f"setting up (database {DB_NAME}, Redis db {REDIS_DB}) …", flush=True)
        start_vigil(s, n)
        seed(s, n)
        start_workers(s)
        print(f"warm-up: one round of each kind ({n:,} watches each; their first poll records a change) …",
              flush=True)
        for kind in KINDS:
            one_round(s, kind, n, changed=False)
        idle = idle_cpu(s)
        rows0 = count_rows(s)
        print("quiet rounds …", flush=True)
        rounds = phase(s, n, args.blocks, changed=False)
        spent = {}
        if args.breakdown:
            print(f"breakdown: {args.breakdown} quiet polls of each kind in this process × {args.reps} …", flush=True)
            from engine.http import FetchPolicy

            spent = breakdown(DATABASE_URL, SECRET_KEY, FetchPolicy(allow_loopback=True),
                              {kind: kind for kind in KINDS}, min(args.breakdown, n), args.reps)
            for kind, sp in spent.items():
                s.polled(kind, sp.polls)
        rows_quiet = count_rows(s)
        print("changed rounds …", flush=True)
        rounds += phase(s, n, args.blocks, changed=True)
        time.sleep(0.5)
        rows_end = count_rows(s)
        stats = requests.get(f"{s.api}/stats", timeout=10).json()
        lines_checks = checks(s, rounds, n, rows0, rows_quiet, rows_end, stats)
        notes = run_notes(procs, (WEB, WORKER, SCHEDULER), started)
        text = report(args, header, versions(), rounds, idle, spent, lines_checks, notes)
    except (KeyboardInterrupt, BenchError, subprocess.SubprocessError, requests.RequestException) as exc:
        return failed(exc)
    finally:
        if s.checked is not None:
            s.checked.close()
        clean_up(procs, REDIS_URL)
        if s.db is not None:
            s.db.close()
    return publish("tool_polls.md", text)


if __name__ == "__main__":
    sys.exit(main())
