"""What actors and the scheduler share within one process: settings, the event bus, fetchers."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from engine.http import FetchPolicy, Fetcher
from vigil.events import LocalBus, RedisBus, make_bus
from vigil.settings import Settings


@dataclass
class Runtime:
    settings: Settings
    bus: LocalBus | RedisBus

    def __post_init__(self) -> None:
        self._local = threading.local()

    def fetcher(self) -> Fetcher:
        """This thread's fetcher: its connections are reused from check to check."""
        fetcher = getattr(self._local, "fetcher", None)
        if fetcher is None:
            fetcher = self._local.fetcher = Fetcher(fetch_policy(self.settings))
        return fetcher

    def publish(self, user_id: int, name: str, data: dict) -> None:
        self.bus.publish(user_id, name, data)


_current: Runtime | None = None


def configure(settings: Settings, bus: LocalBus | RedisBus | None = None) -> Runtime:
    global _current
    _current = Runtime(settings, bus or make_bus(settings.REDIS_URL))
    return _current


def current() -> Runtime:
    if _current is None:
        raise RuntimeError("tasks.runtime.configure(settings) has not been called in this process")
    return _current


def fetch_policy(settings: Settings) -> FetchPolicy:
    return FetchPolicy(timeout=settings.FETCH_TIMEOUT_SECONDS, max_bytes=settings.FETCH_MAX_BYTES,
                       allow_loopback=settings.FETCH_ALLOW_LOOPBACK)
