"""What actors and the scheduler share within one process: settings, the event bus, fetchers, policies."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace

import requests

from engine.addresses import Own
from engine.crypto import Keyring
from engine.http import FetchPolicy, Fetcher
from engine.judge import JudgeModel
from engine.judge_transport import plain_session
from engine.shared_fetch import SharedFetches, Window
from engine.sources import SourceIO, SourcePolicy
from models import due
from models.coalesce import coalesce_by_default
from models.devices import Presence
from models.events import keep_events
from models.judging import DEFAULT_MODEL, JudgePolicy
from models.results import Lifecycle
from adapters.events import LocalBus, RedisBus, make_bus
from adapters.wakeup import make_alarm
from adapters.ratelimit import LinkLimiter
from adapters.settings import Settings


@dataclass
class Runtime:
    settings: Settings
    bus: LocalBus | RedisBus
    _local: threading.local = field(default_factory=threading.local, repr=False)

    def __post_init__(self) -> None:
        settings = self.settings
        self.keyring = Keyring.from_settings(settings.SECRET_KEY, settings.ENCRYPTION_KEYS)
        self.source_policy = SourcePolicy(file_roots=settings.file_roots)
        self.lifecycle = Lifecycle(unreachable_grace_seconds=settings.MONITOR_UNREACHABLE_GRACE_SECONDS,
                                   autopause_failures=settings.SCHEDULE_AUTOPAUSE_FAILURES,
                                   max_wakes_per_hour=settings.MONITOR_MAX_WAKES_PER_HOUR,
                                   max_fires_per_conversation_day=settings.MONITOR_MAX_FIRES_PER_CONVERSATION_DAY)
        self.limiter = LinkLimiter(settings.REDIS_URL)
        self.presence = Presence(online_seconds=settings.DEVICE_ONLINE_SECONDS,
                                 offline_seconds=settings.DEVICE_OFFLINE_SECONDS)
        self.judge_policy = JudgePolicy(keyring=self.keyring, fallback=default_judge(settings),
                                        failures_limit=settings.SCHEDULE_AUTOPAUSE_FAILURES,
                                        token_budget=settings.MONITOR_JUDGE_TOKEN_BUDGET,
                                        allow_private=settings.JUDGE_ALLOW_PRIVATE_URLS, own=own_endpoints(settings),
                                        egress=settings.egress)
        #: this process's shared fetches (engine/shared_fetch.py): its threads share them, other worker processes
        #: have their own, so N processes make at most N GETs per distinct request per interval window
        self.shared_fetches = SharedFetches(settings.FETCH_SHARED_CACHE_BYTES, settings.FETCH_TIMEOUT_SECONDS)
        #: the scheduler's alarm (adapters/wakeup.py): writes that make something due sooner ring it
        self.alarm = make_alarm(settings.REDIS_URL, settings.DATABASE_URL)

    def fetcher(self) -> Fetcher:
        """This thread's fetcher: its connections are reused from check to check."""
        fetcher = getattr(self._local, "fetcher", None)
        if fetcher is None:
            fetcher = self._local.fetcher = Fetcher(fetch_policy(self.settings))
        return fetcher

    def source_io(self) -> SourceIO:
        return SourceIO(self.fetcher(), self.source_policy)

    def check_io(self, window: Window) -> SourceIO:
        """This thread's sources for a polled check, its GETs shared with identical requests of `window`."""
        return SourceIO(self.shared_fetches.fetcher(self.fetcher(), window), self.source_policy)

    def create_io(self) -> SourceIO:
        """This thread's sources for first checks at create: the shorter CREATE_FETCH_TIMEOUT_SECONDS."""
        fetcher = getattr(self._local, "create_fetcher", None)
        if fetcher is None:
            policy = replace(fetch_policy(self.settings), timeout=self.settings.CREATE_FETCH_TIMEOUT_SECONDS)
            fetcher = self._local.create_fetcher = Fetcher(policy)
        return SourceIO(fetcher, self.source_policy)

    def judge_session(self) -> requests.Session:
        """This thread's session to the operator's judge model (the JUDGE_* settings, trusted as configured, so
        not SSRF-guarded); an account's own models are called through engine/judge_transport's guarded one."""
        session = getattr(self._local, "judge_session", None)
        if session is None:
            session = self._local.judge_session = plain_session(self.settings.egress)
        return session


_current: Runtime | None = None


def configure(settings: Settings, bus: LocalBus | RedisBus | None = None) -> Runtime:
    global _current
    keep_events(settings.MONITOR_EVENTS_KEPT)
    coalesce_by_default(settings.WAKE_COALESCE_SECONDS)
    _current = Runtime(settings, bus or make_bus(settings.REDIS_URL, settings.DATABASE_URL))
    due.install(_current.alarm.ring)  # models/due.sooner: a write that brings the scheduler's next pass closer
    return _current


def current() -> Runtime:
    if _current is None:
        raise RuntimeError("tasks.runtime.configure(settings) has not been called in this process")
    return _current


def fetch_policy(settings: Settings) -> FetchPolicy:
    return FetchPolicy(timeout=settings.FETCH_TIMEOUT_SECONDS, max_bytes=settings.FETCH_MAX_BYTES,
                       allow_loopback=settings.FETCH_ALLOW_LOOPBACK, own=own_endpoints(settings),
                       egress=settings.egress)


def own_endpoints(settings: Settings) -> Own:
    """Vigil itself, which none of its requests may reach: its public origins and the addresses its web listens on."""
    return Own.of((settings.PUBLIC_API_BASE_URL, settings.PUBLIC_APP_URL, settings.API_URL),
                  settings.listen_addresses)


def default_judge(settings: Settings) -> JudgeModel | None:
    """The instance's "default" judge model as the operator's JUDGE_* settings define it, if they do: what an
    account's monitors use when the account has no "default" of its own. No account can see its URL or change it."""
    if not (settings.JUDGE_BASE_URL and settings.JUDGE_MODEL):
        return None
    return JudgeModel(name=DEFAULT_MODEL, base_url=settings.JUDGE_BASE_URL, api_key=settings.JUDGE_API_KEY,
                      model=settings.JUDGE_MODEL, api_version=settings.JUDGE_API_VERSION or None)
