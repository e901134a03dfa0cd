#!/usr/bin/env python
"""Judge-call benchmark: a monitor with a condition calls its judge model only when its deterministic
check fires, never on a mere change.

    .venv/bin/python bench/judge_calls.py [--monitors 100] [--rounds 5] [--judge-mode alternate]

N pages whose text changes on EVERY request (a per-page request counter), while the first number on
each page, its price, crosses a threshold rarely: page i shows 90 in round r when (i + r) % 10 == 0
and 120-124 otherwise (round 0 is the baseline read when the monitors are created). Each monitor has a
threshold check (price < 100, edge-triggered) and a condition, so every check is a change, and about
one in ten is a deterministic match that must be judged. The real worker
(`python -m dramatiq tasks.main --processes 1 --threads 4`) and `vigil scheduler` run against
PostgreSQL (database vigil_bench, schema recreated) and Redis (db 12, flushed); the judge is
tests/judge_server.py's OpenAI-compatible JudgeServer, in this process.

"Fired checks" are counted without the judge: from the sequence of prices the page server actually
served to each page (a crossing from >= 100 to < 100 is one fire), and again from the values the
worker recorded in monitor_runs. Nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
import threading
import time
from collections import defaultdict
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

import psycopg2  # noqa: E402

from bench.quiet_checks import (  # noqa: E402
    DATABASE_URL, DB_NAME, INTERVAL_SECONDS, PG, PYTHON, VIGIL, VIGIL_ENV, BenchError, EventCounter, Processes,
    Stats, ensure_database, reset_schema, versions,
)
from adapters.events import decoded  # noqa: E402
from bench.common import failed, figure, hold_signals, prepare, publish, record, seed_page_monitors  # noqa: E402
from tests.judge_server import JudgeServer  # noqa: E402

REDIS_URL = "redis://127.0.0.1:6379/12"
THRESHOLD = 100.0
LOW_PRICE = 90
CONDITION = "the drop is real"
JUDGE_ENV = {
    "REDIS_URL": REDIS_URL,
    "JUDGE_API_KEY": "bench-key", "JUDGE_MODEL": "bench-judge",
    "FETCH_ALLOW_LOOPBACK": "true", "MONITOR_MAX_WAKES_PER_HOUR": "1000", "MONITOR_MAX_FIRES_PER_CONVERSATION_DAY": "1000000", "SCHEDULE_AUTOPAUSE_FAILURES": "1000",
}
#: large enough that no monitor runs out of wakes (set directly, so MONITOR_MAX_WAKES' cap of 20 does not apply)
MAX_WAKES = 1000
#: process (and log file) names, apart from quiet_checks' own
WORKER, SCHEDULER = "judge-worker", "judge-scheduler"


def price(page: int, phase: int) -> int:
    """The price page `page` shows in round `phase` (0: the baseline read at creation)."""
    return LOW_PRICE if (page + phase) % 10 == 0 else 120 + page % 5


def crossings(values: list[float]) -> int:
    """How many times a sequence of readings goes from not below the threshold to below it."""
    return sum(1 for before, now in zip(values, values[1:]) if before >= THRESHOLD > now)


# ----------------------------------------------------------------------------------------------
# the pages: served from a thread of this process (CPU is not measured here)


class Pages:
    """What the page server serves, and a log of every price it served to each page, in order."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.phase = 0
        self.requests = [0] * n
        self.served: list[list[tuple[int, int]]] = [[] for _ in range(n)]   # (phase, price) per GET
        self.lock = threading.Lock()

    def body(self, i: int) -> bytes:
        with self.lock:
            self.requests[i] += 1
            count, phase = self.requests[i], self.phase
            value = price(i, phase)
            self.served[i].append((phase, value))
        # The price is the first number in the page's text (a threshold check reads the first one);
        # the counter after it makes every response, and its normalized text, differ from the last.
        return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Bench item {i}</title>"
                "</head><body><main><h1>Bench item</h1>"
                f"<p class=\"price\">price: {value}</p>"
                f"<p>Refreshed: this page has been served {count} times (page {i}).</p>"
                "<p>Prices change without notice; delivery and returns as usual.</p>"
                "</main></body></html>").encode("utf-8")


class _PageHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        pages: Pages = self.server.pages  # type: ignore[attr-defined]
        prefix, _, number = self.path.rpartition("/")
        if prefix == "/p" and number.isdigit() and int(number) < pages.n:
            body, status = pages.body(int(number)), 200
        else:
            body, status = b"not found", 404
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8" if status == 200 else "text/plain")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def start_pages(n: int) -> tuple[ThreadingHTTPServer, Pages]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _PageHandler)
    server.daemon_threads = True
    server.pages = Pages(n)  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, args=(0.2,), daemon=True, name="pages").start()
    return server, server.pages  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------------------------
# monitors and events


def create_judged_monitors(base: str, n: int, env: dict, interval: int) -> None:
    """N threshold monitors with a condition; none is due before `interval`: each round makes them all due."""
    from engine.checks import CheckSpec
    from engine.spec import MonitorSpec

    def spec(i: int, source) -> MonitorSpec:
        return MonitorSpec(description=f"bench item {i}: price below 100", source=source,
                           check=CheckSpec("threshold", op="<", value=THRESHOLD), on_match="",
                           interval_seconds=interval, ttl_seconds=86400, max_wakes=MAX_WAKES, condition=CONDITION)

    seed_page_monitors({**env, "DATABASE_URL": DATABASE_URL}, base, n, spec,
                       lambda now: now + timedelta(seconds=interval))


class MonitorEvents(EventCounter):
    """quiet_checks' counter of monitor.updated events, for this bench's monitors only, also remembering
    which monitors they were for. Redis pub/sub channels are server-wide, not per db number: any other
    Vigil on the same Redis (an e2e run, a dev server) whose events reach the same channels is ignored."""

    def __init__(self, url: str, monitor_ids: set[str]) -> None:
        self.ids = frozenset(monitor_ids)
        self.seen: set[str] = set()
        self.foreign = 0
        self._lock = threading.Lock()
        super().__init__(url)

    def _run(self) -> None:
        with contextlib.suppress(Exception):  # close() ends the subscription from another thread
            for message in self._pubsub.listen():
                for name, data in decoded(message["data"]):  # a message may carry several (a batch's checks)
                    if name != "monitor.updated":
                        continue
                    with self._lock:
                        if data["monitor_id"] not in self.ids:
                            self.foreign += 1
                            continue
                        self.count += 1
                        self.seen.add(data["monitor_id"])

    def new_round(self) -> None:
        with self._lock:
            self.seen = set()


def refuse_if_shared() -> None:
    """quiet_checks.py and profile_worker.py drop and recreate the same schema: never run beside them."""
    conn = psycopg2.connect(dbname="postgres", **PG)
    with conn.cursor() as cur:
        cur.execute("SELECT coalesce(nullif(application_name, ''), '?') FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> pg_backend_pid()", (DB_NAME,))
        others = [row[0] for row in cur.fetchall()]
    conn.close()
    if others:
        raise BenchError(f"{len(others)} other connection(s) to {DB_NAME} ({', '.join(sorted(set(others)))}): "
                         "another benchmark is probably using it, and this one would drop its schema")


def wait_round(stats: Stats, events: MonitorEvents, target: int, n: int, procs: Processes, timeout: float) -> None:
    """Until every monitor has finished a check this round, and `target` checks were finished in all."""
    deadline = time.monotonic() + timeout
    while len(events.seen) < n or events.count < target:
        if time.monotonic() > deadline:
            try:
                left = stats.query("SELECT count(*) FROM monitors WHERE id = ANY(%s)", (list(events.ids),))[0][0]
            except psycopg2.Error:
                left = 0
            if left != n:
                raise BenchError(f"only {left} of this run's {n} monitors are left in {DB_NAME}: another run "
                                 "(quiet_checks.py?) recreated its schema meanwhile")
            raise BenchError(f"only {len(events.seen)} of {n} monitors checked ({events.count} of {target} "
                             f"checks) after {timeout:.0f}s;\nworker log:\n{procs.tail(WORKER)}\n"
                             f"scheduler log:\n{procs.tail(SCHEDULER)}")
        procs.check_alive()
        time.sleep(0.05)


# ----------------------------------------------------------------------------------------------
# what the database says


_CURRENT = re.compile(r"currently (-?[\d.,]+)")
_FIRED = re.compile(r"(-?[\d.,]+) is below ")


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def db_facts(stats: Stats) -> dict:
    """Counts from vigil_bench, and fires recounted from the values the worker recorded per check."""
    q = stats.query
    runs = defaultdict(list)
    baseline = dict(q("SELECT id, baseline FROM monitors"))
    kinds: dict[str, int] = defaultdict(int)
    for monitor_id, kind, detail in q("SELECT monitor_id, kind, detail FROM monitor_runs ORDER BY id"):
        kinds[kind] += 1
        runs[monitor_id].append((kind, detail))
    fired_recorded = judged_no = unreadable = 0
    for monitor_id, text in baseline.items():
        match = _CURRENT.search(text or "")
        values = [_number(match.group(1))] if match else []
        for kind, detail in runs[monitor_id]:
            found = (_FIRED.search(detail) if kind == "fired" else _CURRENT.search(detail)
                     if kind == "changed" else None)
            if found is None:
                unreadable += 1
                continue
            value = _number(found.group(1))
            if kind == "changed" and values and values[-1] >= THRESHOLD > value:
                judged_no += 1  # the check fired, the judge said no: recorded as a change
            values.append(value)
        fired_recorded += crossings(values)
    tokens = q("SELECT count(*), coalesce(sum(prompt_tokens + completion_tokens), 0) FROM token_usage "
               "WHERE source = 'monitor_judge'")[0]
    monitors = q("SELECT sum(check_count), sum(fire_count), sum(wakes_used), sum(judge_tokens), sum(judge_failures), "
                 "count(*) FILTER (WHERE status <> 'active') FROM monitors")[0]
    return {"kinds": dict(kinds), "fired (from recorded values)": fired_recorded, "judged non-matches": judged_no,
            "unreadable runs": unreadable, "token rows": tokens[0], "judge tokens": int(tokens[1]),
            "claims": int(monitors[0]), "fire_count": int(monitors[1]), "wakes_used": int(monitors[2]),
            "monitors.judge_tokens": int(monitors[3]), "judge_failures": int(monitors[4]),
            "not active": int(monitors[5]),
            "wakes": q("SELECT count(*) FROM wakes")[0][0],
            "wake messages": q("SELECT count(*) FROM messages WHERE role = 'wake'")[0][0]}


# ----------------------------------------------------------------------------------------------
# the run


class CountingJudge(JudgeServer):
    """tests/judge_server.py's JudgeServer, counting the answers it gave (match, no_match, …)."""

    def __init__(self, mode: str) -> None:
        super().__init__(mode)
        self.answers: dict[str, int] = defaultdict(int)

    def next_mode(self) -> str:
        mode = super().next_mode()
        with self._lock:
            self.answers[mode] += 1
        return mode


def judge_calls(judge: JudgeServer) -> int:
    return sum(1 for r in list(judge.requests) if r.path.endswith("/chat/completions"))


_SERVED = re.compile(r"served (\d+) times \(page (\d+)\)")


def judged_readings(judge: JudgeServer, served: list[list[tuple[int, int]]]) -> dict:
    """Each judge call, placed by the page text it was shown (page i, its k-th GET) in the served log:
    a first reading below the threshold, or a reading below after a reading below (a re-fire)."""
    found = {"crossing": 0, "below after below": 0, "not below": 0, "unparsed": 0}
    for request in list(judge.requests):
        messages = request.body.get("messages") if isinstance(request.body, dict) else None
        match = _SERVED.search(messages[-1].get("content", "")) if messages else None
        if match is None:
            found["unparsed"] += 1
            continue
        count, page = int(match.group(1)), int(match.group(2))
        now = served[page][count - 1][1]
        before = served[page][count - 2][1] if count >= 2 else None
        found["not below" if now >= THRESHOLD else "crossing" if before is None or before >= THRESHOLD
              else "below after below"] += 1
    return found


def run(args, procs: Processes, pages: Pages, base: str, judge: JudgeServer) -> dict:
    n, env = args.monitors, {**VIGIL_ENV, **JUDGE_ENV, "JUDGE_BASE_URL": judge.base_url}
    ensure_database()
    refuse_if_shared()
    reset_schema()
    print(f"creating {n} monitors (threshold < {THRESHOLD:g} + condition; baseline read = round 0) …", flush=True)
    create_judged_monitors(base, n, env, args.interval)
    rds = redis.Redis.from_url(REDIS_URL)
    rds.flushdb()
    stats = Stats()
    events = stats.events = MonitorEvents(REDIS_URL, {row[0] for row in stats.query("SELECT id FROM monitors")})
    per_round = []
    try:
        procs.start(WORKER, [PYTHON, "-m", "dramatiq", "tasks.main", "--processes", "1", "--threads", "4"], env)
        procs.start(SCHEDULER, [VIGIL, "scheduler"], env)
        for number in range(1, args.rounds + 1):
            with pages.lock:
                pages.phase = number
            events.new_round()
            before = (events.count, judge_calls(judge))
            started = time.monotonic()
            stats.make_all_due()
            wait_round(stats, events, before[0] + n, n, procs, timeout=max(90, n / 2))
            planned = sum(1 for i in range(n) if price(i, number - 1) >= THRESHOLD > price(i, number))
            per_round.append({"round": number, "checks": events.count - before[0],
                              "planned fires": planned, "judge calls": judge_calls(judge) - before[1],
                              "seconds": time.monotonic() - started})
            print(f"  round {number}: {per_round[-1]['checks']} checks, {planned} planned fires, "
                  f"{per_round[-1]['judge calls']} judge calls, {per_round[-1]['seconds']:.1f}s", flush=True)
        time.sleep(0.5)  # a late duplicate check, if any, would show up now
        procs.stop(SCHEDULER)
        procs.stop(WORKER)
        facts = db_facts(stats)
    finally:
        events.close()
        stats.close()
    with pages.lock:
        served = [list(s) for s in pages.served]
    facts.update(checks=events.count, foreign_events=events.foreign, rounds=per_round, judge_calls=judge_calls(judge),
                 served_gets=sum(len(s) - 1 for s in served),  # less the baseline read
                 fired_served=sum(crossings([float(v) for _, v in s]) for s in served),
                 fired_planned=sum(r["planned fires"] for r in per_round),
                 judged=judged_readings(judge, served), answers=dict(judge.answers),
                 judge_paths=sorted({r.path for r in judge.requests}),
                 judge_models={(r.body or {}).get("model") for r in judge.requests if isinstance(r.body, dict)})
    return facts


def report(args, header: list[str], f: dict, versions_line: str) -> str:
    kinds = f["kinds"]
    changes = kinds.get("changed", 0) + kinds.get("fired", 0)
    fired = f["fired_served"]
    calls = f["judge_calls"]
    equal = calls == fired
    judged = f["judged"]
    recorded_judged = kinds.get("fired", 0) + f["judged non-matches"]
    lines = ["# Vigil judge calls: the judge is asked only when the deterministic check fires", "",
             *header, f"- {versions_line}",
             f"- {args.monitors} monitors × {args.rounds} rounds; every page's text changes on every request, "
             f"its price drops to {LOW_PRICE} (threshold check `<` {THRESHOLD:g}) in round r when (i + r) % 10 == 0; "
             f"condition \"{CONDITION}\"; judge: tests/judge_server.py JudgeServer, answers {args.judge_mode}",
             "- Vigil: `python -m dramatiq tasks.main --processes 1 --threads 4` + `vigil scheduler`, "
             "PostgreSQL database vigil_bench, Redis db 12; the bench makes all monitors due once per round; "
             f"interval {args.interval} s" + (" (none comes due on its own)" if args.interval >= INTERVAL_SECONDS
                                              else " (monitors also come due on their own between rounds)"), "",
             "| checks | changes (changed + fired runs) | of which judged non-matches | fired checks (served prices) "
             "| judge calls | judge tokens | wakes |",
             "|---:|---:|---:|---:|---:|---:|---:|",
             f"| {f['checks']:,} | {changes:,} | {f['judged non-matches']:,} | {fired:,} | {calls:,} | "
             f"{f['judge tokens']:,} | {f['wakes']:,} |", "",
             f"- judge calls == fired checks: {'yes' if equal else 'no'}",
             f"- judge calls / changes = {calls / changes:.2f}" if changes else "- judge calls / changes = n/a", "",
             "Cross-checks:", "",
             f"- fired checks: {fired} from the prices served to each page (crossings of >= {THRESHOLD:g} → "
             f"< {THRESHOLD:g}, baseline read included), {f['fired_planned']} from the planned schedule, "
             f"{f['fired (from recorded values)']} from the values the worker recorded (monitors.baseline + "
             f"monitor_runs), {kinds.get('fired', 0)} `fired` runs + {f['judged non-matches']} judged non-matches = "
             f"{kinds.get('fired', 0) + f['judged non-matches']}",
             f"- checks: {f['checks']} monitor.updated events for these monitors (and {f['foreign_events']} "
             f"from other Vigil processes on the same Redis, ignored), {f['claims'] - args.monitors} claims "
             f"(check_count − 1 baseline each), {f['served_gets']} page GETs after the baseline reads, "
             f"{args.monitors * args.rounds} made due by the bench",
             "- monitor_runs by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())),
             f"- judge: {calls} chat/completions requests (paths {', '.join(f['judge_paths']) or '-'}; "
             f"model {', '.join(sorted(m for m in f['judge_models'] if m)) or '-'}), {f['token rows']} token_usage "
             f"rows, {f['judge tokens']} tokens (= {f['monitors.judge_tokens']} in monitors.judge_tokens; "
             f"110 per call expected: {110 * calls}), judge_failures now {f['judge_failures']}",
             f"- wakes: {f['wakes']} rows, {f['wake messages']} wake messages, fire_count {f['fire_count']}, "
             f"wakes_used {f['wakes_used']}; monitors not active: {f['not active']}",
             f"- unreadable runs (no value in detail): {f['unreadable runs']}",
             f"- judge calls by the reading they judged (page and GET number read from the fenced page text): "
             f"{judged['crossing']} on a first reading below {THRESHOLD:g}, {judged['below after below']} on a "
             f"reading below after a reading below (a re-fire), {judged['not below']} on a reading not below, "
             f"{judged['unparsed']} unplaceable",
             f"- judge calls whose outcome was recorded (`fired` runs + judged non-matches): {recorded_judged}; "
             f"not recorded: {calls - recorded_judged}; the judge answered "
             + ", ".join(f"{k} {v}" for k, v in sorted(f["answers"].items())) + f" (`fired` runs: {kinds.get('fired', 0)})",
             f"- page GETs whose check was never recorded: {f['served_gets'] - f['checks']} "
             "(recording refused: the claim was no longer current)",
             f"- served drops never recorded as a fire: {fired - f['fired (from recorded values)']}", "",
             "| round | checks | planned fires | judge calls | s |", "|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['round']} | {r['checks']} | {r['planned fires']} | {r['judge calls']} | {r['seconds']:.1f} |"
              for r in f["rounds"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Judge-call benchmark: judge calls vs. deterministic fires.")
    parser.add_argument("--monitors", type=int, default=100, help="monitors and distinct pages (default 100)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, each one check of every monitor (default 5)")
    parser.add_argument("--judge-mode", choices=("alternate", "no_match", "match"), default="alternate",
                        help="the judge's answers: alternate no_match/match (default), or always one")
    parser.add_argument("--interval", type=int, default=INTERVAL_SECONDS,
                        help=f"monitors' interval in seconds (default {INTERVAL_SECONDS}: only the bench makes "
                             "them due; a few seconds lets the scheduler claim them on its own too)")
    args = parser.parse_args(argv)
    header, procs = prepare()
    page_server = judge = None
    text_out = ""
    try:
        page_server, pages = start_pages(args.monitors)
        base = f"http://127.0.0.1:{page_server.server_address[1]}"
        judge = CountingJudge("match" if args.judge_mode == "match" else "no_match").start()
        if args.judge_mode == "alternate":  # no_match, match, no_match, … in the order the calls arrive
            judge.queue(*(("no_match", "match") * (args.monitors * args.rounds)))
        facts = run(args, procs, pages, base, judge)
        text_out = report(args, header, facts, versions())
        calls, fired = facts["judge_calls"], facts["fired_served"]
        changes = facts["kinds"].get("changed", 0) + facts["kinds"].get("fired", 0)
        record("judge_calls", [figure(f"judge calls vs fired checks ({changes:,} changes in {facts['checks']:,} checks)",
                                      f"{calls:,} calls", f"{fired:,} fired", calls / fired if fired else None,
                                      "= 1", calls == fired)])
    except (KeyboardInterrupt, BenchError) as exc:
        return failed(exc)
    finally:
        hold_signals()
        procs.stop()
        for server in (judge, page_server):
            if server is not None:
                with contextlib.suppress(Exception):
                    server.stop() if server is judge else (server.shutdown(), server.server_close())
        with contextlib.suppress(Exception):
            redis.Redis.from_url(REDIS_URL).flushdb()
    return publish("judge_calls.md", text_out)


if __name__ == "__main__":
    sys.exit(main())
