import os
import threading
import time

import pytest

from runner import processes
from runner.framing import FLOOD_TEXT
from runner.spool import ENDED, RUNNING, Spool
from runner.streams import StreamWatch


def gone(pgid):
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
    return True


def wait_for(predicate, seconds=5.0):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_stop_group_leaves_nothing_of_a_pipeline(tmp_path):
    with open(tmp_path / "out", "ab") as sink:
        proc = processes.spawn("sleep 100 | cat", None, sink)
    time.sleep(0.2)
    assert os.getpgid(proc.pid) == proc.pid
    assert processes.stop_group(proc.pid, proc)
    assert proc.returncode is not None
    assert gone(proc.pid)


def test_stop_group_kills_what_ignores_sigterm(tmp_path):
    with open(tmp_path / "out", "ab") as sink:
        proc = processes.spawn("trap '' TERM; sleep 100; sleep 100", None, sink)
    time.sleep(0.2)
    began = time.monotonic()
    assert processes.stop_group(proc.pid, proc, grace=0.3)
    assert time.monotonic() - began >= 0.3
    assert processes.exit_code(proc.returncode) is None
    assert gone(proc.pid)


def test_stop_group_of_a_group_already_gone_returns_at_once():
    proc = processes.spawn("exit 0", None, None)
    proc.wait()
    assert processes.stop_group(proc.pid, proc)


def test_spawn_runs_sh_with_stdin_from_dev_null_in_cwd(tmp_path):
    with open(tmp_path / "out", "ab") as sink:
        proc = processes.spawn("pwd; cat; echo err >&2", str(tmp_path), sink)
    assert proc.wait(5) == 0
    assert (tmp_path / "out").read_text() == f"{tmp_path}\nerr\n"


def test_run_polled_returns_code_and_combined_output(tmp_path):
    result = processes.run_polled("echo out; echo err >&2; exit 3", str(tmp_path), 10, 1000)
    assert result == {"exit_code": 3, "output": "out\nerr\n", "timed_out": False}


def test_run_polled_timeout_kills_the_group():
    started = []
    result = processes.run_polled("echo begun; sleep 100 | cat", None, 0.5, 1000, on_start=started.append)
    assert result["timed_out"] is True
    assert result["exit_code"] is None
    assert result["output"] == "begun\n"
    assert gone(started[0])


def test_run_polled_cuts_output_at_max_output_bytes():
    result = processes.run_polled("head -c 200000 /dev/zero | tr '\\0' x; echo tail", None, 10, 1000)
    assert result["output"] == "x" * 1000
    assert result["exit_code"] == 0


def test_run_polled_cut_does_not_split_a_character():
    result = processes.run_polled("printf '\\342\\202\\254\\342\\202\\254'", None, 10, 4)
    assert result["output"] == "\u20ac"


def test_run_polled_stops_what_the_shell_left_running():
    result = processes.run_polled("sleep 100 & echo $!", None, 10, 1000)
    assert result["exit_code"] == 0
    with pytest.raises(ProcessLookupError):
        os.kill(int(result["output"]), 0)


def test_run_polled_stop_event_ends_it():
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    result = processes.run_polled("sleep 100", None, None, 1000, stop=stop)
    assert result["timed_out"] is False and result["error"] == "stopped before it finished"


def test_run_polled_reports_a_command_that_cannot_start(tmp_path):
    result = processes.run_polled("true", str(tmp_path / "missing"), 10, 1000)
    assert result["exit_code"] is None and result["error"].startswith("could not start:")


def test_still_ours_tells_the_group_from_a_stranger(tmp_path):
    proc = processes.spawn("sleep 100", None, None)
    known = processes.identity(proc.pid)
    try:
        assert processes.still_ours(proc.pid, known)
        if known is not None:
            boot, start = known.split(":")
            assert not processes.still_ours(proc.pid, f"{boot}:{int(start) + 1}")
            assert not processes.still_ours(proc.pid, f"another-boot:{start}")
    finally:
        processes.stop_group(proc.pid, proc)
    assert not processes.still_ours(proc.pid, known)


# --- stream runs: a real command writing to its output file, tailed into a real spool --------------------------

@pytest.fixture()
def spool(tmp_path):
    spool = Spool(str(tmp_path / "spool.sqlite3"))
    yield spool
    spool.close()


def start_stream(spool, tmp_path, command, run_id="run-1"):
    output = str(tmp_path / f"{run_id}.out")
    spool.claim(run_id, "stream", now=1.0, output=output)
    with open(output, "ab") as sink:
        proc = processes.spawn(command, None, sink)
    spool.append(run_id, [{"kind": "started", "pid": proc.pid}], status=RUNNING, pid=proc.pid, pgid=proc.pid,
                 identity=processes.identity(proc.pid))
    return StreamWatch(spool, spool.run(run_id), proc), proc


def records(spool, run_id="run-1"):
    return [record for _, record in spool.pending(run_id, limit=10**6)]


def test_stream_watch_sends_lines_then_exit_with_the_code(spool, tmp_path):
    watch, proc = start_stream(spool, tmp_path, "printf 'one\\r\\ntwo\\n'; sleep 0.3; printf 'last'; exit 7")
    watch.watch()
    sent = records(spool)
    assert sent[0] == {"kind": "started", "pid": proc.pid}
    assert [line for record in sent if record["kind"] == "lines" for line in record["lines"]] == ["one", "two", "last"]
    assert len([record for record in sent if record["kind"] == "lines"]) == 2
    assert sent[-1] == {"kind": "exit", "code": 7, "reason": "exited"}
    run = spool.run("run-1")
    assert run.status == ENDED and run.read_offset == os.path.getsize(run.output)


def test_stream_watch_stop_kills_the_group_and_ends_stopped(spool, tmp_path):
    watch, proc = start_stream(spool, tmp_path, "echo ready; sleep 100 | cat")
    thread = threading.Thread(target=watch.watch)
    thread.start()
    wait_for(lambda: any(record["kind"] == "lines" for record in records(spool)))
    watch.stop("stopped")
    thread.join(10)
    assert records(spool)[-1] == {"kind": "exit", "code": None, "reason": "stopped"}
    assert gone(proc.pid)


def test_stream_watch_flood_sends_5000_lines_a_notice_and_kills(spool, tmp_path):
    watch, proc = start_stream(spool, tmp_path, "yes flood")
    watch.watch()
    sent = records(spool)
    assert sum(len(record["lines"]) for record in sent if record["kind"] == "lines") == 5000
    assert sent[-2:] == [{"kind": "notice", "text": FLOOD_TEXT}, {"kind": "exit", "code": None, "reason": "flood"}]
    assert gone(proc.pid)


def test_stream_watch_counts_lines_dropped_when_the_spool_is_full(tmp_path):
    spool = Spool(str(tmp_path / "spool.sqlite3"), cap=2)
    watch, _ = start_stream(spool, tmp_path, "echo a; sleep 0.3; echo b; sleep 0.3; echo c")
    watch.watch()
    sent = records(spool)
    kinds = [record["kind"] for record in sent]
    assert kinds == ["started", "lines", "notice", "exit"]
    assert sent[2] == {"kind": "notice", "text": "dropped 2 lines", "dropped": 2}
    spool.close()


def test_stream_watch_recovery_resumes_after_the_spooled_offset(spool, tmp_path):
    output = tmp_path / "run-1.out"
    output.write_bytes(b"sent\nnot yet\npartial")
    spool.claim("run-1", "stream", now=1.0, output=str(output))
    spool.append("run-1", [{"kind": "started", "pid": None}, {"kind": "lines", "lines": ["sent"]}],
                 status=RUNNING, read_offset=5, lines=1)
    StreamWatch(spool, spool.run("run-1")).recover()
    assert records(spool)[2] == {"kind": "lines", "lines": ["not yet", "partial"]}
    assert spool.run("run-1").lines == 3


def test_stream_watch_seq_1_6000_ends_with_the_flood_notice(spool, tmp_path):
    watch, proc = start_stream(spool, tmp_path, "seq 1 6000")
    watch.watch()
    sent = records(spool)
    batches = [record for record in sent if record["kind"] == "lines"]
    assert [line for record in batches for line in record["lines"]] == [str(n) for n in range(1, 5001)]
    assert len(batches) <= 5
    assert sent[-2] == {"kind": "notice", "text": FLOOD_TEXT}
    assert sent[-1]["kind"] == "exit" and sent[-1]["reason"] == "flood"


def test_stream_watch_recovery_inside_a_truncated_line_skips_its_rest(spool, tmp_path):
    output = tmp_path / "run-1.out"
    output.write_bytes(b"x" * 40_000 + b"\nnext\n")
    spool.claim("run-1", "stream", now=1.0, output=str(output))
    spool.append("run-1", [{"kind": "started", "pid": None}, {"kind": "lines", "lines": ["x… [truncated]"]}],
                 status=RUNNING, read_offset=16 * 1024, lines=1)
    StreamWatch(spool, spool.run("run-1")).recover()
    assert [record["lines"] for record in records(spool) if record["kind"] == "lines"][1:] == [["next"]]
    assert spool.run("run-1").lines == 2
