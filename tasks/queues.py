"""What waits on the broker's queues, read at a /metrics scrape: how many messages, and how long the next has waited.

RedisBroker keeps each queue as a list of message ids, `<namespace>:<queue>`, consumed from its head, and the
messages in the hash `<namespace>:<queue>.msgs` (dramatiq/brokers/redis/dispatch.lua); each message carries
its `message_timestamp` (ms). Two round trips read every queue. The in-memory StubBroker (embedded mode) has a
queue.Queue of encoded messages per queue. Delay queues (`.DQ`: retries waiting for their time) are left out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

import dramatiq
import redis
from dramatiq.brokers.stub import StubBroker

#: a scrape waits at most this long for Redis
TIMEOUT_SECONDS = 2.0
#: the queues a plain `vigil worker` takes; the `browser` queue (pages rendered in a browser, tasks/checks
#: .check_rendered) is taken only by workers started with `--queues browser`, which have BROWSER_CDP_URL
ORDINARY_QUEUES = ("checks", "deliveries", "pushes")


@dataclass(frozen=True)
class QueueStat:
    queue: str
    depth: int
    oldest_age: float


def queue_stats(broker: dramatiq.Broker, redis_url: str, now: float) -> list[QueueStat]:
    """One entry per queue of `broker` (its actors' queues), at `now` (seconds since the epoch)."""
    names = sorted(name for name in broker.get_declared_queues() if not name.endswith((".DQ", ".XQ")))
    if isinstance(broker, StubBroker):
        return [_stub_stat(broker, name, now) for name in names]
    return _redis_stats(_client(redis_url), getattr(broker, "namespace", "dramatiq"), names, now)


def _stub_stat(broker: StubBroker, name: str, now: float) -> QueueStat:
    queue = broker.queues[name]
    with queue.mutex:
        depth, head = len(queue.queue), queue.queue[0] if queue.queue else None
    return QueueStat(name, depth, _age(dramatiq.Message.decode(head).message_timestamp, now) if head else 0.0)


def _redis_stats(client: redis.Redis, namespace: str, names: list[str], now: float) -> list[QueueStat]:
    with client.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.llen(f"{namespace}:{name}")
            pipe.lindex(f"{namespace}:{name}", 0)
        answers = pipe.execute()
    depths, heads = answers[0::2], answers[1::2]
    with client.pipeline(transaction=False) as pipe:
        for name, head in zip(names, heads):
            pipe.hget(f"{namespace}:{name}.msgs", head or "-")
        bodies = pipe.execute()
    return [QueueStat(name, depth, _age(json.loads(body)["message_timestamp"], now) if body else 0.0)
            for name, depth, body in zip(names, depths, bodies)]


def _age(timestamp_ms: int, now: float) -> float:
    return max(now - timestamp_ms / 1000, 0.0)


@lru_cache(maxsize=4)
def _client(url: str) -> redis.Redis:
    """Not the broker's own client (no timeouts): a scrape must not hang on a Redis that stopped answering."""
    return redis.Redis.from_url(url, socket_timeout=TIMEOUT_SECONDS, socket_connect_timeout=TIMEOUT_SECONDS)
