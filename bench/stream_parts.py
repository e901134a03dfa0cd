"""Pieces of bench/stream_lines.py: the phases' figures, the owner's event stream, the printers' control FIFOs,
reading back stored wakes and the bare endpoint's log, and the report's rows."""

from __future__ import annotations

import errno
import json
import os
import re
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import BenchError, Db, Processes, figure  # noqa: E402
from bench.trigger_parts import EventStream, fmt, pct  # noqa: E402

#: one printed line, as bench/stream_bare.py prints it: printed at t (epoch seconds), the n-th of its printer
LINE = re.compile(r"t=(\d+\.\d+) n=(\d+)")


@dataclass
class Phase:
    """One system's run of one load: when each line was printed, stored and streamed, and what it cost."""

    name: str                      # "5 lines/s", "burst", "flood"
    system: str                    # "Vigil" or "baseline"
    count: int
    printed: dict[int, float] = field(default_factory=dict)   # n -> printed at (epoch s)
    stored: dict[int, float] = field(default_factory=dict)    # n -> wake created_at, or the bare endpoint's receipt
    streamed: dict[int, float] = field(default_factory=dict)  # n -> `message.created` received (Vigil only)
    wakes: int = 0                 # stored wakes that carry lines (Vigil) or POSTs received (baseline)
    posts: int = 0                 # POSTs that carried the lines records (Vigil; the baseline's are its wakes)
    batches: int = 0               # `lines` records stored (Vigil), or POSTs received (baseline: one line each)
    most_in_wake: int = 0
    duplicates: int = 0            # lines stored twice
    waited: set[int] = field(default_factory=set)  # lines whose wake also carries a later line
    ended: bool = False            # the watch's exit wake arrived (Vigil)
    others: list[str] = field(default_factory=list)  # wakes that are neither lines nor the exit: notices, pauses
    device_cpu: float = 0.0        # the runner process (Vigil) or the bare loop (baseline), children left out
    server_cpu: float = 0.0        # `vigil web` (`vigil serve` embedded), or the bare endpoint
    pg_cpu: float = 0.0            # PostgreSQL backends of the bench's database (Vigil; NaN embedded)
    other_cpu: float = 0.0         # the worker's process tree and the scheduler (Vigil; 0 embedded: in `serve`)
    window: float = 0.0            # seconds the CPU figures cover: the order sent → the last line arrived

    def latencies(self, arrived: dict[int, float]) -> list[float]:
        return [arrived[n] - self.printed[n] for n in arrived if n in self.printed]

    @property
    def lost(self) -> int:
        return self.count - len(self.stored)

    @property
    def rate(self) -> float:
        """Lines a second from the first printed to the last stored."""
        if not self.stored or not self.printed:
            return float("nan")
        span = max(self.stored.values()) - min(self.printed.values())
        return len(self.stored) / span if span > 0 else float("nan")

    @property
    def print_span(self) -> float:
        return max(self.printed.values()) - min(self.printed.values()) if self.printed else float("nan")

    def per_line(self, seconds: float) -> float:
        """CPU-ms a line."""
        return 1000 * seconds / self.count if self.count else float("nan")

    def per_batch(self, seconds: float) -> float:
        """CPU-ms a line batch: a `lines` record (Vigil), a POST (baseline)."""
        return 1000 * seconds / self.batches if self.batches else float("nan")

    @property
    def server_side_cpu(self) -> float:
        """All the server side's CPU: web, worker, scheduler and PostgreSQL (one `vigil serve` embedded)."""
        return self.server_cpu + self.other_cpu + (self.pg_cpu if self.pg_cpu == self.pg_cpu else 0.0)


class LineEvents(EventStream):
    """GET /api/events, noting when each line of the bench's stream monitors arrives in a `message.created`."""

    def __init__(self, port: int, token: str) -> None:
        self.lines: dict[str, dict[int, float]] = defaultdict(dict)  # monitor id -> {n: received at}
        self.ended: dict[str, float] = {}
        self.events = Counter()    # `message.created` per monitor
        self.line_duplicates = 0
        super().__init__(port, token, set(), re.compile("$^"))

    def _dispatch(self, event: str, raw: str, at: float) -> None:
        self.names[event] += 1
        data = json.loads(raw)
        if event == "monitor.updated" and data.get("monitor_id") not in self.monitor_ids:
            self.foreign[event] += 1
        if event != "message.created":
            return
        wake = (data.get("metadata") or {}).get("wake") or {}
        ref = wake.get("ref_id")
        if ref not in self.monitor_ids:
            self.foreign[event] += 1
            return
        self.events[ref] += 1
        if str(wake.get("dedupe_key", "")).endswith(":end"):
            self.ended[ref] = at
            return
        seen = self.lines[ref]
        for _, n in LINE.findall(data.get("content", "")):
            if int(n) in seen:
                self.line_duplicates += 1
            else:
                seen[int(n)] = at


def open_control(path: str, procs: Processes, timeout: float = 30):
    """The printer's control FIFO, open for writing once the printer has opened it (it is running by then)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
            if time.monotonic() > deadline:
                raise BenchError(f"no printer opened {path} within {timeout:.0f}s") from None
            procs.check_alive()
            time.sleep(0.05)
            continue
        os.set_blocking(fd, True)
        return os.fdopen(fd, "w", buffering=1)


def wait_until(done, what: str, timeout: float, procs: Processes, poll: float = 0.02) -> bool:
    """Until done() is true (True), or `timeout` passes (a warning, False)."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            print(f"  WARNING: {what} not seen within {timeout:.0f}s", flush=True)
            return False
        procs.check_alive()
        time.sleep(poll)
    return True


def read_wakes(db: Db, conversation: str, phase: Phase) -> None:
    """The conversation's stored wakes: each line's printed time and its wake's created_at (naive UTC)."""
    rows = db.query("SELECT m.content, m.created_at, m.metadata FROM messages m JOIN conversations c "
                    "ON c.id = m.conversation_id WHERE c.external_id = %s AND m.role = 'wake' ORDER BY m.id",
                    (conversation,))
    for content, created_at, metadata in rows:
        meta = json.loads(metadata) if isinstance(metadata, str) else (metadata or {})
        if str(meta.get("wake", {}).get("dedupe_key", "")).endswith(":end"):
            phase.ended = True
            continue
        lines = LINE.findall(content)
        if not lines:
            phase.others.append(content[:300])
            continue
        phase.wakes += 1
        phase.most_in_wake = max(phase.most_in_wake, len(lines))
        phase.waited.update(int(n) for _, n in sorted(lines, key=lambda line: float(line[0]))[:-1])
        if meta.get("lines") not in (None, len(lines)):
            phase.others.append(f"a wake of {meta['lines']} lines shows {len(lines)} (text cut?)")
        if isinstance(created_at, str):  # SQLite (embedded) keeps it as text
            created_at = datetime.fromisoformat(created_at)
        stored_at = created_at.replace(tzinfo=timezone.utc).timestamp()
        for t, n in lines:
            phase.printed[int(n)] = float(t)
            if int(n) in phase.stored:
                phase.duplicates += 1
            else:
                phase.stored[int(n)] = stored_at


def read_received(log: Path, offset: int, phase: Phase) -> None:
    """The bare endpoint's log from `offset`: `<received at> t=<printed at> n=<k>` a POST."""
    with open(log, "rb") as fh:
        fh.seek(offset)
        for raw in fh.read().decode().splitlines():
            received, _, body = raw.partition(" ")
            found = LINE.search(body)
            if not found:
                phase.others.append(body[:300])
                continue
            phase.wakes += 1
            n = int(found.group(2))
            phase.printed[n] = float(found.group(1))
            if n in phase.stored:
                phase.duplicates += 1
            else:
                phase.stored[n] = float(received)
    phase.most_in_wake = 1 if phase.wakes else 0
    phase.batches = phase.wakes


def backends(db: Db) -> list[int]:
    """Pids of the PostgreSQL backends serving the bench's database, but the bench's own connection."""
    return [row[0] for row in db.query("SELECT pid FROM pg_stat_activity WHERE datname = %s "
                                       "AND pid <> pg_backend_pid()", (db.dbname,))]


def count_lines(log: Path, offset: int) -> int:
    try:
        with open(log, "rb") as fh:
            fh.seek(offset)
            return fh.read().count(b"\n")
    except FileNotFoundError:
        return 0


# ----------------------------------------------------------------------------------------------
# report


def lat(values: list[float]) -> str:
    return f"{fmt(pct(values, 50))} / {fmt(pct(values, 99))} / {fmt(1000 * max(values) if values else float('nan'))}"


def phase_row(p: Phase) -> str:
    vigil = p.system == "Vigil"
    streamed = lat(p.latencies(p.streamed)) if vigil else "—"
    per_wake = len(p.stored) / p.wakes if p.wakes else float("nan")
    pg = fmt(p.per_line(p.pg_cpu), 3) if vigil and p.pg_cpu == p.pg_cpu else "—"
    batches = f"{p.batches:,}" if vigil else "—"
    batch_cpu = fmt(p.per_batch(p.server_cpu), 3)
    posts = p.posts if vigil else p.wakes
    return (f"| {p.name} | {p.system} | {len(p.stored):,} of {p.count:,} | {p.wakes:,} ({fmt(per_wake, 2)}; "
            f"most {p.most_in_wake}) | {posts:,} | {lat(p.latencies(p.stored))} | {streamed} | {fmt(p.rate, 0)} | "
            f"{fmt(p.per_line(p.device_cpu), 3)} | {fmt(p.per_line(p.server_cpu), 3)} | {batches} | {batch_cpu} | "
            f"{pg} | {fmt(p.window, 2)} |")


PHASE_HEADER = ["| phase | system | lines stored | wakes (lines per wake; most in one) | POSTs | printed → stored "
                "p50 / p99 / max ms | printed → SSE event p50 / p99 / max ms | lines/s, first printed → last stored | "
                "device CPU-ms/line | server CPU-ms/line | `lines` records | server CPU-ms/batch | "
                "PostgreSQL CPU-ms/line | CPU window s |",
                "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]


def waited_rows(p: Phase) -> list[str]:
    """Printed → SSE for the last line of each wake and for the earlier lines of a wake, which waited for the
    later line and then for the 200 ms gap after it."""
    last = {n: at for n, at in p.streamed.items() if n not in p.waited}
    waited = {n: at for n, at in p.streamed.items() if n in p.waited}
    return [f"| {p.name} | {label} | {len(part):,} | {lat(p.latencies(part))} |"
            for label, part in (("the last (or only) line of its wake", last),
                                ("an earlier line of a wake that also carries a later one", waited))]


#: the goal of issue 27: what the server's web process spends on one `lines` record
GOAL_BATCH_MS = 2.0


def cpu_figures(pairs: list[tuple[Phase, Phase]], idle: tuple[float, float, float] | None,
                server: str) -> tuple[list[dict], str]:
    """The summary's server CPU rows (per line, per line batch, the whole server side) and the goal line.
    `idle`: CPU seconds a second of the runner, the server process and the rest of the server side with a watch
    open and nothing printed."""
    (paced, paced_b), _, (flood, flood_b) = pairs
    idle_web, idle_rest = (idle[1], idle[2]) if idle else (float("nan"), float("nan"))
    rows = [figure(f"{server} CPU per line, {v.name} (baseline: the bare endpoint per POST, a line each)",
                   f"{fmt(v.per_line(v.server_cpu), 3)} ms", f"{fmt(b.per_batch(b.server_cpu), 3)} ms",
                   ratio(v.per_line(v.server_cpu), b.per_batch(b.server_cpu))) for v, b in ((paced, paced_b),
                                                                                           (flood, flood_b))]
    batch, bare = paced.per_batch(paced.server_cpu), paced_b.per_batch(paced_b.server_cpu)
    net = paced.per_batch(paced.server_cpu - idle_web * paced.window)
    whole = paced.per_batch(paced.server_side_cpu)
    met = batch <= GOAL_BATCH_MS
    rows.append(figure(f"{server} CPU per line batch (a `lines` record), {paced.name}: {paced.batches} records for "
                       f"{paced.count} lines; {fmt(net, 2)} ms of it net of the process's idle CPU (baseline: the "
                       "bare endpoint per POST)", f"{fmt(batch, 3)} ms", f"{fmt(bare, 3)} ms", ratio(batch, bare),
                       f"≤ {GOAL_BATCH_MS:g} ms", met))
    rows.append(figure(f"{server} CPU per line batch, {flood.name} ({flood.batches} records; baseline: the bare "
                       "endpoint per POST)", f"{fmt(flood.per_batch(flood.server_cpu), 3)} ms",
                       f"{fmt(flood_b.per_batch(flood_b.server_cpu), 3)} ms",
                       ratio(flood.per_batch(flood.server_cpu), flood_b.per_batch(flood_b.server_cpu))))
    whole_net = whole - paced.per_batch((idle_web + idle_rest) * paced.window)
    rows.append(figure(f"all server-side CPU per line batch, {paced.name} (web, worker, scheduler and PostgreSQL; "
                       f"one `vigil serve` embedded); {fmt(whole_net, 2)} ms of it net of their idle CPU (baseline: "
                       "the bare endpoint per POST)", f"{fmt(whole, 3)} ms", f"{fmt(bare, 3)} ms", ratio(whole, bare)))
    goal = (f"GOAL {server} CPU per line batch ≤ {GOAL_BATCH_MS:g} ms at {paced.name}: {fmt(batch, 2)} ms "
            f"({fmt(net, 2)} net of idle; bare endpoint {fmt(bare, 2)} ms a POST) — {'met' if met else 'NOT met'}")
    return rows, goal


def ratio(a: float, b: float) -> float:
    return a / b if b and a == a and b == b else float("nan")


def p99(values: list[float]) -> float:
    return pct(values, 99)


def checks(phases: list[Phase], events: LineEvents, logs: dict[str, str]) -> list[str]:
    """What the report must say went wrong (or didn't): lost and doubled lines, stray wakes, errors in logs."""
    out = []
    for p in phases:
        if p.system == "Vigil":
            missing = p.count - len(p.streamed)
            out.append(f"{p.name}, Vigil: {len(p.stored):,} of {p.count:,} lines stored in {p.wakes:,} wakes, "
                       f"{len(p.streamed):,} seen on /api/events, {p.duplicates} stored twice; exit wake "
                       f"{'stored' if p.ended else 'MISSING'}"
                       + (" (WARNING: lines lost)" if p.lost or missing else ""))
        else:
            out.append(f"{p.name}, baseline: {len(p.stored):,} of {p.count:,} lines received, {p.duplicates} twice"
                       + (" (WARNING: lines lost)" if p.lost else ""))
        out += [f"WARNING: {p.name}, {p.system}: other wake/body: {text!r}" for text in p.others[:5]]
    if events.line_duplicates:
        out.append(f"WARNING: {events.line_duplicates} lines arrived twice on the event stream")
    if events.error:
        out.append(f"WARNING: the event stream failed: {events.error}")
    out.append(f"events on the stream: {dict(events.names)}; about monitors that are not this bench's: "
               f"{dict(events.foreign) or 'none'}" + (" (published while a watch was being created, before the "
                                                       "bench knew its id, or by another Vigil on this Redis server: "
                                                       "pub/sub channels are not per database)" if events.foreign
                                                      else ""))
    for name, text in logs.items():
        bad = [line for line in text.splitlines() if re.search(r"Traceback|ERROR|WARNING|refused|dropped|"
                                                               r"Exception|trying again|failed|again later", line)]
        out.append(f"{name} log: " + (f"{len(bad)} error/warning lines, e.g. {bad[0][:200]!r}" if bad else "clean"))
    return out
