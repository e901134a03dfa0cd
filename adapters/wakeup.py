"""The scheduler's alarm: it sleeps on it until its next due time, and a write that makes something due sooner (a
monitor created or resumed, a coalescing window opened…) rings it with that time (models/due.sooner).

Embedded, the scheduler is a thread of the process that writes: a condition variable rings it. In production
the writer is another process (web, worker): a Redis pub/sub channel, which the scheduler reads with a blocking
read (no polling). Every scheduler hears every ring, so two schedulers both wake and their claims (SKIP LOCKED,
compare-and-set) still take each due item once. A ring lost (Redis down, the scheduler reconnecting) costs
lateness only: the scheduler never sleeps past SCHEDULER_MAX_SLEEP_SECONDS and reads the due times again then.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from datetime import datetime

log = logging.getLogger(__name__)
_CHANNEL = "vigil:{}:scheduler:due"
#: how long the scheduler sleeps at a time while its channel is unreachable, before it subscribes again
RETRY_SECONDS = 5.0


class LocalAlarm:
    """In-process: rings wake the scheduler thread at once. One per process (`local_alarm()`), as the web, the
    worker threads and the scheduler share it."""

    def __init__(self) -> None:
        self._ringing = threading.Condition()
        self._due: list[datetime] = []

    def ring(self, when: datetime) -> None:
        with self._ringing:
            self._due.append(when)
            self._ringing.notify_all()

    def wait(self, timeout: float) -> list[datetime]:
        """The due times rung since the last wait, at once if there are some; else after at most `timeout` s."""
        with self._ringing:
            if not self._due and timeout > 0:
                self._ringing.wait(timeout)
            rung, self._due = self._due, []
        return rung

    def close(self) -> None:
        """Nothing held."""


class RedisAlarm:
    """Across processes: PUBLISH the due time on the instance's channel; the scheduler SUBSCRIBEs and blocks on
    its socket until a message or the timeout."""

    def __init__(self, url: str, namespace: str) -> None:
        self._url = url
        self._channel = _CHANNEL.format(namespace)
        self._client = None
        self._pubsub = None

    def ring(self, when: datetime) -> None:
        try:
            if self._client is None:
                import redis

                self._client = redis.Redis.from_url(self._url, socket_timeout=5, socket_connect_timeout=5)
            self._client.publish(self._channel, when.isoformat())
        except Exception as exc:  # the write that rang has happened; the scheduler's cap covers a lost ring
            log.warning("scheduler not woken (Redis unreachable): %s", exc)

    def wait(self, timeout: float) -> list[datetime]:
        """The due times published since the last wait (at once if some are waiting), else after `timeout` s."""
        try:
            pubsub = self._subscribed()
            rung = []
            message = pubsub.get_message(ignore_subscribe_messages=True, timeout=max(timeout, 0.0))
            while message is not None:
                if message.get("type") == "message":
                    rung.extend(_when(message["data"]))
                message = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.0)
            return rung
        except Exception as exc:  # Redis down: sleep on the clock alone, and subscribe again next time
            log.warning("scheduler's wake-up channel unreachable, sleeping on the clock: %s", exc)
            self.close()
            time.sleep(min(max(timeout, 0.0), RETRY_SECONDS))
            return []

    def _subscribed(self):
        if self._pubsub is None:
            import redis

            client = redis.Redis.from_url(self._url, socket_timeout=None, socket_connect_timeout=5,
                                          health_check_interval=0)
            pubsub = client.pubsub()
            pubsub.subscribe(self._channel)
            self._pubsub = pubsub
        return self._pubsub

    def close(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            try:
                pubsub.close()
            except Exception:  # already gone with the connection
                pass


def _when(data) -> list[datetime]:
    try:
        return [datetime.fromisoformat(data.decode() if isinstance(data, bytes) else data)]
    except (ValueError, UnicodeDecodeError):
        return []  # not ours: nothing to plan on


_local: LocalAlarm | None = None
_local_lock = threading.Lock()


def local_alarm() -> LocalAlarm:
    global _local
    with _local_lock:
        if _local is None:
            _local = LocalAlarm()
        return _local


def make_alarm(redis_url: str, database_url: str = ""):
    """Redis pub/sub when there is Redis (its channel named after the database, as the event bus's), else the
    process's own alarm."""
    if not redis_url:
        return local_alarm()
    return RedisAlarm(redis_url, hashlib.sha256(database_url.encode("utf-8")).hexdigest()[:12])
