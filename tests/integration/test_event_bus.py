"""The event fan-out on Redis: a user's events reach their stream, and only this Vigil's."""

from __future__ import annotations

import asyncio

from tests.conftest import TEST_REDIS_URL
from tests.integration.helpers import run_coroutine
from adapters.events import make_bus


def test_events_reach_subscribers_of_this_vigil_only(postgres):
    ours = make_bus(TEST_REDIS_URL, "postgresql://one/db")
    other = make_bus(TEST_REDIS_URL.rsplit("/", 1)[0] + "/3", "postgresql://two/db")

    async def scenario() -> list:
        async with ours.subscribe(7) as queue:
            other.publish(7, "monitor.updated", {"from": "another instance"})
            ours.publish(8, "monitor.updated", {"from": "another user"})
            ours.publish_many([(7, "monitor.updated", {"n": 1}), (7, "message.created", {"n": 2})])
            received = [await asyncio.wait_for(queue.get(), 5), await asyncio.wait_for(queue.get(), 5)]
            await asyncio.sleep(0.2)
            assert queue.empty(), "nothing else may arrive"
            return received

    assert run_coroutine(scenario()) == [("monitor.updated", {"n": 1}), ("message.created", {"n": 2})]


def test_a_batch_for_several_users_reaches_each_its_own_events_in_order(postgres):
    """publish_many sends one pub/sub message per user; each stream still gets its events one by one, in the
    order they were published, and a message the bus did not write is skipped, not fatal."""
    import redis

    bus = make_bus(TEST_REDIS_URL, "postgresql://batched/db")
    batch = [(7, "monitor.updated", {"n": 1}), (9, "monitor.updated", {"n": 2}), (7, "message.created", {"n": 3}),
             (9, "monitor.updated", {"n": 4}), (7, "monitor.updated", {"n": 5})]

    async def scenario() -> tuple[list, list]:
        async with bus.subscribe(7) as sevens, bus.subscribe(9) as nines:
            redis.Redis.from_url(TEST_REDIS_URL).publish(bus._channel(7), b"not an event")
            bus.publish_many(batch)
            bus.publish(9, "message.created", {"n": 6})
            got7 = [await asyncio.wait_for(sevens.get(), 5) for _ in range(3)]
            got9 = [await asyncio.wait_for(nines.get(), 5) for _ in range(3)]
            await asyncio.sleep(0.2)
            assert sevens.empty() and nines.empty(), "nothing else may arrive"
            return got7, got9

    got7, got9 = run_coroutine(scenario())
    assert got7 == [("monitor.updated", {"n": 1}), ("message.created", {"n": 3}), ("monitor.updated", {"n": 5})]
    assert got9 == [("monitor.updated", {"n": 2}), ("monitor.updated", {"n": 4}), ("message.created", {"n": 6})]
