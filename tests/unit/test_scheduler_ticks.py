"""The scheduler passes just after wall-clock boundaries, so a time watch due on a whole second is claimed within
a few milliseconds of it, whenever the scheduler happened to start; and only on the boundaries where something is
due (engine/wake_plan.py)."""

import pytest

from engine.wake_plan import ALIGN_SLACK_SECONDS, boundary_after, boundary_at_or_after, rung_times, wake_at


@pytest.mark.parametrize("now, tick, wait", [
    (1000.0, 1.0, 1.0), (1000.25, 1.0, 0.75), (1000.999, 1.0, 0.001), (7.3, 0.2, 0.1), (60.0, 60.0, 60.0),
])
def test_the_next_tick_is_just_after_the_next_boundary(now, tick, wait):
    assert boundary_after(tick, now) - now == pytest.approx(wait + ALIGN_SLACK_SECONDS, abs=1e-9)
    assert boundary_after(tick, now) % tick == pytest.approx(ALIGN_SLACK_SECONDS, abs=1e-6)


def test_a_moment_due_on_a_boundary_is_served_at_it_and_one_just_after_at_the_next():
    assert boundary_at_or_after(1.0, 1005.0) == pytest.approx(1005.0 + ALIGN_SLACK_SECONDS)
    assert boundary_at_or_after(1.0, 1005.001) == pytest.approx(1006.0 + ALIGN_SLACK_SECONDS)
    assert boundary_at_or_after(0.2, 7.3) == pytest.approx(7.4 + ALIGN_SLACK_SECONDS)


def test_nothing_due_sleeps_the_whole_cap_and_the_earliest_due_moment_wins():
    now = 1000.25
    assert wake_at(now, [None, None], 1.0, 60.0) == now + 60.0, "nothing due: the safety net only"
    assert wake_at(now, [1030.5, None, 1012.0], 1.0, 60.0) == pytest.approx(1012.0 + ALIGN_SLACK_SECONDS)
    assert wake_at(now, [5000.0], 1.0, 60.0) == now + 60.0, "never past the cap"
    # something still due after its pass (held by another scheduler) is looked at next tick, not in a loop
    assert wake_at(now, [999.0], 1.0, 60.0) == pytest.approx(1001.0 + ALIGN_SLACK_SECONDS)


def test_a_ring_brings_the_next_pass_forward():
    now = 1000.25
    assert wake_at(now, [1030.0], 1.0, 60.0, rung=[1000.1]) == now, "due already (a resume): at once"
    assert wake_at(now, [1030.0], 1.0, 60.0, rung=[1004.0]) == pytest.approx(1004.0 + ALIGN_SLACK_SECONDS)
    assert wake_at(now, [1002.0], 1.0, 60.0, rung=[1004.0]) == pytest.approx(1002.0 + ALIGN_SLACK_SECONDS)
    # a ring of something due now is looked at once more a tick later: its transaction may not have committed
    assert rung_times(now, [1000.1, 1010.0], 1.0) == [1000.1, 1001.25, 1010.0]


@pytest.mark.parametrize("claimed, sizes", [
    (0, []), (1, [1]), (20, [20]), (45, [20, 20, 5]),
    (160, [20] * 8),  # up to 8 messages of 20, so a small tick still spreads over two workers' threads
    (200, [25] * 8),  # then the messages grow, not their number
    (500, [50] * 10), (1001, [50] * 20 + [1]),  # a busy tick: at most 50 a message (each costs ~1 ms of its own)
])
def test_a_ticks_claims_go_out_in_messages_of_20_to_50(claimed, sizes):
    from tasks.checks import batches

    claims = [(f"m{i}", i) for i in range(claimed)]
    cut = batches(claims)
    assert [len(batch) for batch in cut] == sizes
    assert [claim for batch in cut for claim in batch] == claims  # every claim once, in claim (url) order


def test_monitors_sharing_a_url_count_as_one_fetch_of_a_message():
    from models.claims import Claim
    from tasks.checks import BATCH_MONITORS_MAX, batches

    # 1,000 monitors over 100 urls, claimed by url: 100 fetches, spread over 8 messages of up to 20 fetches
    claims = [Claim(f"m{i}", 1, f"https://example.com/p/{i // 10}") for i in range(1000)]
    cut = batches(claims)
    assert [len(batch) for batch in cut] == [200] * 5
    assert [claim for batch in cut for claim in batch] == claims
    assert all(len({claim.key for claim in batch}) == 20 for batch in cut), "no url's monitors split between two"
    # monitors of no shared url ("": a file, a command, a url with placeholders) are a fetch each, as before
    alone = [Claim(f"f{i}", 1, "") for i in range(500)]
    assert [len(batch) for batch in batches(alone)] == [50] * 10
    # one url's monitors past BATCH_MONITORS_MAX go on in the next message
    crowd = [Claim(f"c{i}", 1, "https://example.com/hot") for i in range(BATCH_MONITORS_MAX + 30)]
    assert [len(batch) for batch in batches(crowd)] == [BATCH_MONITORS_MAX, 30]
    assert list(crowd[0]) == ["c0", 1] and crowd[0] == ("c0", 1), "a message carries the pair only"
