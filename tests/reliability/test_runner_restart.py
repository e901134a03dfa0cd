"""A `vigil runner` killed with -9 mid-stream and started again, on PostgreSQL and Redis (production mode): its
stream watcher goes on, and every line reaches the conversation exactly once, in order, with no "interrupted"
notice (tests/runner_restart.py has the scenario)."""

from __future__ import annotations

import pytest

from tests.runner_restart import runner_killed_mid_stream_loses_and_doubles_nothing

pytestmark = pytest.mark.reliability


def test_runner_killed_mid_stream_adopts_its_watcher_on_postgresql(stack_factory, tmp_path):
    stack = stack_factory(RUNNER_POLL_SECONDS="2")
    stack.start_web()
    stack.start_worker()
    stack.start_scheduler()
    runner_killed_mid_stream_loses_and_doubles_nothing(stack, tmp_path)
