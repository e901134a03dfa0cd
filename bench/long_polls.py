#!/usr/bin/env python
"""Devices at scale: what idle runner long-polls held by one production `vigil web` cost it, beside a bare asyncio
server holding the same number of idle connections.

    .venv/bin/python bench/long_polls.py [--polls 5000] [--first 1000] [--window 20]

Vigil runs as in production: `vigil web` on PostgreSQL (database vigil_bench_polls, or $VIGIL_BENCH_DB + "_polls";
recreated) and Redis ($VIGIL_BENCH_REDIS_URL, default db 13, flushed). `--polls` devices are paired at once by
inserting their rows with models/devices.py's own token functions (a pairing code each would take minutes), all
of one account. A client process (this file with --client) opens `GET /api/runner/poll?wait=600` for each, one
connection a device, as `vigil runner` does, with RUNNER_POLL_SECONDS=600 so that no poll ends and is sent again
during the measurement: idle means held, nothing arriving.

At 0, `--first` and `--polls` held polls the bench reads the web process's RSS (smaps_rollup), its CPU per second
over `--window` seconds (threads' schedstat, nanoseconds) and the Redis connections it holds. The same client
then opens as many idle connections to the baseline: an asyncio server (this file with --bare) that reads each
request's head and holds the connection unanswered, the least a process can do to hold a connection in Python.
Per-poll memory is (RSS at N − RSS at 0) / N; flat means the same per poll at `--first` and at `--polls`.
Goals (issue 32): web CPU ≤ 2 ms/s idle with `--polls` held; memory per poll flat (≤ 1.5× from `--first` to
`--polls`); one Redis connection for the web process's streams and polls, whatever their number.
Nothing asserts on time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

HOLD_SECONDS = 600
CPU_GOAL_MS = 2.0
FLAT_GOAL = 1.5


# ----------------------------------------------------------------------------------------------
# the client and the bare server: processes of their own, so their CPU and memory are not the measured ones


async def _client(port: int, tokens: list[str]) -> None:
    """Reads `open N` lines on stdin: opens N more held polls (the next N tokens), then prints `opened N`."""
    held, reader_in = [], asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader_in), sys.stdin)

    async def one(i: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write((f"GET /api/runner/poll?wait={HOLD_SECONDS} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                      f"Authorization: Bearer {tokens[i]}\r\nX-Vigil-Session: bench-{i}\r\n"
                      "X-Vigil-Runner-Version: bench\r\n\r\n").encode())
        await writer.drain()
        held.append((reader, writer))

    while line := (await reader_in.readline()).decode().strip():
        n = int(line.split()[1])
        start = len(held)
        for first in range(start, start + n, 200):  # under the listen backlog
            await asyncio.gather(*(one(i) for i in range(first, min(first + 200, start + n))))
        print(f"opened {len(held)}", flush=True)
    for _, writer in held:
        writer.close()


async def _bare(port_file: Path) -> None:
    held = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        held.append(writer)
        await reader.read()  # until the client closes

    server = await asyncio.start_server(hold, "127.0.0.1", 0, backlog=2048)
    port_file.write_text(str(server.sockets[0].getsockname()[1]))
    await server.serve_forever()


# ----------------------------------------------------------------------------------------------
# the bench


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 20000)), hard))


def _pair_devices(database_url: str, n: int) -> list[str]:
    """`n` devices of one account, inserted in batches with the tokens and digests pairing makes."""
    from models import connection
    from models.accounts import create_user
    from models.db import bind
    from models.tables import Device
    from engine.tokens import new_token, token_digest
    from models.devices import DEVICE_TOKEN_PREFIX
    from models.db import utcnow

    bind(database_url, 4)
    tokens = [new_token(DEVICE_TOKEN_PREFIX) for _ in range(n)]
    with connection() as db:
        user = create_user("polls-bench@example.com", "bench-password-not-real-1")
        now = utcnow()
        with db.atomic():
            for first in range(0, n, 1000):
                Device.insert_many([{"user": user.id, "name": f"bench-{i}", "token_digest": token_digest(tokens[i]),
                                     "created_at": now} for i in range(first, min(first + 1000, n))]).execute()
    return tokens


class Client:
    def __init__(self, procs, name: str, port: int, tokens_file: Path) -> None:
        import subprocess

        self.proc = subprocess.Popen([sys.executable, __file__, "--client", str(port), str(tokens_file)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     stderr=open(procs.logs / f"{name}.log", "wb"), start_new_session=True)
        procs.started.append((name, self.proc))

    def open(self, n: int) -> int:
        self.proc.stdin.write(f"open {n}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line.startswith("opened"):
            raise RuntimeError(f"the client stopped: {line!r}")
        return int(line.split()[1])


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Rss:"):
            return int(line.split()[1])
    raise RuntimeError(f"no Rss for {pid}")


def _measure(pid: int, window: float) -> tuple[float, int]:
    """(CPU ms per second over `window`, RSS KiB at its end) of one process."""
    from bench.common import cpu_since, threads_cpu

    before, started = threads_cpu([pid]), time.monotonic()
    time.sleep(window)
    return cpu_since(before, [pid]) * 1000 / (time.monotonic() - started), _rss_kib(pid)


def _settle(pid: int, quiet_ms: float = 10.0, timeout: float = 600) -> None:
    """Wait until what opening the connections started (each poll's check-in and first look at the database, in
    the web's threads) is done: two seconds in a row under `quiet_ms` of CPU each."""
    from bench.common import BenchError, cpu_since, threads_cpu

    deadline, calm = time.monotonic() + timeout, 0
    while calm < 2:
        if time.monotonic() > deadline:
            raise BenchError(f"process {pid} did not settle within {timeout}s")
        before = threads_cpu([pid])
        time.sleep(1.0)
        calm = calm + 1 if cpu_since(before, [pid]) * 1000 < quiet_ms else 0


def run(args) -> int:
    from bench import common
    from bench.common import (RESULTS, VIGIL, BenchError, clean_up, cpu_since, failed, figure, free_port, prepare,
                              publish, record, run_notes, threads_cpu, versions, wait_listening)
    import redis
    import requests

    _raise_fd_limit()
    header, procs = prepare()
    db_name = os.environ.get("VIGIL_BENCH_DB", "vigil_bench") + "_polls"
    database_url = common.database_url(db_name)
    started = time.monotonic()
    levels = [0, args.first, args.polls]
    vigil_rows: dict[int, tuple[float, int]] = {}
    bare_rows: dict[int, tuple[float, int]] = {}
    redis_connections: dict[int, int] = {}
    taking: dict[int, float] = {}  # web CPU ms per poll taken (check-in, subscription, first look), by level
    try:
        common.fresh_database(db_name)
        rds = redis.Redis.from_url(common.REDIS_URL)
        rds.flushdb()
        env = {"DATABASE_URL": database_url, "REDIS_URL": common.REDIS_URL, "LOG_LEVEL": "WARNING",
               "SECRET_KEY": "bench-only-secret-key", "VIGIL_DATA_DIR": str(RESULTS / "var-polls"),
               "RUNNER_POLL_SECONDS": str(HOLD_SECONDS), "DEVICE_ONLINE_SECONDS": str(HOLD_SECONDS * 2)}
        if procs.start("polls-migrate", [VIGIL, "migrate"], env).wait(120) != 0:
            raise BenchError(f"vigil migrate failed:\n{procs.tail('polls-migrate')}")
        procs.stop("polls-migrate")
        tokens = _pair_devices(database_url, args.polls + 1)  # the last one warms the web up
        tokens_file = RESULTS / "logs" / "polls-tokens.json"
        tokens_file.write_text(json.dumps(tokens))
        port = free_port()
        web = procs.start("polls-web", [VIGIL, "web", "--host", "127.0.0.1", "--port", str(port)], env)
        wait_listening(port, procs, 60)
        requests.get(f"http://127.0.0.1:{port}/readyz", timeout=10)  # warm: the first request's imports
        warm = requests.get(f"http://127.0.0.1:{port}/api/runner/poll?wait=1", timeout=30,
                            headers={"Authorization": f"Bearer {tokens[-1]}", "X-Vigil-Session": "warm"})
        if warm.status_code != 200:
            raise BenchError(f"a poll was answered {warm.status_code}: {warm.text[:300]}")
        _settle(web.pid)

        from adapters.events import make_bus

        name = make_bus(common.REDIS_URL, database_url).connection_name  # this Vigil's, not another's on Redis

        def ours() -> int:
            return sum(1 for c in rds.client_list() if c.get("name") == name)

        client = Client(procs, "polls-client", port, tokens_file)
        for level in levels:
            if level:
                before = threads_cpu([web.pid])
                have = client.open(level - _opened(vigil_rows, levels, level))
                if have != level:
                    raise BenchError(f"the client holds {have} polls, not {level}")
                _wait_checked_in(database_url, level, procs)
                _settle(web.pid)
                taking[level] = cpu_since(before, [web.pid]) * 1000 / (level - _opened(vigil_rows, levels, level))
            procs.check_alive()
            vigil_rows[level] = _measure(web.pid, args.window)
            redis_connections[level] = ours()
            print(f"vigil web, {level} polls held: {vigil_rows[level][0]:.2f} ms/s, "
                  f"RSS {vigil_rows[level][1] / 1024:.1f} MiB, {redis_connections[level]} event connection(s)",
                  flush=True)
        procs.stop("polls-client", "polls-web")

        port_file = RESULTS / "logs" / "polls-bare.port"
        port_file.unlink(missing_ok=True)
        bare = procs.start("polls-bare", [sys.executable, __file__, "--bare", str(port_file)])
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text():
            if time.monotonic() > deadline:
                raise BenchError("the bare server did not start")
            time.sleep(0.1)
        bare_port = int(port_file.read_text())
        _settle(bare.pid)
        client = Client(procs, "polls-bare-client", bare_port, tokens_file)
        for level in levels:
            if level:
                client.open(level - _opened(bare_rows, levels, level))
                _settle(bare.pid)
            bare_rows[level] = _measure(bare.pid, args.window)
            print(f"bare asyncio, {level} connections held: {bare_rows[level][0]:.2f} ms/s, "
                  f"RSS {bare_rows[level][1] / 1024:.1f} MiB", flush=True)
        notes = run_notes(procs, ["polls-web"], started)
    except (Exception, KeyboardInterrupt) as exc:
        clean_up(procs, common.REDIS_URL)
        return failed(exc)
    clean_up(procs, common.REDIS_URL)
    return _report(header, versions(), args, levels, vigil_rows, bare_rows, redis_connections, taking, notes,
                   publish, record, figure)


def _opened(rows: dict, levels: list[int], level: int) -> int:
    """How many connections the levels measured before `level` opened."""
    return max([lv for lv in levels if lv < level and lv in rows], default=0)


def _wait_checked_in(database_url: str, n: int, procs, timeout: float = 300) -> None:
    """Each held poll checked in first (its device's last_seen_at is written): then it waits on its queue."""
    import psycopg2

    from bench.common import BenchError

    deadline = time.monotonic() + timeout
    conn = psycopg2.connect(database_url)
    conn.autocommit = True
    try:
        while time.monotonic() < deadline:
            procs.check_alive()
            with conn.cursor() as cur:
                cur.execute("SELECT count(*) FROM devices WHERE runner_version = 'bench'")
                if cur.fetchone()[0] >= n:
                    return
            time.sleep(0.5)
    finally:
        conn.close()
    raise BenchError(f"{n} polls did not check in within {timeout}s")


def _report(header, vers, args, levels, vigil_rows, bare_rows, redis_connections, taking, notes, publish, record,
            figure) -> int:
    first, last = args.first, args.polls

    def per_poll(rows, n):
        return (rows[n][1] - rows[0][1]) / n

    v_first, v_last = per_poll(vigil_rows, first), per_poll(vigil_rows, last)
    b_first, b_last = per_poll(bare_rows, first), per_poll(bare_rows, last)
    flat = v_last / v_first if v_first > 0 else float("nan")
    cpu_idle, cpu_held = vigil_rows[0][0], vigil_rows[last][0]
    lines = ["# Devices at scale: idle long-polls held by one `vigil web`", "", *header, f"- {vers}",
             f"- each level measured over {args.window:.0f} s; polls held with wait={HOLD_SECONDS} "
             f"(RUNNER_POLL_SECONDS={HOLD_SECONDS}), nothing arriving", "",
             "| held | vigil web CPU ms/s | vigil web RSS MiB | Redis event connections | bare asyncio CPU ms/s "
             "| bare RSS MiB |", "|---:|---:|---:|---:|---:|---:|"]
    for level in levels:
        lines.append(f"| {level:,} | {vigil_rows[level][0]:.2f} | {vigil_rows[level][1] / 1024:.1f} | "
                     f"{redis_connections[level]} | {bare_rows[level][0]:.2f} | {bare_rows[level][1] / 1024:.1f} |")
    lines += ["", f"Memory per held poll: {v_first:.1f} KiB at {first:,}, {v_last:.1f} KiB at {last:,} "
              f"(×{flat:.2f}); the bare server's per connection {b_first:.1f} / {b_last:.1f} KiB; Vigil ÷ bare at "
              f"{last:,}: {v_last / b_last:.2f}.", "",
              f"Taking a poll (its check-in, subscription and first look at the database, until it is held) cost "
              f"the web {taking[first]:.2f} ms of CPU each for the first {first:,}, {taking[last]:.2f} ms for the "
              f"rest; at the default RUNNER_POLL_SECONDS=25 each device polls again every 25 s, so {last:,} devices "
              f"would cost ~{taking[last] * last / 25:.0f} ms/s of web CPU in polls taken, though none is answered "
              f"with work (on a loaded machine: read it beside the load average).", "",
              *[f"- {note}" for note in notes],
              "- the web log's tracebacks are the held polls cancelled when the bench stops `vigil web` (uvicorn "
              "cancels what is still running 2 s after SIGTERM): a web process stopped under held polls logs one "
              "each"]
    rows = [
        figure(f"web CPU with {last:,} idle polls held (ms/s)", f"{cpu_held:.2f}", f"{bare_rows[last][0]:.2f} bare",
               cpu_held / bare_rows[last][0] if bare_rows[last][0] else None, f"≤ {CPU_GOAL_MS} ms/s",
               cpu_held <= CPU_GOAL_MS),
        figure("web CPU idle, no polls (ms/s)", f"{cpu_idle:.2f}", f"{bare_rows[0][0]:.2f} bare",
               cpu_idle / bare_rows[0][0] if bare_rows[0][0] else None, f"≤ {CPU_GOAL_MS} ms/s",
               cpu_idle <= CPU_GOAL_MS),
        figure(f"memory per held poll at {last:,} (KiB)", f"{v_last:.1f}", f"{b_last:.1f} bare", v_last / b_last,
               f"flat: ≤ {FLAT_GOAL}× the figure at {first:,} ({v_first:.1f})", flat <= FLAT_GOAL),
        figure(f"web CPU per poll taken (check-in to held), at {last:,}", f"{taking[last]:.2f} ms", "—", None),
        figure(f"Redis connections for {last:,} held polls", str(redis_connections[last]), f"{last:,} before",
               redis_connections[last] / last, "1", redis_connections[last] == 1),
    ]
    record("long_polls", rows)
    return publish("long_polls.md", "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--client"]:
        _raise_fd_limit()
        asyncio.run(_client(int(argv[1]), json.loads(Path(argv[2]).read_text())))
        return 0
    if argv[:1] == ["--bare"]:
        _raise_fd_limit()
        asyncio.run(_bare(Path(argv[1])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=5000)
    parser.add_argument("--first", type=int, default=1000)
    parser.add_argument("--window", type=float, default=20.0)
    args = parser.parse_args(argv)
    if not 0 < args.first < args.polls:
        parser.error("--first must be between 0 and --polls")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
