"""The scheduler ticks just after each wall-clock boundary, so a time watch due on a whole second is claimed within
a few milliseconds of it, whenever the scheduler happened to start."""

import pytest

from tasks.scheduler import ALIGN_SLACK_SECONDS, wait_for_boundary


@pytest.mark.parametrize("now, tick, wait", [
    (1000.0, 1.0, 1.0), (1000.25, 1.0, 0.75), (1000.999, 1.0, 0.001), (7.3, 0.2, 0.1), (60.0, 60.0, 60.0),
])
def test_the_next_tick_is_just_after_the_next_boundary(now, tick, wait):
    assert wait_for_boundary(tick, now) == pytest.approx(wait + ALIGN_SLACK_SECONDS, abs=1e-9)
    assert (now + wait_for_boundary(tick, now)) % tick == pytest.approx(ALIGN_SLACK_SECONDS, abs=1e-6)
