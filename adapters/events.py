"""Event fan-out to each user's open streams: in-process when embedded, Redis pub/sub in production.

Events are small JSON objects; pages turn them into HTML themselves.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import threading
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

log = logging.getLogger(__name__)
_CHANNEL = "vigil:{}:events:user:{}"
#: handed to every open subscription when the bus's connection to Redis came back after a loss: events may have
#: been missed meanwhile, so a holder looks at the database again (a long-poll) or ends (a stream: its client
#: reconnects and re-reads)
RESUMED = "bus.resumed"
#: the first wait before connecting again after a lost subscription, doubled up to RECONNECT_MAX while Redis is away
RECONNECT_FIRST, RECONNECT_MAX = 0.5, 10.0


class LocalBus:
    """Fan-out inside one process; publish is safe from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: dict[int, set[tuple[asyncio.AbstractEventLoop, asyncio.Queue]]] = {}

    def publish(self, user_id: int, name: str, data: dict) -> None:
        with self._lock:
            targets = list(self._subscribers.get(user_id, ()))
        running = asyncio._get_running_loop()
        for loop, queue in targets:
            if loop is running:  # published on the subscriber's own loop (app/runner_records.py): no wake needed
                try:
                    queue.put_nowait((name, data))
                except asyncio.QueueFull:  # a holder that stopped reading loses events, not the publisher
                    pass
                continue
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
        self._fanouts: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Fanout] = weakref.WeakKeyDictionary()
        self._local = threading.local()  # each thread's publishing connection (`_send`)

    def publish(self, user_id: int, name: str, data: dict) -> None:
        self.publish_many([(user_id, name, data)])

    def publish_many(self, events: list[tuple[int, str, dict]]) -> None:
        """Several events in one round trip, and one pub/sub message per user (a batch of 20 quiet checks sent
        20 PUBLISHes: the pipeline's packing and replies were ~12% of such a check's CPU); subscribers get each
        event on its own, in order. An outage loses events, never the check or the records that made them."""
        by_user: dict[int, list[tuple[str, dict]]] = {}
        for user_id, name, data in events:
            by_user.setdefault(user_id, []).append((name, data))
        commands = [("PUBLISH", self._channel(user_id), encoded(theirs)) for user_id, theirs in by_user.items()]
        try:
            self._send(commands)
        except Exception as exc:  # noqa: BLE001
            log.warning("%d events not published: %s", len(events), exc)

    def _send(self, commands: list[tuple]) -> None:
        """The PUBLISHes on this thread's own connection, written at once, their replies read. Through the client
        each went through its pool, retry wrapper and reply callbacks: at a stream's pace (a batch every 200 ms,
        caches cold in between) that was ~0.4 ms of the web's CPU a batch, about a third of it saved here (issue
        27). A connection that failed (Redis restarted, or closed it while it sat idle) is made anew and the
        PUBLISHes sent once more on it, as the client's retry did; the client's options (password, TLS,
        timeouts) are the connection's."""
        import redis

        try:
            self._publish_on(self._connection(), commands)
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            self._publish_on(self._connection(), commands)

    def _connection(self):
        conn = getattr(self._local, "conn", None)
        if conn is None or self._local.pid != os.getpid():  # a forked child never writes on its parent's socket
            pool = self._client.connection_pool
            conn = self._local.conn = pool.connection_class(**pool.connection_kwargs)
            self._local.pid = os.getpid()
        return conn

    def _publish_on(self, conn, commands: list[tuple]) -> None:
        try:
            conn.send_packed_command(conn.pack_commands(commands), check_health=False)
            for _ in commands:
                conn.read_response()
        except BaseException:
            self._local.conn = None
            conn.disconnect()
            raise

    def ping(self) -> None:
        """Raises redis' ConnectionError or TimeoutError while Redis is unreachable."""
        self._client.ping()

    @property
    def connection_name(self) -> str:
        """The CLIENT SETNAME of each web process's subscription: `CLIENT LIST` shows one per process and Vigil."""
        return f"vigil-events:{self._namespace}"

    def _channel(self, user_id: int) -> str:
        """Pub/sub ignores Redis db numbers, so each Vigil (one database) gets channels of its own."""
        return _CHANNEL.format(self._namespace, user_id)

    @asynccontextmanager
    async def subscribe(self, user_id: int) -> AsyncIterator[asyncio.Queue]:
        """A queue of this user's events, fed by the process's one subscription (`_Fanout`): a stream or a held
        long-poll costs a queue here, not a connection to Redis. Raises redis' ConnectionError when Redis can't
        be reached within 5 s (the caller answers 503)."""
        fanout = self._fanouts.get(asyncio.get_running_loop())
        if fanout is None:
            fanout = self._fanouts[asyncio.get_running_loop()] = _Fanout(self._url, self._channel("*"),
                                                                         self.connection_name)
        queue = await fanout.add(user_id)
        try:
            yield queue
        finally:
            fanout.discard(user_id, queue)


class _Fanout:
    """One Redis pub/sub connection per process (per event loop), which hands each event to the queues of its
    user's open streams and held long-polls here. A connection per stream cost a socket, a Redis client and a
    reader task each (5,000 paired devices were 5,000 connections to Redis); this is one whatever their number.

    It subscribes to the pattern of this Vigil's channels once, so opening a stream sends Redis nothing: each
    process receives every account's events and drops, by the channel's name alone, those of accounts with no
    stream here. Its reader blocks on the socket and wakes only for a message. When the connection is lost (a
    Redis restart) it connects again, backing off while Redis is away, and hands every queue RESUMED once the
    pattern is confirmed again: events published meanwhile were lost, so each holder looks again for itself.
    """

    def __init__(self, url: str, pattern: str, name: str) -> None:
        self._url = url
        self._name = name
        self._pattern = pattern
        self._prefix = pattern[:-1].encode()
        self._queues: dict[int, set[asyncio.Queue]] = {}
        self._ready = asyncio.Event()
        self._reader: asyncio.Task | None = None

    async def add(self, user_id: int) -> asyncio.Queue:
        import redis

        if self._reader is None or self._reader.done():
            self._reader = asyncio.create_task(self._read(), name="vigil-event-fanout")
        if not self._ready.is_set():
            # until Redis confirms the pattern an event published through another connection can be missed, so
            # a stream says "connected" only once it is confirmed
            try:
                await asyncio.wait_for(self._ready.wait(), 5)
            except asyncio.TimeoutError:
                raise redis.exceptions.ConnectionError("Redis did not confirm the event subscription within 5 s"
                                                       ) from None
        queue: asyncio.Queue = asyncio.Queue(maxsize=1000)
        self._queues.setdefault(user_id, set()).add(queue)
        return queue

    def discard(self, user_id: int, queue: asyncio.Queue) -> None:
        queues = self._queues.get(user_id)
        if queues is not None:
            queues.discard(queue)
            if not queues:
                del self._queues[user_id]

    async def _read(self) -> None:
        import redis.asyncio as aioredis

        backoff, confirmed_before = RECONNECT_FIRST, False
        while True:
            client = aioredis.Redis.from_url(self._url, socket_connect_timeout=5, socket_keepalive=True,
                                             client_name=self._name)
            pubsub = client.pubsub()
            try:
                await pubsub.psubscribe(self._pattern)
                while True:
                    message = await pubsub.get_message(timeout=None)  # blocks on the socket: no polling
                    if message is None:
                        continue
                    if message["type"] == "pmessage":
                        self._deliver(message["channel"], message["data"])
                    elif message["type"] == "psubscribe":
                        # any confirmation after the first follows a lost connection, whether this loop or
                        # redis-py's own retry made the new one
                        self._ready.set()
                        backoff = RECONNECT_FIRST
                        if confirmed_before:
                            self._to_all((RESUMED, {}))
                        confirmed_before = True
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis went away; every holder keeps its queue and hears RESUMED later
                if self._ready.is_set():
                    log.warning("event subscription lost, connecting again: %s", exc)
                self._ready.clear()
            finally:
                await _closed(pubsub, client)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, RECONNECT_MAX)

    def _deliver(self, channel: bytes, raw: bytes) -> None:
        if not channel.startswith(self._prefix):
            return
        try:
            queues = self._queues.get(int(channel[len(self._prefix):]))
        except ValueError:
            return
        if not queues:
            return
        try:
            events = decoded(raw)
        except (ValueError, KeyError, TypeError):
            return
        for queue in list(queues):
            for event in events:
                try:
                    queue.put_nowait(event)
                except asyncio.QueueFull:  # a holder that stopped reading loses events, not the others
                    break

    def _to_all(self, event: tuple[str, dict]) -> None:
        for queues in list(self._queues.values()):
            for queue in list(queues):
                try:
                    queue.put_nowait(event)
                except asyncio.QueueFull:
                    pass


async def _closed(pubsub, client) -> None:
    """Closing a connection that is already broken may raise too; it is let go either way."""
    for close in (pubsub.aclose, client.aclose):
        try:
            await close()
        except Exception:
            pass


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


def make_bus(redis_url: str, database_url: str = ""):
    """Redis pub/sub when there is Redis, named after the database this Vigil uses; else in-process."""
    if not redis_url:
        return LocalBus()
    return RedisBus(redis_url, hashlib.sha256(database_url.encode("utf-8")).hexdigest()[:12])
