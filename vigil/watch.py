"""`vigil watch`: wakes as printed lines, for coding agents whose monitor tool wakes them on each line
(Claude Code's Monitor; seed 002's shape).

It follows the account's event stream (/api/events) and prints one line per wake:
`[vigil] <description>: <first line of what was found>`; a coalesced message (several wakes of one conversation
delivered together) prints one such line for each wake it carries. After each (re)connect it first reads what it
missed from /api/wakes after its cursor, which is kept under --state-dir, so a restart of Vigil or of the watch
neither loses a wake nor prints one twice. At --timeout it prints a line saying so and exits 0.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import queue
import sys
import threading
import time
from pathlib import Path

import requests

from engine.wake import wake_lines

#: the longest wait between reconnects
MAX_BACKOFF_SECONDS = 15.0
#: the stream sends a keep-alive every 15 s; a read that waits this long means the connection is dead
READ_TIMEOUT_SECONDS = 40.0


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if not args.token:
        print("vigil watch: give --token or set VIGIL_TOKEN (a runtime token, vgl_…).", file=sys.stderr)
        return 2
    try:
        timeout = parse_duration(args.timeout)
    except ValueError as exc:
        print(f"vigil watch: {exc}", file=sys.stderr)
        return 2
    watch = Watch(args.server.rstrip("/"), args.token, args.conversation, Path(args.state_dir))
    if args.after is not None:
        watch.save(args.after)
    return watch.run(time.monotonic() + timeout, args.timeout)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vigil watch", description="Print one line per wake, then exit at "
                                     "--timeout (re-run it to keep watching).")
    parser.add_argument("--server", default=os.environ.get("VIGIL_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--token", default=os.environ.get("VIGIL_TOKEN"),
                        help="a runtime token (default $VIGIL_TOKEN; prefer the variable: arguments show in ps)")
    parser.add_argument("--conversation", help="only this conversation's wakes (default: every one)")
    parser.add_argument("--after", help="print wakes after this cursor (default: the stored one, else from now)")
    parser.add_argument("--timeout", default="30m", help="exit after this long: 90s, 30m, 2h (default 30m)")
    parser.add_argument("--state-dir", default=os.environ.get("VIGIL_WATCH_STATE", str(Path.home() / ".vigil-watch")))
    return parser


def parse_duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    number, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "s")
    try:
        seconds = float(number) * units[unit]
    except ValueError:
        raise ValueError(f"--timeout must be a duration like 90s, 30m or 2h (got {text!r}).") from None
    if not 0 < seconds <= 7 * 86400:
        raise ValueError("--timeout must be more than 0 and at most 7 days.")
    return seconds


class Watch:
    def __init__(self, server: str, token: str, conversation: str | None, state_dir: Path) -> None:
        self.server, self.conversation = server, conversation
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"
        key = hashlib.sha256(f"{server}|{conversation or '*'}|{token}".encode()).hexdigest()[:16]
        self.state = state_dir / f"cursor-{key}"
        self.printed: set[int] = set()

    def cursor(self) -> str | None:
        try:
            return self.state.read_text().strip() or None
        except FileNotFoundError:
            return None

    def save(self, cursor: str) -> None:
        self.state.parent.mkdir(parents=True, exist_ok=True)
        partial = self.state.with_suffix(".tmp")
        partial.write_text(cursor)
        partial.replace(self.state)  # a crash mid-write leaves the old cursor, never half of one

    def run(self, deadline: float, timeout_text: str) -> int:
        backoff = 1.0
        while True:
            events: queue.Queue = queue.Queue()
            stop = threading.Event()
            threading.Thread(target=self._read_stream, args=(events, stop), daemon=True).start()
            try:
                outcome = self._follow(events, deadline)
            finally:
                stop.set()
            if outcome == "timeout":
                _say(f"[vigil] watch ended after {timeout_text} with no more wakes; run it again to keep watching.")
                return 0
            if outcome == "refused":
                return 1
            if outcome == "connected":
                backoff = 1.0
            time.sleep(min(backoff, max(0.0, deadline - time.monotonic())))
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)

    def _follow(self, events: queue.Queue, deadline: float) -> str:
        """Until the stream drops ("lost" or "connected" if it had been up) or the deadline ("timeout")."""
        connected = False
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            try:
                kind, value = events.get(timeout=left)
            except queue.Empty:
                return "timeout"
            if kind == "connected":
                connected = True
                if not self._catch_up():
                    return "connected"
            elif kind == "wake":
                self._show(value)
            elif kind == "refused":
                print(f"vigil watch: {value}", file=sys.stderr)
                return "refused"
            elif kind == "lost":
                return "connected" if connected else "lost"

    def _catch_up(self) -> bool:
        """Print what arrived after the cursor while not connected; from now when there is no cursor yet."""
        cursor = self.cursor() or "latest"
        while True:
            params = {"after": cursor, "limit": 200}
            if self.conversation:
                params["conversation_id"] = self.conversation
            try:
                page = self.session.get(f"{self.server}/api/wakes", params=params, timeout=30)
                page.raise_for_status()
                body = page.json()
            except (requests.RequestException, ValueError):
                return False
            for message in body["messages"]:
                self._show(message)
            cursor = body["next_cursor"]
            self.save(cursor)
            if len(body["messages"]) < 200:
                return True

    def _show(self, message: dict) -> None:
        if message.get("role") != "wake" or message["id"] in self.printed:
            return
        if self.conversation and message.get("conversation_id") != self.conversation:
            return
        stored = self.cursor()
        if stored is not None and stored.isdigit() and message["id"] <= int(stored):
            return
        for line in wake_lines(message.get("metadata") or {}, message.get("content", "")):
            _say(line)
        self.printed.add(message["id"])
        self.save(str(message["id"]))

    def _read_stream(self, events: queue.Queue, stop: threading.Event) -> None:
        """The SSE stream, parsed into ("connected"|"wake"|"lost"|"refused", value) on `events`."""
        try:
            with self.session.get(f"{self.server}/api/events", stream=True,
                                  timeout=(10, READ_TIMEOUT_SECONDS)) as answer:
                if answer.status_code in (401, 403):
                    events.put(("refused", f"the server refused the token ({answer.status_code})."))
                    return
                answer.raise_for_status()
                name = None
                for line in answer.iter_lines(decode_unicode=True):
                    if stop.is_set():
                        return
                    if line.startswith(":") and line[1:].strip() == "connected":
                        events.put(("connected", None))
                    elif line.startswith("event:"):
                        name = line[6:].strip()
                    elif line.startswith("data:") and name == "message.created":
                        events.put(("wake", json.loads(line[5:].strip())))
                    elif not line:
                        name = None
        except (requests.RequestException, ValueError):
            pass
        events.put(("lost", None))


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
