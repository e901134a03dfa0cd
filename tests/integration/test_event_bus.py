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
