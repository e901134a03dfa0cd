"""Event fan-out to each user's open streams: in-process when embedded, Redis pub/sub in production.

Events are small JSON objects; pages turn them into HTML themselves.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

log = logging.getLogger(__name__)
_CHANNEL = "vigil:{}:events:user:{}"


class LocalBus:
    """Fan-out inside one process; publish is safe from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: dict[int, set[tuple[asyncio.AbstractEventLoop, asyncio.Queue]]] = {}

    def publish(self, user_id: int, name: str, data: dict) -> None:
        with self._lock:
            targets = list(self._subscribers.get(user_id, ()))
        for loop, queue in targets:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, (name, data))
            except RuntimeError:  # the subscriber's loop has closed
                pass

    def publish_many(self, events: list[tuple[int, str, dict]]) -> None:
        for user_id, name, data in events:
            self.publish(user_id, name, data)

    def ping(self) -> None:
        """Nothing to reach: the bus is this process."""

    @asynccontextmanager
    async def subscribe(self, user_id: int) -> AsyncIterator[asyncio.Queue]:
        entry = (asyncio.get_running_loop(), asyncio.Queue(maxsize=1000))
        with self._lock:
            self._subscribers.setdefault(user_id, set()).add(entry)
        try:
            yield entry[1]
        finally:
            with self._lock:
                self._subscribers.get(user_id, set()).discard(entry)


class RedisBus:
    """Fan-out across processes and machines through Redis pub/sub."""

    def __init__(self, url: str, namespace: str = "") -> None:
        import redis

        self._url = url
        self._namespace = namespace
        self._client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)

    def publish(self, user_id: int, name: str, data: dict) -> None:
        try:
            self._client.publish(self._channel(user_id), encoded([(name, data)]))
        except Exception as exc:  # an event lost to a Redis outage must not fail the check that made it
            log.warning("event %s not published: %s", name, exc)

    def publish_many(self, events: list[tuple[int, str, dict]]) -> None:
        """Several events in one round trip, and one pub/sub message per user (a batch of 20 quiet checks sent
        20 PUBLISHes: the pipeline's packing and replies were ~12% of such a check's CPU); subscribers get each
        event on its own, in order."""
        by_user: dict[int, list[tuple[str, dict]]] = {}
        for user_id, name, data in events:
            by_user.setdefault(user_id, []).append((name, data))
        try:
            if len(by_user) == 1:
                [(user_id, theirs)] = by_user.items()
                self._client.publish(self._channel(user_id), encoded(theirs))
                return
            pipe = self._client.pipeline(transaction=False)
            for user_id, theirs in by_user.items():
                pipe.publish(self._channel(user_id), encoded(theirs))
            pipe.execute()
        except Exception as exc:  # as in publish(): an outage loses events, never checks
            log.warning("%d events not published: %s", len(events), exc)

    def ping(self) -> None:
        """Raises redis' ConnectionError or TimeoutError while Redis is unreachable."""
        self._client.ping()

    def _channel(self, user_id: int) -> str:
        """Pub/sub ignores Redis db numbers, so each Vigil (one database) gets channels of its own."""
        return _CHANNEL.format(self._namespace, user_id)

    @asynccontextmanager
    async def subscribe(self, user_id: int) -> AsyncIterator[asyncio.Queue]:
        import redis
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(self._url)
        pubsub = client.pubsub()
        reader = None
        try:
            await pubsub.subscribe(self._channel(user_id))
            # Redis confirms the subscription on this connection; until then an event published through
            # another connection can be missed, so a stream says "connected" only once it is confirmed.
            confirmed = await pubsub.get_message(timeout=5)
            if confirmed is None or confirmed["type"] != "subscribe":
                raise redis.exceptions.TimeoutError("Redis did not confirm the event subscription within 5 s")
            queue: asyncio.Queue = asyncio.Queue(maxsize=1000)
            reader = asyncio.create_task(_pump(pubsub, queue))
            yield queue
        finally:
            if reader is not None:
                reader.cancel()
            await pubsub.aclose()
            await client.aclose()


def encoded(events: list[tuple[str, dict]]) -> str:
    """One user's events as one pub/sub message: a lone event as {"name", "data"}; several as {"rows": [[name,
    keys, [values], [values], …], …]}, where the events in a row of one name and the same keys (a batch of quiet
    checks' monitor.updated) are their values alone. The keys are then written once, not once an event: a quiet
    check's event was 240 bytes, most of them its keys, and those bytes were half of what publishing it cost."""
    if len(events) == 1:
        [(name, data)] = events
        return json.dumps({"name": name, "data": data})
    rows: list[list] = []
    last_name, last_keys = None, None
    for name, data in events:
        keys = list(data)
        if name != last_name or keys != last_keys:
            rows.append([name, keys])
            last_name, last_keys = name, keys
        rows[-1].append(list(data.values()))
    return json.dumps({"rows": rows})


def decoded(raw: bytes | str) -> list[tuple[str, dict]]:
    """The events of one pub/sub message that `encoded` wrote, in order; raises ValueError, KeyError or TypeError
    for a message it did not write. {"events": [[name, data], …]} is read too: what a worker of before 2026-12-03
    sends while a rolling upgrade has it beside a newer web."""
    message = json.loads(raw)
    if "rows" in message:
        return [(name, dict(zip(keys, values, strict=True))) for name, keys, *rows in message["rows"]
                for values in rows]
    if "events" in message:
        return [(name, data) for name, data in message["events"]]
    return [(message["name"], message["data"])]


async def _pump(pubsub, queue: asyncio.Queue) -> None:
    async for message in pubsub.listen():
        if message["type"] != "message":
            continue
        try:
            for event in decoded(message["data"]):
                queue.put_nowait(event)
        except (ValueError, KeyError, TypeError, asyncio.QueueFull):
            continue


def make_bus(redis_url: str, database_url: str = ""):
    """Redis pub/sub when there is Redis, named after the database this Vigil uses; else in-process."""
    if not redis_url:
        return LocalBus()
    return RedisBus(redis_url, hashlib.sha256(database_url.encode("utf-8")).hexdigest()[:12])
