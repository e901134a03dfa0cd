import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner.spool import DONE, ENDED, RUNNING, STARTING, Spool

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def spool(tmp_path):
    spool = Spool(str(tmp_path / "spool.sqlite3"))
    yield spool
    spool.close()


def lines(text):
    return {"kind": "lines", "lines": [text]}


def test_spool_claims_a_run_id_once(spool):
    assert spool.claim("run-1", "stream", now=1.0, output="/tmp/x.out")
    assert not spool.claim("run-1", "stream", now=2.0)
    run = spool.run("run-1")
    assert (run.status, run.output, run.next_seq, run.read_offset) == (STARTING, "/tmp/x.out", 1, 0)


def test_spool_numbers_records_from_1_and_moves_the_offset_with_them(spool):
    spool.claim("run-1", "stream", now=1.0)
    assert spool.append("run-1", [{"kind": "started", "pid": 42}], status=RUNNING, pid=42, pgid=42) == 1
    assert spool.append("run-1", [lines("a"), lines("b")], read_offset=4, lines=2) == 3
    run = spool.run("run-1")
    assert (run.status, run.pid, run.next_seq, run.read_offset, run.lines) == (RUNNING, 42, 4, 4, 2)
    assert spool.pending("run-1") == [(1, {"kind": "started", "pid": 42}), (2, lines("a")), (3, lines("b"))]


def test_spool_append_is_all_or_nothing(spool):
    spool.claim("run-1", "stream", now=1.0)
    spool.append("run-1", [lines("kept")], read_offset=5)
    with pytest.raises(TypeError):
        spool.append("run-1", [lines("lost"), {"kind": "lines", "lines": [object()]}], read_offset=99)
    run = spool.run("run-1")
    assert (run.read_offset, run.next_seq) == (5, 2)
    assert spool.pending("run-1") == [(1, lines("kept"))]


def test_spool_append_refuses_an_unknown_column(spool):
    spool.claim("run-1", "stream", now=1.0)
    with pytest.raises(ValueError):
        spool.append("run-1", [], next_seq=1)


def test_spool_ack_forgets_acknowledged_records(spool):
    spool.claim("run-1", "stream", now=1.0)
    spool.append("run-1", [lines(str(n)) for n in range(1, 6)])
    assert not spool.ack("run-1", 3)
    assert [seq for seq, _ in spool.pending("run-1")] == [4, 5]
    assert spool.pending("run-1", limit=1) == [(4, lines("4"))]
    assert spool.pending_count() == 2


def test_spool_ack_of_the_exit_record_finishes_the_run(spool):
    spool.claim("run-1", "stream", now=1.0)
    spool.append("run-1", [lines("a"), {"kind": "exit", "code": 0, "reason": "exited"}], status=ENDED)
    assert not spool.ack("run-1", 1)
    assert spool.ack("run-1", 2)
    assert spool.run("run-1").status == DONE
    assert spool.unsent() == []


def test_spool_a_finished_run_takes_no_more_records(spool):
    spool.claim("run-1", "stream", now=1.0)
    spool.finish("run-1")
    assert spool.append("run-1", [lines("late")], status=ENDED) == 0
    assert spool.pending("run-1") == []
    assert spool.run("run-1").status == DONE


def test_spool_lists_unsent_runs_oldest_first(spool):
    for run_id, created in (("b", 2.0), ("a", 3.0), ("c", 1.0)):
        spool.claim(run_id, "stream", now=created)
        spool.append(run_id, [lines(run_id)])
    spool.ack("a", 1)
    assert spool.unsent() == ["c", "b"]
    assert [run.run_id for run in spool.runs(STARTING)] == ["c", "b", "a"]


def test_spool_is_full_at_its_cap(tmp_path):
    spool = Spool(str(tmp_path / "spool.sqlite3"), cap=3)
    spool.claim("run-1", "stream", now=1.0)
    spool.append("run-1", [lines("1"), lines("2")])
    assert not spool.full()
    spool.append("run-1", [lines("3")])
    assert spool.full()
    spool.ack("run-1", 1)
    assert not spool.full()
    spool.close()


def test_spool_resumes_after_reopen(tmp_path):
    path = str(tmp_path / "spool.sqlite3")
    first = Spool(path)
    first.claim("run-1", "stream", now=1.0, output="out")
    first.append("run-1", [lines("a"), lines("b")], status=RUNNING, read_offset=4, lines=2, dropped=7)
    first.ack("run-1", 1)
    first.close()
    again = Spool(path)
    run = again.run("run-1")
    assert (run.status, run.read_offset, run.lines, run.dropped, run.next_seq) == (RUNNING, 4, 2, 7, 3)
    assert again.pending("run-1") == [(2, lines("b"))]
    assert again.append("run-1", [lines("c")]) == 3
    assert not again.claim("run-1", "stream", now=2.0)
    again.close()


def test_spool_replace_swaps_a_pending_record(spool):
    spool.claim("run-1", "stream", now=1.0)
    spool.append("run-1", [lines("huge")])
    spool.replace("run-1", 1, {"kind": "notice", "text": "dropped 1 line", "dropped": 1})
    assert spool.pending("run-1") == [(1, {"kind": "notice", "text": "dropped 1 line", "dropped": 1})]


def test_spool_prune_forgets_old_finished_runs_only(spool):
    for run_id in ("old-done", "old-running"):
        spool.claim(run_id, "poll", now=1.0)
    spool.finish("old-done")
    spool.claim("new-done", "poll", now=100.0)
    spool.finish("new-done")
    assert spool.prune(before=50.0) == 1
    assert spool.run("old-done") is None
    assert spool.run("old-running") is not None and spool.run("new-done") is not None


WRITER = """
import sys
from runner.spool import Spool
spool = Spool(sys.argv[1])
spool.claim("run-1", "stream", now=1.0)
n = 0
while True:
    n += 1
    spool.append("run-1", [{"kind": "lines", "lines": [str(n)]}], read_offset=n, lines=n)
    if n == 50:
        print("ready", flush=True)
"""


def test_spool_kill_9_loses_and_doubles_nothing(tmp_path):
    path = str(tmp_path / "spool.sqlite3")
    writer = subprocess.Popen([sys.executable, "-c", WRITER, path], cwd=ROOT, stdout=subprocess.PIPE)
    assert writer.stdout.readline() == b"ready\n"
    time.sleep(0.2)
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    spool = Spool(path)
    run = spool.run("run-1")
    records = spool.pending("run-1", limit=10**9)
    assert run.read_offset >= 50
    assert [record["lines"] for _, record in records] == [[str(n)] for n in range(1, run.read_offset + 1)]
    assert run.next_seq == run.read_offset + 1 == run.lines + 1
    spool.close()
