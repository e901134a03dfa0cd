"""Pieces of bench/tool_polls.py: the local JSON API both kinds of watch poll, the declared tools, the watches
(one of each made through the tool endpoint, the rest copies of its row), counting finished checks from the
owner's events, and the in-process breakdown of one poll.

The API runs as a process of its own (`python -m bench.tool_parts --port P --items N`), so its CPU is counted
apart from the worker's: GET /item/<i> is one order's JSON (~1 KB) at the current generation, GET
/carrier/<i> a small second answer, POST /generation makes every order's JSON change, GET /stats counts the
requests by the Authorization they carried.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from adapters.events import decoded  # noqa: E402

#: the tools' credential: a header value, stored encrypted, which the API checks on every tool request
SECRET = "Bearer sk-bench-7f3a9c1e0d5b4a2f"
AGENT = "bench-agent"
#: the JSON source's check and the 1-step tool's: the same CEL over the same data (the tool's output is the order)
CONDITION = "data.status == 'delivered'"
#: the 2-step tool's output wraps the order, so its check reads one level down
CONDITION_2 = "data.order.status == 'delivered'"
KINDS = ("json", "tool", "tool2")
LABELS = {"json": "JSON source", "tool": "1-step tool", "tool2": "2-step tool"}
PER_CONVERSATION = 10


def order(i: int, generation: int) -> bytes:
    """Order i's JSON at `generation`: what a parcel-tracking API answers, ~1 KB."""
    events = [{"at": f"2026-11-{20 + k % 9:02d}T{8 + k:02d}:15:00Z", "where": f"hub {(i * 7 + k) % 40}",
               "what": ("scanned at hub", "departed hub", "arrived at hub")[k % 3]} for k in range(8)]
    return json.dumps({"id": f"A-{i}", "status": "in transit", "carrier": "PostNL", "generation": generation,
                       "weight_kg": round(0.5 + (i % 17) / 4, 2), "eta": "2026-12-03", "events": events},
                      separators=(",", ":")).encode()


def one_step_tool(base: str) -> dict:
    """The declared tool as its runtime registers it: one GET with a secret header; its output is the order."""
    return {"description": "An order's tracking status",
            "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]},
            "steps": [{"kind": "http", "method": "GET", "url": base + "/item/{{args.item}}",
                       "headers": {"Authorization": SECRET}}],
            "output": {"main": "steps[0].body"}}


def two_step_tool(base: str) -> dict:
    """The same order, then its carrier's record: two GETs, the output built from both."""
    tool = one_step_tool(base)
    tool["steps"].append({"kind": "http", "method": "GET", "url": base + "/carrier/{{args.item}}"})
    tool["output"] = {"main": "{'order': steps[0].body, 'carrier': steps[1].body.name}"}
    return tool


# ----------------------------------------------------------------------------------------------
# the API


class _Api(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a real API
    disable_nagle_algorithm = True
    wbufsize = 64 * 1024
    items = 0
    generation = 0
    bodies: list[bytes] = []
    counts: Counter = Counter()
    lock = threading.Lock()

    def do_GET(self) -> None:
        prefix, _, number = self.path.rpartition("/")
        if prefix == "/item" and number.isdigit() and int(number) < self.items:
            auth = self.headers.get("Authorization")
            with self.lock:
                self.counts["item " + ("secret" if auth == SECRET else "none" if auth is None else "other")] += 1
            return self._send(200, self.bodies[int(number)])
        if prefix == "/carrier" and number.isdigit():
            with self.lock:
                self.counts["carrier"] += 1
            return self._send(200, b'{"name":"PostNL","id":' + number.encode() + b',"phone":"+31 88 225 5651"}')
        if self.path == "/stats":
            return self._send(200, json.dumps({"generation": self.generation, **self.counts}).encode())
        self._send(404, b'{"error":"not found"}')

    def do_POST(self) -> None:
        if self.path != "/generation":
            return self._send(404, b'{"error":"not found"}')
        cls = type(self)
        bodies = [order(i, cls.generation + 1) for i in range(self.items)]
        cls.bodies, cls.generation = bodies, cls.generation + 1
        self._send(200, json.dumps({"generation": cls.generation}).encode())

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128


def serve(port: int, items: int) -> None:
    _Api.items, _Api.bodies = items, [order(i, 0) for i in range(items)]
    with ApiServer(("127.0.0.1", port), _Api) as server:
        server.serve_forever(poll_interval=0.5)


# ----------------------------------------------------------------------------------------------
# the watches: one of each through the tool endpoint, the rest copies of its row


def watch_arguments(kind: str, base: str) -> dict:
    """monitor_create's arguments for item 0 of a kind."""
    if kind == "json":
        source = {"type": "json", "url": f"{base}/item/0"}
    else:
        source = {"type": "tool", "tool": "order_status" if kind == "tool" else "order_with_carrier",
                  "arguments": {"item": "0"}}
    return {"description": f"order A-0 is delivered ({LABELS[kind]})", "source": source, "interval": "1h",
            "check": {"type": "cel", "expr": CONDITION_2 if kind == "tool2" else CONDITION},
            "on_match": "Tell the user the parcel arrived."}


def clone_watches(db, template_id: str, kind: str, count: int, owner_id: int, base: str, far) -> None:
    """`count` copies of the template's row for the same owner (a tool belongs to its owner: the poll looks it up
    by the monitor's user), `PER_CONVERSATION` a conversation, ids `<kind>-<i>`, each on its own item i (the url of
    a JSON watch, the `item` argument of a tool watch), all due at `far` (the bench makes them due)."""
    columns = [name for (name,) in db.query("SELECT column_name FROM information_schema.columns WHERE "
                                            "table_schema = 'public' AND table_name = 'monitors'")]
    rest = [f'"{name}"' for name in columns if name not in {"id", "conversation_id", "next_check_at", "source"}]
    db.query("INSERT INTO conversations (user_id, external_id, channel, agent_id, title, created_at, updated_at) "
             "SELECT %s, %s || '-conv-' || k, 'chat', %s, '', now(), now() FROM generate_series(0, %s) k",
             (owner_id, kind, AGENT, (count - 1) // PER_CONVERSATION))
    source = ("jsonb_set(t.source::jsonb, '{url}', to_jsonb(%(base)s || '/item/' || g))::text" if kind == "json"
              else "jsonb_set(t.source::jsonb, '{arguments,item}', to_jsonb(g::text))::text")
    done = db.query(
        f'INSERT INTO monitors (id, conversation_id, next_check_at, source, {", ".join(rest)}) '
        f"SELECT %(kind)s || '-' || g, c.id, %(far)s, {source}, {', '.join('t.' + name for name in rest)} "
        "FROM generate_series(0, %(count)s - 1) g "
        "JOIN conversations c ON c.external_id = %(kind)s || '-conv-' || (g / %(per)s) AND c.user_id = %(owner)s "
        "CROSS JOIN monitors t WHERE t.id = %(template)s",
        {"kind": kind, "far": far, "count": count, "per": PER_CONVERSATION, "owner": owner_id,
         "template": template_id, "base": base})[0][0]
    if done != count:
        raise RuntimeError(f"cloned {done} {kind} watches, not {count}")


# ----------------------------------------------------------------------------------------------
# finished checks, from the owner's events


class Checked:
    """monitor.updated events on the owner's channel (the worker publishes one after every check, quiet or not):
    the ids checked since `reset`, and any event that carries an error or a status other than active."""

    def __init__(self, redis_url: str, database_url: str, owner_id: int) -> None:
        import redis

        namespace = hashlib.sha256(database_url.encode("utf-8")).hexdigest()[:12]  # as adapters.events names it
        self._pubsub = redis.Redis.from_url(redis_url).pubsub(ignore_subscribe_messages=True)
        self._pubsub.subscribe(f"vigil:{namespace}:events:user:{owner_id}")
        self.lock = threading.Lock()
        self.ids: Counter = Counter()
        self.bad: list[str] = []
        self.names: Counter = Counter()
        self.last_at = 0.0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with contextlib.suppress(Exception):  # close() cuts the connection
            for message in self._pubsub.listen():
                for name, data in decoded(message["data"]):
                    self._seen(name, data)

    def _seen(self, name: str, data: dict) -> None:
        with self.lock:
            self.names[name] += 1
            if name != "monitor.updated":
                return
            self.ids[data["monitor_id"]] += 1
            self.last_at = time.monotonic()
            if data.get("last_error") or data.get("status") != "active":
                self.bad.append(f"{data['monitor_id']}: {data.get('status')} {data.get('last_error')}")

    def reset(self) -> None:
        with self.lock:
            self.ids.clear()

    def seen(self, prefix: str) -> tuple[int, int]:
        """(distinct monitors with this id prefix checked since reset, events about them)."""
        with self.lock:
            mine = [n for monitor_id, n in self.ids.items() if monitor_id.startswith(prefix)]
        return len(mine), sum(mine)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._pubsub.close()


# ----------------------------------------------------------------------------------------------
# the in-process breakdown of one poll


def descendants(root: int) -> list[int]:
    """`root` and every live descendant, found by parent pid. (common.tree_pids reads /proc/<pid>/task/<pid>/children,
    which lists only the children of a process's main thread: the CEL helper, started from a worker thread, is not
    among them.)"""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                data = Path(f"/proc/{entry}/stat").read_text()
                children.setdefault(int(data[data.rindex(")") + 2:].split()[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def helper_pids(root: int) -> list[int]:
    """The CEL helper processes under `root` (engine/checks/cel_runner.py starts one per process that evaluates)."""
    found = []
    for pid in descendants(root):
        with contextlib.suppress(OSError):
            if b"engine.checks.cel_child" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
    return found


#: the breakdown's steps, in the order of a poll; "…" ones are inside the one above them
PLACEHOLDERS = "placeholder values for the poll"
LOOKUP = "registry lookup: find_tool (SELECT built by peewee, definition JSON)"
LOAD = "load_tool: decrypt the header values, build the ToolDef"
POLL = "the poll: run_check (JSON source) / run_tool (tool)"
HTTP = "… the HTTP request(s)"
CEL = "… output.main: the round trip to the CEL helper, this side (pickle, pipe, wait)"
REST = "… the rest (JSON: sha256; tool: templating, parsing each answer, to_cel, the steps' projection, the run's JSON)"
CHECK = "check_body: sha256 of the run, quiet"
HELPER = "the CEL helper process's own CPU"
STEPS = (PLACEHOLDERS, LOOKUP, LOAD, POLL, HTTP, CEL, REST, CHECK, HELPER)


@dataclass
class Spent:
    """CPU seconds per step, summed over `polls` polls."""
    polls: int = 0
    steps: Counter = field(default_factory=Counter)

    def per_poll(self, step: str) -> float | None:
        """µs a poll, None for a step this kind does not take."""
        if step == REST:
            seconds = self.steps[POLL] - self.steps[HTTP] - self.steps[CEL]
        elif step in self.steps:
            seconds = self.steps[step]
        else:
            return None
        return 1e6 * seconds / self.polls if self.polls else float("nan")

    @property
    def total(self) -> float:
        """µs a poll: this thread's steps (the nested ones are inside POLL) and the helper's."""
        top = sum(self.steps[s] for s in (PLACEHOLDERS, LOOKUP, LOAD, POLL, CHECK, HELPER))
        return 1e6 * top / self.polls if self.polls else float("nan")


def _timed(spent: Spent, label: str, fn, *args, **kwargs):
    start = time.thread_time()
    try:
        return fn(*args, **kwargs)
    finally:
        spent.steps[label] += time.thread_time() - start


def breakdown(database_url: str, secret_key: str, policy, prefixes: dict[str, str], polls: int,
              reps: int) -> dict[str, Spent]:
    """Each step of a quiet poll, run in this process one after another on `polls` watches of each kind (their
    rows as stored; `prefixes` maps a kind to its monitors' id prefix), `reps` times round the kinds: thread CPU
    per step (time.thread_time), and the CEL helper's CPU (its threads' schedstat). The same functions the worker's
    check calls, without the claim, the batch's load, the event and the actor around them, which every kind
    shares."""
    import engine.checks.cel as cel_module
    import engine.http as http
    import engine.tools as tools
    from bench.common import cpu_since, threads_cpu
    from bench.time_docs_parts import models_bound
    from engine.crypto import Keyring
    from engine.pipeline import QUIET, Prior, check_body, run_check
    from engine.placeholders import values as placeholder_values
    from engine.sources import SourceIO, SourcePolicy
    from engine.spec import check_from_record, source_from_record
    from models import utcnow
    from models.tools import find_tool, load_tool

    keyring, fetcher = Keyring.from_settings(secret_key, ""), http.Fetcher(policy)
    io, out, current, originals = SourceIO(fetcher, SourcePolicy()), {kind: Spent() for kind in prefixes}, {}, {}

    def wrap(owner, name: str, label: str) -> None:
        original = originals[(owner, name)] = getattr(owner, name)
        setattr(owner, name, lambda *args, **kwargs: _timed(current["spent"], label, original, *args, **kwargs))

    wrap(http.Fetcher, "_follow", HTTP)  # Fetcher.get and a GET step's Fetcher.call both go through it
    wrap(cel_module, "value", CEL)
    try:
        with models_bound(database_url) as database:
            rows = {kind: database.execute_sql(
                'SELECT user_id, source, "check", raw_hash, content_hash, check_state FROM monitors '
                "WHERE id LIKE %s ORDER BY id LIMIT %s", (f"{prefix}-%", polls)).fetchall()
                for kind, prefix in prefixes.items()}
            cel_module.decide("true", {})  # the helper started outside the measure
            child = cel_module._runner._child.pid
            for _ in range(reps):
                for kind, found in rows.items():
                    spent = current["spent"] = out[kind]
                    helper0 = threads_cpu([child])
                    for user_id, source_text, check_text, raw_hash, content_hash, state in found:
                        source = source_from_record(json.loads(source_text))
                        check = check_from_record(json.loads(check_text))
                        prior, now = Prior(raw_hash, content_hash, json.loads(state) if state else None), utcnow()
                        filled = _timed(spent, PLACEHOLDERS, placeholder_values, now, now, now)
                        if kind == "json":
                            outcome = _timed(spent, POLL, run_check, io, source, check, prior, 256 * 1024, now=now,
                                             placeholders=filled)
                        else:
                            row = _timed(spent, LOOKUP, find_tool, user_id, source.agent_id, source.tool)
                            if row is None or row.fingerprint != source.tool_fingerprint:
                                raise RuntimeError("the tool's fingerprint does not match its watch")
                            tool = _timed(spent, LOAD, load_tool, row, keyring)
                            body = _timed(spent, POLL, tools.run_tool, tool, source.arguments, fetcher, filled)
                            outcome = _timed(spent, CHECK, check_body, source, check, prior, body, 256 * 1024, now)
                        if outcome.kind != QUIET:
                            raise RuntimeError(f"a {kind} poll of the breakdown was {outcome.kind}, not quiet "
                                               f"{outcome.error}")
                        spent.polls += 1
                    spent.steps[HELPER] += cpu_since(helper0, [child])
    finally:
        for (owner, name), original in originals.items():
            setattr(owner, name, original)
        fetcher.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--items", type=int, required=True)
    args = parser.parse_args()
    serve(args.port, args.items)


if __name__ == "__main__":
    main()
