"""A `vigil runner` killed with -9 mid-stream and started again, against `vigil serve` on SQLite (embedded mode):
its stream watcher goes on, and every line reaches the conversation exactly once, in order, with no "interrupted"
notice (tests/runner_restart.py has the scenario; tests/reliability/test_runner_restart.py runs it on
PostgreSQL)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tests.reliability.stack import Stack
from tests.runner_restart import (
    adopted_watcher_is_stopped_by_a_cancel, runner_killed_mid_stream_loses_and_doubles_nothing,
)


@pytest.fixture()
def embedded_stack():
    """`vigil serve` on SQLite with an owner and a runtime token, as a newcomer sets it up."""
    stack = Stack(Path(tempfile.mkdtemp(prefix="vigil-embedded-restart-")), "", "", RUNNER_POLL_SECONDS="2").setup()
    stack.start_web("serve")
    yield stack
    problems = stack.stop_all()
    stack.remove(keep=bool(problems))
    assert not problems, f"{problems}\n{stack.log_tails()}"


def test_runner_killed_mid_stream_adopts_its_watcher_in_embedded_mode(embedded_stack, tmp_path):
    runner_killed_mid_stream_loses_and_doubles_nothing(embedded_stack, tmp_path)


def test_runner_restarted_after_kill_9_still_stops_its_adopted_watcher_on_cancel(embedded_stack, tmp_path):
    adopted_watcher_is_stopped_by_a_cancel(embedded_stack, tmp_path)
