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
