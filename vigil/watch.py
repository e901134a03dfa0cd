"""`vigil watch`: wakes as printed lines, for coding agents whose monitor tool wakes them on each line
(Claude Code's Monitor; seed 002's shape).

It follows the account's event stream (/api/events) and prints one line per wake:
`[vigil] <description>: <first line of what was found>`; a coalesced message (several wakes of one conversation
delivered together) prints one such line for each wake it carries. After each (re)connect it first reads what it
missed from /api/wakes after its cursor, which is kept under --state-dir, so a restart of Vigil or of the watch
neither loses a wake nor prints one twice. At --timeout (by default just under the 5 minutes after which Claude
Code's Monitor stops a command) it prints a line saying so and exits 0.

When Vigil can't be reached (no connection, a 5xx) it says so on stderr, naming the URL, and keeps trying with
backoff for --retry-for; then it prints a last line saying why it stopped and exits 3. A refused token (401/403)
or an address that isn't Vigil's ends it at once (4 and 3): trying again would not help. `--conversation new`
makes a conversation id the model can know, prints it first, and watches that conversation.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import queue
import re
import secrets
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import requests

from engine.wake import wake_lines

#: the longest wait between reconnects
MAX_BACKOFF_SECONDS = 15.0
#: the stream sends a keep-alive every 15 s; a read that waits this long means the connection is dead
READ_TIMEOUT_SECONDS = 40.0
#: the default --timeout: under the 5 minutes after which Claude Code's Monitor tool stops a command by default
DEFAULT_TIMEOUT = "4m45s"
#: the default --retry-for: how long Vigil may stay unreachable before the watch gives up
DEFAULT_RETRY_FOR = "60s"
#: exit codes (listed in --help and docs/agents.md)
EXIT_ENDED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_REFUSED = 0, 2, 3, 4

EXIT_CODES = """exit codes:
  0  --timeout was reached; the last line says so: run it again to keep watching
  2  a bad argument, or no token
  3  Vigil could not be reached for --retry-for (or until --timeout), or --server is not Vigil's address
  4  Vigil refused the token (401/403)"""


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if not args.token:
        print("vigil watch: give --token or set VIGIL_TOKEN (a runtime token, vgl_…).", file=sys.stderr)
        return EXIT_USAGE
    try:
        timeout = parse_duration(args.timeout, "--timeout")
        retry_for = parse_duration(args.retry_for, "--retry-for")
        server = parse_server(args.server)
    except ValueError as exc:
        print(f"vigil watch: {exc}", file=sys.stderr)
        return EXIT_USAGE
    conversation, after, again = args.conversation, args.after, "run it again"
    if conversation == "new":
        conversation = f"cc-{secrets.token_hex(4)}"
        after = "0" if after is None else after  # nothing of a new conversation can have been printed yet
        again = f"run it again with --conversation {conversation}"
        _say(f'[vigil] watching conversation {conversation}: pass conversation_id "{conversation}" to '
             f"monitor_create, and --conversation {conversation} when you run vigil watch again.")
    watch = Watch(server, args.token, conversation, Path(args.state_dir), retry_for, args.retry_for)
    if after is not None:
        watch.save(after)
    ended = f"[vigil] watch ended after {args.timeout} with no more wakes; {again} to keep watching."
    return watch.run(time.monotonic() + timeout, ended)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vigil watch", description="Print one line per wake, then exit at "
                                     "--timeout (re-run it to keep watching).", epilog=EXIT_CODES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", default=os.environ.get("VIGIL_URL", "http://127.0.0.1:8000"),
                        help="Vigil's address (default $VIGIL_URL, else http://127.0.0.1:8000)")
    parser.add_argument("--token", default=os.environ.get("VIGIL_TOKEN"),
                        help="a runtime token (default $VIGIL_TOKEN; prefer the variable: arguments show in ps)")
    parser.add_argument("--conversation", help="only this conversation's wakes; 'new' makes a fresh id (cc-…), "
                        "prints it as the first line and watches it (default: every conversation of the account)")
    parser.add_argument("--after", help="print wakes after this cursor (default: the stored one, else from now)")
    parser.add_argument("--timeout", default=DEFAULT_TIMEOUT, help="exit after this long: 90s, 4m45s, 2h (default "
                        f"{DEFAULT_TIMEOUT}, under the 5 minutes after which Claude Code's Monitor stops a command)")
    parser.add_argument("--retry-for", default=DEFAULT_RETRY_FOR, help="while Vigil can't be reached, keep trying "
                        f"this long, then exit 3 (default {DEFAULT_RETRY_FOR})")
    parser.add_argument("--state-dir", default=os.environ.get("VIGIL_WATCH_STATE", str(Path.home() / ".vigil-watch")))
    return parser


def parse_duration(text: str, flag: str = "--timeout") -> float:
    """Seconds in `90`, `90s`, `30m`, `2h`, or units together: `4m45s`, `1h30m`."""
    together = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?", text)
    units = {"s": 1, "m": 60, "h": 3600}
    number, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "s")
    try:
        if together and sum(part is not None for part in together.groups()) > 1:
            hours, minutes, seconds = (float(part or 0) for part in together.groups())
            total = hours * 3600 + minutes * 60 + seconds
        else:
            total = float(number) * units[unit]
    except ValueError:
        raise ValueError(f"{flag} must be a duration like 90s, 30m or 2h (got {text!r}).") from None
    if not 0 < total <= 7 * 86400:
        raise ValueError(f"{flag} must be more than 0 and at most 7 days.")
    return total


def parse_server(text: str) -> str:
    """The --server URL without a trailing slash; a ValueError naming what to fix when it is not an http(s) URL."""
    parts = urlsplit(text.strip())
    try:
        parts.port  # a port that is not a number between 0 and 65535 raises here
    except ValueError:
        parts = parts._replace(scheme="")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--server must be Vigil's address, like http://127.0.0.1:8000 (got {shown(text)!r}).")
    return text.strip().rstrip("/")


def shown(url: str) -> str:
    """The URL without any user:password@ in it, fit for a message."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


@dataclass(frozen=True)
class Failure:
    """Why Vigil could not be followed: a sentence naming the URL, what to do about it, whether trying again
    can help, and the exit code when the watch gives up."""
    message: str
    advice: str = "check --server (or $VIGIL_URL) and that Vigil is running"
    retry: bool = True
    code: int = EXIT_UNREACHABLE


def failure_of_answer(url: str, answer: requests.Response) -> Failure | None:
    """None for a 2xx/3xx answer; else what it means."""
    status = answer.status_code
    if status in (401, 403):
        return Failure(f"Vigil at {shown(url)} refused the token ({status})",
                       "set VIGIL_TOKEN to a valid runtime token (vigil token create)", False, EXIT_REFUSED)
    if status >= 500 or status in (408, 425, 429):
        return Failure(f"can't reach Vigil at {shown(url)}: it answered {status}")
    if status >= 400:
        return Failure(f"can't reach Vigil at {shown(url)}: it answered {status}",
                       "check that --server (or $VIGIL_URL) is Vigil's address", False)
    return None


def failure_of_error(url: str, exc: Exception) -> Failure:
    return Failure(f"can't reach Vigil at {shown(url)}: {_reason(exc)}")


def _reason(exc: Exception) -> str:
    if isinstance(exc, requests.ConnectTimeout):
        return "no answer within 10s"
    if isinstance(exc, requests.ReadTimeout):
        return f"the connection went silent for {READ_TIMEOUT_SECONDS:g}s"
    if isinstance(exc, requests.exceptions.ChunkedEncodingError):
        return "the connection was cut"
    text = str(exc)
    for needles, reason in ((("Connection refused", "ECONNREFUSED"), "connection refused"),
                            (("Name or service not known", "nodename nor servname", "NameResolution",
                              "getaddrinfo failed", "Temporary failure in name resolution"), "unknown host"),
                            (("CERTIFICATE_VERIFY_FAILED",), "its TLS certificate was not accepted"),
                            (("Connection reset", "RemoteDisconnected", "ChunkedEncodingError"),
                             "the connection was cut")):
        if any(needle in text for needle in needles):
            return reason
    return f"the connection failed ({type(exc).__name__})"


class Watch:
    def __init__(self, server: str, token: str, conversation: str | None, state_dir: Path,
                 retry_for: float = 60.0, retry_text: str = DEFAULT_RETRY_FOR) -> None:
        self.server, self.conversation = server, conversation
        self.retry_for, self.retry_text = retry_for, retry_text
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"
        key = hashlib.sha256(f"{server}|{conversation or '*'}|{token}".encode()).hexdigest()[:16]
        self.state = state_dir / f"cursor-{key}"
        self.printed: set[int] = set()
        #: the current outage: its last failure, when it began, the wait before the next try
        self.last: Failure | None = None
        self.down_since: float | None = None
        self.backoff = 1.0

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

    def run(self, deadline: float, ended: str) -> int:
        """Follow until the deadline (print `ended`, exit 0), or until Vigil has been unreachable for
        --retry-for, or refuses the token, or is not Vigil (say why, exit non-zero)."""
        while True:
            failure = self._session(deadline)
            if failure is None:  # the deadline came
                return self._give_up(self.last) if self.last is not None else _ended(ended)
            now = time.monotonic()
            self.down_since = now if self.down_since is None else self.down_since
            give_up_at = min(deadline, self.down_since + self.retry_for)
            if not failure.retry or now >= give_up_at:
                return self._give_up(failure)
            if self.last is None or failure.message != self.last.message:
                within = "until --timeout" if give_up_at == deadline else f"for up to {self.retry_text}"
                _complain(f"{failure.message}; trying again {within}.")
            self.last = failure
            time.sleep(min(self.backoff, give_up_at - now))
            self.backoff = min(self.backoff * 2, MAX_BACKOFF_SECONDS)

    def _connected(self) -> None:
        """Caught up: an outage, if there was one, is over."""
        if self.last is not None:
            _complain(f"reconnected to Vigil at {shown(self.server)}.")
        self.backoff, self.down_since, self.last = 1.0, None, None

    def _give_up(self, failure: Failure) -> int:
        _complain(f"{failure.message}; {failure.advice}. Stopped (exit {failure.code}).")
        _say(f"[vigil] watch stopped: {failure.message}; {failure.advice}, then run it again.")
        return failure.code

    def _session(self, deadline: float) -> Failure | None:
        """One connection, until it fails (why) or the deadline comes (None)."""
        events: queue.Queue = queue.Queue()
        stop = threading.Event()
        threading.Thread(target=self._read_stream, args=(events, stop), daemon=True).start()
        try:
            return self._follow(events, deadline)
        finally:
            stop.set()

    def _follow(self, events: queue.Queue, deadline: float) -> Failure | None:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                kind, value = events.get(timeout=left)
            except queue.Empty:
                return None
            if kind == "connected":
                failure = self._catch_up()
                if failure is not None:
                    return failure
                self._connected()
            elif kind == "wake":
                self._show(value)
            else:
                return value

    def _catch_up(self) -> Failure | None:
        """Print what arrived after the cursor while not connected; from now when there is no cursor yet."""
        cursor, url = self.cursor() or "latest", f"{self.server}/api/wakes"
        while True:
            params = {"after": cursor, "limit": 200}
            if self.conversation:
                params["conversation_id"] = self.conversation
            try:
                page = self.session.get(url, params=params, timeout=30)
                failure = failure_of_answer(url, page)
                if failure is not None:
                    return failure
                body = page.json()
                messages, cursor = body["messages"], body["next_cursor"]
            except requests.RequestException as exc:
                return failure_of_error(url, exc)
            except (ValueError, KeyError, TypeError):
                return Failure(f"can't reach Vigil at {shown(url)}: its answer was not a page of wakes")
            for message in messages:
                self._show(message)
            self.save(cursor)
            if len(messages) < 200:
                return None

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
        """The SSE stream, parsed into ("connected"|"wake"|"failed", value) on `events`."""
        url = f"{self.server}/api/events"
        try:
            with self.session.get(url, stream=True, timeout=(10, READ_TIMEOUT_SECONDS)) as answer:
                failure = failure_of_answer(url, answer) or _not_a_stream(url, answer)
                if failure is not None:
                    events.put(("failed", failure))
                    return
                _parse_stream(answer, events, stop)
        except (requests.RequestException, ValueError) as exc:
            events.put(("failed", failure_of_error(url, exc)))
            return
        events.put(("failed", Failure(f"can't reach Vigil at {shown(url)}: the connection closed")))


def _not_a_stream(url: str, answer: requests.Response) -> Failure | None:
    kind = answer.headers.get("content-type", "")
    if kind.startswith("text/event-stream"):
        return None
    return Failure(f"can't reach Vigil at {shown(url)}: it answered {kind or 'something'}, not an event stream",
                   "check that --server (or $VIGIL_URL) is Vigil's address", False)


def _parse_stream(answer: requests.Response, events: queue.Queue, stop: threading.Event) -> None:
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


def _ended(line: str) -> int:
    _say(line)
    return EXIT_ENDED


def _complain(line: str) -> None:
    print(f"vigil watch: {line}", file=sys.stderr, flush=True)


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
