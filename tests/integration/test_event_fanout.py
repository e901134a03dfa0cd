"""One Redis subscription per web process: every stream and held long-poll of the process is a queue fed by it,
and it comes back by itself when its connection is cut, telling each holder it may have missed events."""

from __future__ import annotations

import asyncio
import time

import redis

from adapters.events import RESUMED, make_bus
from tests.conftest import TEST_REDIS_URL
from tests.integration.helpers import run_coroutine


def _connections(name: str) -> list[dict]:
    return [c for c in redis.Redis.from_url(TEST_REDIS_URL).client_list() if c.get("name") == name]


async def _until(check, seconds: float = 30):
    """Poll `check` (bounded) from inside the loop, so the bus's reader keeps running meanwhile."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if result := check():
            return result
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within {seconds}s")


def test_a_hundred_subscriptions_share_one_connection_and_each_user_gets_only_theirs(postgres):
    bus = make_bus(TEST_REDIS_URL, "postgresql://fanout/shared")

    async def scenario() -> tuple[int, list, list]:
        from contextlib import AsyncExitStack

        async with AsyncExitStack() as stack:
            queues = {(user, n): await stack.enter_async_context(bus.subscribe(user))
                      for user in range(50) for n in range(2)}
            held = len(_connections(bus.connection_name))
            bus.publish_many([(3, "device.work", {"device_id": 1}), (4, "monitor.updated", {"n": 2})])
            threes = [await asyncio.wait_for(queues[(3, n)].get(), 5) for n in range(2)]
            fours = [await asyncio.wait_for(queues[(4, n)].get(), 5) for n in range(2)]
            await asyncio.sleep(0.2)
            assert all(q.empty() for q in queues.values()), "another user's queue got an event"
            return held, threes, fours

    held, threes, fours = run_coroutine(scenario())
    assert held == 1, f"{held} Redis connections for 100 subscriptions"
    assert threes == [("device.work", {"device_id": 1})] * 2
    assert fours == [("monitor.updated", {"n": 2})] * 2


def test_a_cut_subscription_connects_again_and_says_resumed_to_every_holder(postgres):
    """Redis closing the connection (as a restart does) is survived in the process: each open queue hears RESUMED
    once the pattern is confirmed again, and later events arrive as before, still on one connection."""
    bus = make_bus(TEST_REDIS_URL, "postgresql://fanout/cut")
    admin = redis.Redis.from_url(TEST_REDIS_URL)

    async def scenario() -> tuple[list, list, int, int]:
        async with bus.subscribe(7) as sevens, bus.subscribe(8) as eights:
            [before] = _connections(bus.connection_name)
            assert admin.client_kill_filter(_id=before["id"]) == 1
            resumed = [await asyncio.wait_for(sevens.get(), 30), await asyncio.wait_for(eights.get(), 30)]
            [after] = await _until(lambda: _connections(bus.connection_name))
            bus.publish(7, "device.work", {"device_id": 5})
            return resumed, [await asyncio.wait_for(sevens.get(), 5)], int(before["id"]), int(after["id"])

    resumed, later, before, after = run_coroutine(scenario())
    assert resumed == [(RESUMED, {}), (RESUMED, {})]
    assert later == [("device.work", {"device_id": 5})]
    assert after != before, "a new connection, not the cut one"


def test_a_subscription_while_redis_is_unreachable_is_refused_with_a_sentence(postgres):
    bus = make_bus("redis://127.0.0.1:1/0", "postgresql://fanout/none")

    async def scenario() -> str:
        try:
            async with bus.subscribe(1):
                return "subscribed"
        except redis.exceptions.ConnectionError as exc:
            return str(exc)

    assert run_coroutine(scenario()) == "Redis did not confirm the event subscription within 5 s"


def test_a_publish_after_its_connection_was_cut_arrives(postgres):
    """Each thread publishes on a connection of its own (adapters/events.RedisBus._send); when Redis dropped it
    (a restart, an idle timeout) the next publish is sent once more on a new one, as redis-py's retry did."""
    import redis as redis_client

    from adapters.events import RedisBus, decoded
    from tests.conftest import TEST_REDIS_URL

    bus = RedisBus(TEST_REDIS_URL, "cut-test")
    listener = redis_client.Redis.from_url(TEST_REDIS_URL).pubsub()
    listener.subscribe(bus._channel(7))
    assert listener.get_message(timeout=5)["type"] == "subscribe"
    bus.publish(7, "first", {"n": 1})
    admin = redis_client.Redis.from_url(TEST_REDIS_URL)
    port = bus._local.conn._sock.getsockname()[1]  # this thread's publishing connection, as Redis lists it
    [client] = [c for c in admin.client_list() if c["addr"].endswith(f":{port}")]
    assert admin.client_kill_filter(_id=client["id"]) == 1
    bus.publish(7, "second", {"n": 2})
    received = []
    for _ in range(2):
        message = listener.get_message(timeout=5)
        received += decoded(message["data"])
    assert received == [("first", {"n": 1}), ("second", {"n": 2})]
    listener.close()
