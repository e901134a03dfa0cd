import random
from datetime import datetime, timedelta, timezone

import pytest

from engine.schedule import BUSY_MINUTES, next_check_at, off_busy_minutes


class FixedJitter(random.Random):
    """A Random whose jitter is always `offset` seconds."""

    def __init__(self, offset: float):
        super().__init__(0)
        self.offset = offset

    def uniform(self, a, b):
        return self.offset


def test_next_check_at_over_random_times_and_intervals():
    rng = random.Random(20240601)
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    for _ in range(10_000):
        now = start + timedelta(seconds=rng.uniform(0, 400 * 86400))
        interval = rng.randint(60, 86400)
        at = next_check_at(now, interval, rng)
        assert at.minute not in BUSY_MINUTES, (now, interval, at)
        assert at > now
        waited = (at - now).total_seconds()
        assert interval * 0.9 - 1e-6 <= waited <= interval * 1.1 + 60 + 1e-6, (now, interval, at)


def test_next_check_at_never_early_only_delays_a_tool_watch():
    rng = random.Random(20261203)
    now = datetime(2026, 12, 3, 10, 10, 10)
    for _ in range(2_000):
        waited = (next_check_at(now, 300, rng, never_early=True) - now).total_seconds()
        assert 300 <= waited <= 330 + 60, waited
    assert next_check_at(now, 300, FixedJitter(-30), never_early=True) == now + timedelta(seconds=330)
    assert next_check_at(now, 300, FixedJitter(-30)) == now + timedelta(seconds=270)


def test_next_check_at_is_reproducible_with_a_seed():
    now = datetime(2024, 5, 5, 10, 10, 10)
    first = [next_check_at(now, 900, random.Random(7)) for _ in range(3)]
    assert len(set(first)) == 1


def test_next_check_at_jitters_across_monitors():
    now = datetime(2024, 5, 5, 10, 10, 10)
    rng = random.Random(3)
    assert len({next_check_at(now, 3600, rng) for _ in range(50)}) > 40


def test_next_check_at_jitter_is_capped_for_long_intervals():
    rng = random.Random(11)
    now = datetime(2024, 5, 5, 10, 10, 10)
    for _ in range(500):
        waited = (next_check_at(now, 86400, rng) - now).total_seconds()
        assert 86400 - 120 <= waited <= 86400 + 120 + 60


def test_next_check_at_moves_a_time_on_the_half_hour_one_minute_later():
    now = datetime(2024, 3, 1, 11, 45, 30)
    assert next_check_at(now, 900, FixedJitter(0)) == datetime(2024, 3, 1, 12, 1, 30)


def test_next_check_at_leaves_a_quiet_minute_alone():
    now = datetime(2024, 3, 1, 11, 45, 30)
    assert next_check_at(now, 600, FixedJitter(0)) == datetime(2024, 3, 1, 11, 55, 30)


@pytest.mark.parametrize("when, moved", [
    (datetime(2024, 3, 1, 12, 0, 30), datetime(2024, 3, 1, 12, 1, 30)),
    (datetime(2024, 3, 1, 12, 0, 0), datetime(2024, 3, 1, 12, 1, 0)),
    (datetime(2024, 3, 1, 12, 30, 59), datetime(2024, 3, 1, 12, 31, 59)),
    (datetime(2024, 3, 1, 23, 0, 5, tzinfo=timezone.utc), datetime(2024, 3, 1, 23, 1, 5, tzinfo=timezone.utc)),
])
def test_off_busy_minutes_moves_busy_minutes(when, moved):
    assert off_busy_minutes(when) == moved


@pytest.mark.parametrize("when", [datetime(2024, 3, 1, 12, 1, 0), datetime(2024, 3, 1, 12, 29, 59),
                                  datetime(2024, 3, 1, 12, 31, 0), datetime(2024, 3, 1, 12, 59, 59)])
def test_off_busy_minutes_leaves_other_minutes(when):
    assert off_busy_minutes(when) == when


def test_monitors_of_one_url_are_steered_onto_its_slot_within_the_jitter_bounds():
    from engine.schedule import slot_phase

    url, interval = "https://example.com/acmeb", 900
    rng = random.Random(5)
    start = datetime(2024, 5, 5, 10, 10, 10)
    times = [start + timedelta(seconds=rng.uniform(0, 3 * interval)) for _ in range(8)]  # created at any time
    for _ in range(12):
        nexts = [next_check_at(now, interval, slot=url) for now in times]
        for now, at in zip(times, nexts):
            waited = (at - now).total_seconds()
            assert interval * 0.9 - 1e-6 <= waited <= interval * 1.1 + 60 + 1e-6, "the same bounds as random jitter"
        times = [at + timedelta(seconds=0.2) for at in nexts]  # each claimed by the tick just after it fell due
    phases = {round((at - datetime(1970, 1, 1)).total_seconds() % interval, 3) for at in nexts}
    assert phases == {round(slot_phase(url, interval), 3)}, "all on the url's grid, so claimed in one tick"


def test_different_urls_get_different_slots():
    from engine.schedule import slot_phase

    phases = {slot_phase(f"https://example.com/p/{i}", 900) for i in range(200)}
    assert len(phases) > 190 and min(phases) < 90 and max(phases) > 810, "spread over the whole interval"
    assert slot_phase("https://example.com/p/1", 900) == slot_phase("https://example.com/p/1", 900)
