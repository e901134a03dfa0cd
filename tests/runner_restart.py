"""A stream watcher whose `vigil runner` is killed with -9 mid-stream and started again: every line it printed must
reach the conversation once, in order, with no "interrupted" notice (the restarted runner adopts the command).

The watcher prints numbered lines in three parts, each after the test opens its gate: part 1 while the runner
runs, part 2 while it is down, part 3 after it was started again (so the adopted command's own output, and its
exit, are watched by the new runner). Shared by the embedded (SQLite) and the PostgreSQL tests."""

from __future__ import annotations

import re
import time
from collections import Counter
from pathlib import Path

import requests

from tests.processes import group_gone, processes_with
from tests.reliability.stack import Stack

#: the parts the watcher prints: numbers 1-10 at once, 11-20 when `gate-1` exists, 21-30 when `gate-2` exists
PARTS = ((1, 10), (11, 20), (21, 30))
NUMBER = re.compile(r"\bline-(\d+)\b")
WAIT_SECONDS = 30.0  #: bound of each wait (for wakes, for the output file)


def gated_command(directory: Path) -> str:
    """The watcher's command: each part's lines a little apart (a few records, a few wakes), after its gate."""
    steps = []
    for n, (first, last) in enumerate(PARTS):
        if n:
            steps.append(f"while [ ! -e '{directory / f'gate-{n}'}' ]; do sleep 0.05; done")
        steps.append(f"for i in $(seq {first} {last}); do echo line-$i; sleep 0.02; done")
    return "; ".join(steps)


def wakes(stack: Stack, conversation: str) -> list[dict]:
    answer = requests.get(f"{stack.base}/api/conversations/{conversation}/messages", headers=stack.auth,
                          params={"after": "0", "limit": 500}, timeout=30)
    answer.raise_for_status()
    return [message for message in answer.json()["messages"] if message["role"] == "wake"]


def numbers(of: list[dict]) -> list[int]:
    """The line numbers the wakes carry, in the order they came."""
    return [int(n) for wake in of for n in NUMBER.findall(wake["content"])]


def is_ending(wake: dict) -> bool:
    return str(wake["metadata"].get("wake", {}).get("dedupe_key", "")).endswith(":end")


def wait(probe, what: str, stack: Stack):
    deadline = time.monotonic() + WAIT_SECONDS
    while not (value := probe()):
        assert time.monotonic() < deadline, f"{what}\n{stack.log_tails()}"
        time.sleep(0.2)
    return value


def runner_killed_mid_stream_loses_and_doubles_nothing(stack: Stack, tmp_path: Path) -> None:
    """The scenario on a stack whose server runs: pair a device, watch, kill -9 its runner, restart it, check."""
    state = stack.pair_runner("laptop")
    conversation = "restart-1"
    created = stack.tool(conversation, description="numbered lines", source={
        "type": "command", "device": "laptop", "mode": "stream", "command": gated_command(tmp_path)})
    assert created["status"] == "active", created
    wait(lambda: 10 in numbers(wakes(stack, conversation)), "part 1 never arrived", stack)

    stack.kill_runner("laptop")
    (tmp_path / "gate-1").touch()
    wait(lambda: any(b"line-20\n" in out.read_bytes() for out in (state / "output").glob("*.out")),
         "the watcher did not go on printing while its runner was down", stack)
    stack.start_runner("laptop")
    wait(lambda: 20 in numbers(wakes(stack, conversation)), "part 2 (printed while down) never arrived", stack)
    (tmp_path / "gate-2").touch()
    ending = wait(lambda: [w for w in wakes(stack, conversation) if is_ending(w)], "the watch never ended", stack)

    got = wakes(stack, conversation)
    counts = Counter(numbers(got))
    context = f"numbers: {numbers(got)}\n{stack.log_tails()}"
    assert numbers(got) == list(range(1, 31)), context
    assert all(count == 1 for count in counts.values()), context
    assert len(ending) == 1 and is_ending(got[-1]), context
    assert ending[0]["metadata"]["reason"] == "exited" and ending[0]["metadata"]["exit_code"] is None, ending
    assert not [w["content"] for w in got if "interrupted" in w["content"]], context
    assert "watching it again" in stack.logs["runner-laptop"].read_text(), context


def adopted_watcher_is_stopped_by_a_cancel(stack: Stack, tmp_path: Path) -> None:
    """After the restart the adopted command still obeys the server: cancelling its watch stops its group."""
    stack.pair_runner("laptop")
    created = stack.tool("restart-2", description="a quiet watcher", source={
        "type": "command", "device": "laptop", "mode": "stream",
        "command": f"echo ready; while [ ! -e '{tmp_path / 'never'}' ]; do sleep 0.05; done"})
    wait(lambda: any("ready" in w["content"] for w in wakes(stack, "restart-2")), "the watcher never printed", stack)
    [pgid] = {pgid for _, pgid in processes_with(str(tmp_path / "never"))}
    stack.kill_runner("laptop")
    stack.start_runner("laptop")
    wait(lambda: "watching it again" in stack.logs["runner-laptop"].read_text(), "the watcher was not adopted",
         stack)
    cancelled = requests.post(f"{stack.base}/api/tool/monitor", headers=stack.auth, timeout=30, json={
        "action": "monitor_cancel", "context": {"conversation_id": "restart-2", "channel": "chat"},
        "arguments": {"monitor_id": created["monitor_id"]}}).json()
    assert cancelled["ok"], cancelled
    wait(lambda: group_gone(pgid), "the adopted watcher's group outlived its cancel", stack)
    assert not [w["content"] for w in wakes(stack, "restart-2") if "interrupted" in w["content"]]

