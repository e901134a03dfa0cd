"""A runner killed with -9 and started again: the stream watchers it left running are adopted, not interrupted.

Each command here is started by another Python process that exits at once, as a killed runner leaves it: the
command is then no child of the test, and its run is spooled as the killed runner left it."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from runner import processes
from runner.framing import FLOOD_MAX_LINES, FLOOD_TEXT
from runner.spool import ENDED, RUNNING, Spool
from runner.streams import StreamWatch

ROOT = Path(__file__).resolve().parents[2]

#: starts argv[1] as a runner does, its output to argv[2], and exits: prints the command's pid and identity
ORPHAN = """
import sys
from runner import processes
with open(sys.argv[2], "ab") as sink:
    pid = processes.spawn(sys.argv[1], None, sink).pid
print(pid, processes.identity(pid))
"""


@pytest.fixture()
def spool(tmp_path):
    spool = Spool(str(tmp_path / "spool.sqlite3"))
    yield spool
    spool.close()


def wait_for(predicate, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def orphan(spool, tmp_path, command: str) -> tuple:
    """`command` started by a runner that is gone since; its run spooled `started`; (pid, identity, output)."""
    output = tmp_path / "run-1.out"
    spool.claim("run-1", "stream", now=1.0, output=str(output))
    pid, identity = subprocess.run([sys.executable, "-c", ORPHAN, command, str(output)], cwd=ROOT, check=True,
                                   capture_output=True, text=True).stdout.split()
    identity = None if identity == "None" else identity
    spool.append("run-1", [{"kind": "started", "pid": int(pid)}], status=RUNNING, pid=int(pid), pgid=int(pid),
                 identity=identity)
    return int(pid), identity, output


def records(spool):
    return [record for _, record in spool.pending("run-1", limit=10**6)]


def lines_of(sent):
    return [line for record in sent if record["kind"] == "lines" for line in record["lines"]]


def gone(pgid):
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def test_stream_recovery_adopts_a_running_command_and_goes_on_from_the_spooled_offset(spool, tmp_path):
    go = tmp_path / "go"
    pid, _, output = orphan(spool, tmp_path, f"echo line-1; echo line-2; while [ ! -e '{go}' ]; do sleep 0.05; "
                                             "done; echo line-3; echo line-4")
    wait_for(lambda: output.read_bytes().count(b"\n") == 2)
    # the killed runner had spooled line-1 (and read no further); line-2 was printed after
    spool.append("run-1", [{"kind": "lines", "lines": ["line-1"]}], read_offset=len(b"line-1\n"), lines=1)
    watch = StreamWatch(spool, spool.run("run-1"))
    assert watch.recover() is True
    thread = threading.Thread(target=watch.watch)
    thread.start()
    wait_for(lambda: "line-2" in lines_of(records(spool)))
    go.touch()
    thread.join(15)
    sent = records(spool)
    assert lines_of(sent) == ["line-1", "line-2", "line-3", "line-4"]
    assert [record["kind"] for record in sent if record["kind"] not in ("lines",)] == ["started", "exit"]
    assert sent[-1] == {"kind": "exit", "code": None, "reason": "exited"}
    assert spool.run("run-1").status == ENDED
    wait_for(lambda: gone(pid))


def test_stream_recovery_ends_a_command_that_exited_while_the_runner_was_down_as_exited(spool, tmp_path):
    pid, identity, output = orphan(spool, tmp_path, "echo a; printf b")
    wait_for(lambda: not processes.leader_alive(pid, identity))
    assert StreamWatch(spool, spool.run("run-1")).recover() is False
    assert records(spool) == [{"kind": "started", "pid": pid}, {"kind": "lines", "lines": ["a", "b"]},
                              {"kind": "exit", "code": None, "reason": "exited"}]
    assert spool.run("run-1").read_offset == output.stat().st_size


def test_stream_recovery_adopted_watch_obeys_a_stop_and_stops_its_group(spool, tmp_path):
    pid, _, _ = orphan(spool, tmp_path, "echo ready; sleep 100 | cat")
    watch = StreamWatch(spool, spool.run("run-1"))
    assert watch.recover() is True
    thread = threading.Thread(target=watch.watch)
    thread.start()
    wait_for(lambda: lines_of(records(spool)) == ["ready"])
    watch.stop("stopped")
    thread.join(15)
    assert records(spool)[-1] == {"kind": "exit", "code": None, "reason": "stopped"}
    assert gone(pid)


def test_stream_recovery_adopted_watch_keeps_counting_toward_the_flood_guard(spool, tmp_path):
    pid, _, _ = orphan(spool, tmp_path, "echo last-allowed; echo one-too-many; sleep 100")
    spool.append("run-1", [], lines=FLOOD_MAX_LINES - 1)
    watch = StreamWatch(spool, spool.run("run-1"))
    assert watch.recover() is True
    watch.watch()
    sent = records(spool)
    assert lines_of(sent) == ["last-allowed"]
    assert sent[-2:] == [{"kind": "notice", "text": FLOOD_TEXT}, {"kind": "exit", "code": None, "reason": "flood"}]
    assert gone(pid)


def test_stream_recovery_leaves_a_stranger_with_the_pid_alone(spool, tmp_path):
    pid, identity, _ = orphan(spool, tmp_path, "sleep 100")
    if identity is None:
        pytest.skip("no /proc: a process's identity can't be read here")
    boot, start = identity.split(":")
    spool.append("run-1", [], identity=f"{boot}:{int(start) + 1}")  # the command ended; its pid was reused
    try:
        assert StreamWatch(spool, spool.run("run-1")).recover() is False
        assert records(spool)[-1] == {"kind": "exit", "code": None, "reason": "exited"}
        assert not gone(pid)
    finally:
        processes.stop_group(pid)


def test_leader_alive_is_false_for_a_zombie_a_stranger_and_no_pid():
    running = processes.spawn("sleep 100", None, None)
    exited = processes.spawn("exit 0", None, None)
    try:
        known = processes.identity(running.pid)
        assert processes.leader_alive(running.pid, known)
        wait_for(lambda: not processes.leader_alive(exited.pid, None))  # a zombie: not reaped by its parent yet
        assert exited.returncode is None
        if known is not None:
            boot, start = known.split(":")
            assert not processes.leader_alive(running.pid, f"{boot}:{int(start) + 1}")
        assert not processes.leader_alive(None, None)
    finally:
        processes.stop_group(running.pid, running)
        exited.wait()
