"""Stream watchers exactly once under faults: two paired devices (real `vigil runner` processes) each run a stream
watcher that prints 2,000 numbered lines at a steady pace, while the web process is SIGKILLed and started again,
PostgreSQL is restarted, and then one device's runner is SIGKILLed mid-stream and started again.

The other device's watcher lives through the web and PostgreSQL faults and prints all 2,000 lines; each number
must reach its conversation exactly once, in order, followed by one "watcher exited (code 0)" wake.

A runner killed with -9 leaves its watcher running (the command is in a session of its own, writing to a file in
the state directory). The restarted runner adopts it and goes on tailing that file from where it had got to
(docs/runner.md), so that watcher too prints all 2,000 lines. What it printed is known from a side file the
printer appends to after each line it writes to stdout; every number in the side file must reach the
conversation exactly once, in order, no other number may, and the run ends with one "watcher exited" wake (its
code unknown: the command was no longer the restarted runner's child) and no "interrupted" notice.
"""

from __future__ import annotations

import re
import shlex
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tests.reliability.stack import Stack

pytestmark = pytest.mark.reliability

LINES = 2000
PACE_SECONDS = 0.025  #: a line every 25 ms: 50 s for all 2,000
#: (seconds after both watchers printed their first line, fault); injected one after the other, each at its time
FAULTS = ((10.0, "kill web"), (22.0, "restart postgres"), (34.0, "kill runner"))
RUNNER_DOWN_SECONDS = 2.0
SETTLE_SECONDS = 120.0  #: bound for both runs to end after the last fault
SETTINGS = {"DEVICE_ONLINE_SECONDS": "4", "DEVICE_OFFLINE_SECONDS": "6", "RUNNER_POLL_SECONDS": "2",
            "MONITOR_MAX_WAKES_PER_HOUR": "100000", "MONITOR_MAX_FIRES_PER_CONVERSATION_DAY": "100000"}
STEADY, KILLED = "steady", "killed"  #: the devices: the one whose runner lives on, the one whose runner is killed
NUMBER = re.compile(r"\bline-(\d{4})\b")

#: prints `line-NNNN` to stdout (the watcher's output) and then to the side file; on SIGTERM it finishes the
#: line it is on and exits, so the side file holds exactly the lines it printed
PRINTER = """\
import os, signal, sys, time

side, count, pace = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
stopping = []
signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
fd = os.open(side, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
start = time.monotonic()
for n in range(1, count + 1):
    if stopping:
        sys.exit(143)
    line = ("line-%04d\\n" % n).encode()
    os.write(1, line)
    os.write(fd, line)
    time.sleep(max(0.0, start + n * pace - time.monotonic()))
"""


@dataclass
class Stream:
    device: str
    conversation: str
    monitor_id: str
    printed_file: Path

    def printed(self) -> list[int]:
        """The numbers the watcher printed so far, as its side file holds them."""
        try:
            text = self.printed_file.read_text()
        except FileNotFoundError:
            return []
        return [int(match) for match in NUMBER.findall(text)]


def _wakes(stack: Stack, conversation: str) -> list[dict]:
    """Every wake message of the conversation, oldest first, read as a runtime reads them (the messages API)."""
    wakes, after = [], "0"
    while True:
        answer = requests.get(f"{stack.base}/api/conversations/{conversation}/messages", headers=stack.auth,
                              params={"after": after, "limit": 500}, timeout=30)
        answer.raise_for_status()
        page = answer.json()
        if not page["messages"]:
            return wakes
        wakes += [message for message in page["messages"] if message["role"] == "wake"]
        after = page["next_cursor"]


def _is_ending(wake: dict) -> bool:
    return str(wake["metadata"].get("wake", {}).get("dedupe_key", "")).endswith(":end")


def _settle(stack: Stack, streams: list[Stream]) -> dict[str, list[dict]]:
    """Wait (bounded) until each conversation has its ending wake; the wakes of each, by device."""
    deadline = time.monotonic() + SETTLE_SECONDS
    wakes: dict[str, list[dict]] = {}
    while True:
        try:
            wakes = {s.device: _wakes(stack, s.conversation) for s in streams}
        except (requests.RequestException, OSError):
            wakes = {}
        if wakes and all(any(_is_ending(w) for w in wakes[s.device]) for s in streams):
            time.sleep(2)  # anything (wrongly) written after the ending would show up in the final read
            return {s.device: _wakes(stack, s.conversation) for s in streams}
        if time.monotonic() >= deadline:
            return wakes or {s.device: _wakes(stack, s.conversation) for s in streams}
        time.sleep(1)


def _runs(stack: Stack, monitor_id: str) -> list[tuple]:
    """(status, end_reason, exit_code, acked_seq, records stored, highest seq, lines in them) of each run."""
    return stack.query(
        "SELECT r.status, r.end_reason, r.exit_code, r.acked_seq, count(rr.seq), coalesce(max(rr.seq), 0), "
        "coalesce(sum(rr.lines), 0) FROM command_runs r LEFT JOIN run_records rr ON rr.run_id = r.id "
        "WHERE r.monitor_id = %s GROUP BY r.id", (monitor_id,))


def _problems(numbers: list[int], printed: list[int]) -> list[str]:
    """What is wrong with the numbers the conversation got, given the ones the watcher printed."""
    counts = Counter(numbers)
    problems = []
    doubled = {n: c for n, c in sorted(counts.items()) if c > 1}
    lost = sorted(set(printed) - set(counts))
    extra = sorted(set(counts) - set(printed))
    backwards = [(a, b) for a, b in zip(numbers, numbers[1:]) if b <= a]
    if doubled:
        problems.append(f"{len(doubled)} numbers arrived more than once (number: times): "
                        f"{dict(list(doubled.items())[:30])}")
    if lost:
        problems.append(f"{len(lost)} printed numbers never arrived: {lost[:50]}")
    if extra:
        problems.append(f"{len(extra)} numbers arrived that the watcher never printed: {extra[:50]}")
    if backwards:
        problems.append(f"{len(backwards)} numbers arrived out of order (a, then b): {backwards[:30]}")
    return problems


def test_each_printed_line_reaches_the_conversation_exactly_once_in_order(stack_factory, services, tmp_path):
    pg, _ = services
    began = time.monotonic()
    stack = stack_factory(**SETTINGS)
    stack.start_web()
    stack.start_worker()
    stack.start_scheduler()
    stack.pair_runner(STEADY)
    stack.pair_runner(KILLED)
    (tmp_path / "printer.py").write_text(PRINTER)

    streams = []
    for device in (STEADY, KILLED):
        printed = tmp_path / f"printed-{device}.txt"
        command = f"exec {shlex.quote(sys.executable)} printer.py {printed.name} {LINES} {PACE_SECONDS}"
        created = stack.tool(f"stream-{device}", description=f"numbered lines on {device}", source={
            "type": "command", "device": device, "mode": "stream", "cwd": str(tmp_path), "command": command})
        assert created["status"] == "active", created
        streams.append(Stream(device, f"stream-{device}", created["monitor_id"], printed))
    steady, killed = streams

    deadline = time.monotonic() + 60
    while not all(s.printed() for s in streams):
        assert time.monotonic() < deadline, f"the watchers never started:\n{stack.log_tails()}"
        time.sleep(0.1)
    start = time.monotonic()
    timeline: list[str] = []

    def note(what: str) -> None:
        timeline.append(f"{time.monotonic() - start:.1f}s {what} (printed: steady {len(steady.printed())}, "
                        f"killed {len(killed.printed())})")

    runner_down: tuple[int, int] = (0, 0)
    for at, fault in FAULTS:
        time.sleep(max(0.0, start + at - time.monotonic()))
        note(f"{fault}: begin")
        if fault == "kill web":
            stack.kill("web")
            time.sleep(2.0)
            stack.start_web()
        elif fault == "restart postgres":
            pg.restart(down_seconds=3.0)
        elif fault == "kill runner":
            stack.kill_runner(KILLED)
            at_kill = len(killed.printed())
            time.sleep(RUNNER_DOWN_SECONDS)
            runner_down = (at_kill, len(killed.printed()))
            stack.start_runner(KILLED)
        note(f"{fault}: end")
    faults_over = {s.device: len(s.printed()) for s in streams}

    wakes = _settle(stack, streams)
    note("settled")
    report = "timeline: " + "; ".join(timeline)
    print(f"\n{report}\ntook {time.monotonic() - began:.0f}s in all")

    for stream in streams:
        mine = wakes[stream.device]
        printed = stream.printed()
        endings = [w for w in mine if _is_ending(w)]
        numbers = [int(n) for w in mine if not _is_ending(w) for n in NUMBER.findall(w["content"])]
        context = (f"{stream.device}: {len(mine)} wakes, {len(numbers)} numbers, printed {len(printed)}; "
                   f"runs (status, end, code, acked, records, max seq, lines): {_runs(stack, stream.monitor_id)}\n"
                   f"{report}\n{stack.log_tails(2500)}")
        assert printed == list(range(1, len(printed) + 1)), f"the printer skipped a number?\n{context}"
        problems = _problems(numbers, printed)
        assert not problems, "\n".join(problems) + "\n" + context
        assert len(endings) == 1, f"{len(endings)} ending wakes: {[w['content'] for w in endings]}\n{context}"
        assert _is_ending(mine[-1]), f"wakes after the ending: {[w['content'] for w in mine[-3:]]}\n{context}"
        [(status, end_reason, exit_code, acked, records, highest, lines)] = _runs(stack, stream.monitor_id)
        assert status == "done" and acked == records == highest and lines == len(printed), context

    steady_wakes, killed_wakes = wakes[STEADY], wakes[KILLED]
    # the steady watcher lived through the web kill and the PostgreSQL restart, and printed everything
    assert faults_over[STEADY] < LINES, f"the steady watcher finished before the faults were over\n{report}"
    assert steady.printed() == list(range(1, LINES + 1)), report
    assert steady_wakes[-1]["metadata"]["reason"] == "exited" and steady_wakes[-1]["metadata"]["exit_code"] == 0
    assert "watcher exited (code 0)" in steady_wakes[-1]["content"]
    # the killed runner's watcher printed while the runner was down; the restarted runner adopted it to its end
    at_kill, at_restart = runner_down
    assert 0 < at_kill < at_restart < LINES, (runner_down, report)
    assert killed.printed() == list(range(1, LINES + 1)), report
    assert killed_wakes[-1]["metadata"]["reason"] == "exited", killed_wakes[-1]
    assert killed_wakes[-1]["metadata"]["exit_code"] is None, killed_wakes[-1]
    assert not [w["content"] for w in killed_wakes if "interrupted" in w["content"]], report
    assert stack.alive() == {name: True for name in stack.processes}, stack.log_tails()
