"""Brokers whose idle consumers sleep until a message arrives, instead of asking their queue ten times a second.

Dramatiq's RedisBroker consumer, finding its queue empty, sleeps up to the worker's timeout and asks again; at the
100 ms that kept a lone wake within ~0.1 s, an idle worker process spent tens of milliseconds of CPU a second
asking. Here each enqueue also PUBLISHes its queue's name on `<namespace>:__wake__`, in the same round trip, and an
idle consumer waits on a local condition that one listener thread per worker process sets when that name arrives.

Nothing waits forever on a lost notification (pub/sub drops what is published while a subscriber reconnects, and
Dramatiq's maintenance or a requeue puts message ids back without one): every beat the listener reads every queue's
length in one pipeline and wakes the consumers of those holding messages. The same round trip refreshes this
process's heartbeat (other workers take back the unacked messages of a process silent for `heartbeat_timeout`)
and runs Dramatiq's maintenance on one queue in turn, which its consumers no longer trigger by polling.

Delayed messages (retries, `delay=`) are fetched from their `.DQ` queue at once and held by Dramatiq's
ConsumerThread until their eta; the consumer remembers those etas and returns by the soonest, so the thread moves
each to its queue on time. The in-memory broker of `vigil serve` needs no announcement (its queues are
queue.Queue, woken by put): its consumer gains only that eta bound and a prompt interrupt at shutdown.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import defaultdict
from queue import Empty

import redis
from dramatiq import Message
from dramatiq.broker import MessageProxy
from dramatiq.brokers.redis import RedisBroker, _RedisConsumer
from dramatiq.brokers.stub import StubBroker, _StubConsumer, _StubMessageProxy
from dramatiq.common import current_millis
from dramatiq.errors import ConnectionClosed, QueueNotFound

log = logging.getLogger(__name__)

#: how long a consumer waits between looks once interrupted (its worker is stopping) or while its prefetch is full
SHORT_WAIT_SECONDS = 0.1
#: the beat's default: heartbeat, maintenance and the look at every queue's length
BEAT_SECONDS = 2.0
#: Dramatiq's maintenance (dead workers' unacked messages back to their queue, old dead letters dropped) runs on
#: one queue every this many beats; its consumers used to trigger it by chance, one command in a thousand
MAINTENANCE_BEATS = 5
#: the beat: this process's heartbeat (as Dramatiq's dispatch script writes it), then each queue's length
BEAT_SCRIPT = """
redis.call("zadd", KEYS[1], ARGV[1], ARGV[2])
local lengths = {}
for i = 2, #KEYS do
    lengths[i - 1] = redis.call("llen", KEYS[i])
end
return lengths
"""


class Wakes:
    """A counter per queue, moved whenever that queue may hold work; a consumer waits for its queue's to move."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conditions: dict[str, threading.Condition] = {}
        self._counts: defaultdict[str, int] = defaultdict(int)

    def mark(self, queue_name: str) -> int:
        """Read before looking at the queue: a wake after this mark ends the wait that follows."""
        return self._counts[queue_name]

    def wait(self, queue_name: str, mark: int, seconds: float) -> bool:
        """Until the queue is woken after `mark`, or `seconds` pass; True when woken."""
        condition = self._condition(queue_name)
        with condition:
            return condition.wait_for(lambda: self._counts[queue_name] != mark, seconds)

    def wake(self, *queue_names: str) -> None:
        for name in queue_names:
            condition = self._condition(name)
            with condition:
                self._counts[name] += 1
                condition.notify_all()

    def wake_all(self) -> None:
        with self._lock:
            names = list(self._conditions)
        self.wake(*names)

    def _condition(self, queue_name: str) -> threading.Condition:
        condition = self._conditions.get(queue_name)
        if condition is None:
            with self._lock:
                condition = self._conditions.setdefault(queue_name, threading.Condition())
        return condition


class Etas:
    """The etas of the delayed messages a consumer handed to its worker, soonest first."""

    def __init__(self) -> None:
        self._heap: list[float] = []

    def note(self, message: Message) -> None:
        eta = message.options.get("eta")
        if isinstance(eta, (int, float)) and not isinstance(eta, bool):
            heapq.heappush(self._heap, eta)

    def wait_seconds(self, longest: float) -> float:
        """How long the consumer may wait: 0 when one is due (the thread moves due ones after each return)."""
        now, due = current_millis(), False
        while self._heap and self._heap[0] <= now:
            heapq.heappop(self._heap)
            due = True
        if due:
            return 0.0
        return min(longest, (self._heap[0] - now) / 1000) if self._heap else longest


class WakingRedisBroker(RedisBroker):
    """Dramatiq's RedisBroker whose enqueues announce themselves and whose idle consumers wait for that."""

    def __init__(self, *, beat_seconds: float = BEAT_SECONDS, **kwargs) -> None:
        super().__init__(**kwargs)
        self.beat_seconds = beat_seconds
        self.wake_channel = f"{self.namespace}:__wake__"
        self.wakes = Wakes()
        self._listener: threading.Thread | None = None
        self._listener_lock = threading.Lock()
        self._closed = threading.Event()
        self._turn = 0
        self._beat_script = self.client.register_script(BEAT_SCRIPT)

    @property
    def consumer_class(self):
        return _WakingRedisConsumer

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 5000):
        self._listen()
        return super().consume(queue_name, prefetch, timeout)

    def do_enqueue(self, queue_name: str, message_id: str, data: bytes) -> None:
        """Dramatiq's enqueue script, then the announcement, in one round trip (the message is there first)."""
        with self.client.pipeline(transaction=False) as pipe:
            self._script(pipe, "enqueue", queue_name, message_id, data)
            pipe.publish(self.wake_channel, queue_name)
            pipe.execute()

    def announce(self, queue_name: str) -> None:
        self.client.publish(self.wake_channel, queue_name)

    def close(self) -> None:
        self._closed.set()
        super().close()

    def _script(self, client, command: str, queue_name: str, *args, maintenance: bool | None = None):
        """RedisBroker's dispatch script called as its `do_<command>` does, on `client` (a pipeline, say)."""
        chance = self._should_do_maintenance(command) if maintenance is None else int(maintenance)
        arguments = [command, current_millis(), queue_name, self.broker_id, self.heartbeat_timeout,
                     self.dead_message_ttl, chance, self._max_unpack_size(), *args]
        return self.scripts["dispatch"](keys=[self.namespace], args=arguments, client=client)

    def _listen(self) -> None:
        with self._listener_lock:
            if self._listener is None:
                self._listener = threading.Thread(target=self._listen_until_closed, name="vigil-broker-wakes",
                                                  daemon=True)
                self._listener.start()

    def _listen_until_closed(self) -> None:
        pubsub, next_beat = None, 0.0
        while not self._closed.is_set():
            try:
                if pubsub is None:
                    pubsub = self.client.pubsub(ignore_subscribe_messages=True)
                    pubsub.subscribe(self.wake_channel)
                    self.wakes.wake_all()  # whatever was announced while nobody listened is looked at now
                if time.monotonic() >= next_beat:
                    self._beat()
                    next_beat = time.monotonic() + self.beat_seconds
                message = pubsub.get_message(timeout=max(next_beat - time.monotonic(), 0.0))
                if message and message.get("type") == "message":
                    self.wakes.wake(message["data"].decode())
            except (redis.RedisError, OSError) as exc:
                log.warning("broker wake listener: %s; listening again in %ss", exc, self.beat_seconds)
                pubsub = _closed(pubsub)
                self._closed.wait(self.beat_seconds)
        _closed(pubsub)

    def _beat(self) -> None:
        """The heartbeat and every queue's length (the safety poll) in one script call; every MAINTENANCE_BEATS
        beats, Dramatiq's maintenance of one queue in turn."""
        names = sorted(self.get_declared_queues() | self.get_declared_delay_queues())
        if not names:
            return
        self._turn += 1
        if self._turn % MAINTENANCE_BEATS == 0:
            self._script(self.client, "qsize", names[self._turn // MAINTENANCE_BEATS % len(names)], maintenance=True)
        lengths = self._beat_script(keys=[f"{self.namespace}:__heartbeats__", *(f"{self.namespace}:{name}"
                                                                             for name in names)],
                                    args=[current_millis(), self.broker_id])
        self.wakes.wake(*[name for name, length in zip(names, lengths) if length])


def _closed(pubsub) -> None:
    if pubsub is not None:
        try:
            pubsub.close()
        except (redis.RedisError, OSError):
            pass


class _WakingRedisConsumer(_RedisConsumer):
    """Fetches like Dramatiq's, but with nothing to fetch waits for a wake instead of sleeping and asking again."""

    def __init__(self, broker, queue_name, prefetch, timeout):
        super().__init__(broker, queue_name, prefetch, timeout)
        self.etas = Etas()
        self.interrupted = False

    def __next__(self):
        try:
            while True:
                if self.message_cache:
                    data = self.message_cache.pop(0)
                    if data is not None:  # a message acked meanwhile by a requeue race (Dramatiq #266)
                        return self._proxy(data)
                    continue
                mark = self.broker.wakes.mark(self.queue_name)
                room = self.prefetch - self.outstanding_message_count
                if room > 0:
                    self.message_cache = self.broker.do_fetch(self.queue_name, room)
                    if self.message_cache:
                        continue
                self.broker.wakes.wait(self.queue_name, mark, self._wait_seconds())
                return None
        except redis.ConnectionError as exc:
            raise ConnectionClosed(exc) from None

    def ack(self, message):
        try:
            super().ack(message)
        finally:
            self.broker.wakes.wake(self.queue_name)  # a prefetch slot is free

    def nack(self, message):
        try:
            super().nack(message)
        finally:
            self.broker.wakes.wake(self.queue_name)

    def requeue(self, messages):
        messages = list(messages)
        super().requeue(messages)
        if messages:
            self.broker.announce(self.queue_name)  # another worker takes them now, not at its next beat

    def interrupt(self) -> None:
        """The worker is stopping: return now, and look often until the thread sees it."""
        self.interrupted = True
        self.broker.wakes.wake(self.queue_name)

    def _wait_seconds(self) -> float:
        return SHORT_WAIT_SECONDS if self.interrupted else self.etas.wait_seconds(self.timeout / 1000)

    def _proxy(self, data: bytes) -> MessageProxy:
        message = Message.decode(data)
        self.queued_message_ids.add(message.message_id)
        self.etas.note(message)
        return MessageProxy(message)


class WakingStubBroker(StubBroker):
    """The in-memory broker of `vigil serve`, whose consumers wait on their queue until the next eta."""

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 100):
        try:
            return _WakingStubConsumer(self.queues[queue_name], self.dead_letters_by_queue[queue_name], prefetch,
                                       timeout)
        except KeyError:
            raise QueueNotFound(queue_name) from None


class _WakingStubConsumer(_StubConsumer):
    def __init__(self, queue, dead_letters, prefetch, timeout):
        super().__init__(queue, dead_letters, prefetch, timeout)
        self.etas = Etas()
        self.interrupted = False
        self._poked = False

    def __next__(self):
        seconds = SHORT_WAIT_SECONDS if self.interrupted else self.etas.wait_seconds(self.timeout / 1000)
        if not self.prefetch_semaphore.acquire(timeout=min(seconds, SHORT_WAIT_SECONDS)):
            return None  # every prefetch slot taken: busy, not idle
        queue = self.queue
        with queue.not_empty:
            queue.not_empty.wait_for(lambda: len(queue.queue) > 0 or self._poked, seconds)
            self._poked = False
        try:
            message = Message.decode(queue.get_nowait())
        except Empty:
            self.prefetch_semaphore.release()
            return None
        self.etas.note(message)
        return _StubMessageProxy(message)

    def interrupt(self) -> None:
        self.interrupted = True
        with self.queue.not_empty:
            self._poked = True
            self.queue.not_empty.notify_all()
