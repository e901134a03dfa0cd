"""Builds the broker every actor module uses: Redis in production, in-memory when embedded."""

from __future__ import annotations

import logging

import dramatiq
import redis.exceptions
from dramatiq.errors import BrokerConnectionError, Retry
from dramatiq.middleware import MiddlewareError

from engine.checks.cel import stop_helper
from models import database
from models.db import UNAVAILABLE as DATABASE_UNAVAILABLE
from tasks.runtime import configure
from tasks.wakes import WakingRedisBroker, WakingStubBroker
from adapters.logs import first_line
from adapters.settings import Settings

log = logging.getLogger(__name__)

#: errors of a database or Redis that is down or restarting: the work is tried again, never lost
UNAVAILABLE = (*DATABASE_UNAVAILABLE, redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
               BrokerConnectionError)


class DatabaseUnavailable(MiddlewareError, Retry):
    """The database could not be reached for a message; Dramatiq retries it later, with backoff.

    A MiddlewareError, because Dramatiq only logs any other error of a middleware and runs the actor anyway
    (which then fails on "connection not opened", hiding why); a Retry, so it is not logged as a crash.
    """


class DatabaseConnection(dramatiq.Middleware):
    """Opens this thread's database connection around each message, and closes it after."""

    def before_process_message(self, broker, message):
        try:
            database.connect(reuse_if_open=True)
        except DATABASE_UNAVAILABLE as exc:
            log.warning("database unreachable; %s will be retried: %s", message, first_line(exc))
            raise DatabaseUnavailable(first_line(exc)) from None

    def after_process_message(self, broker, message, *, result=None, exception=None):
        if not database.is_closed():
            database.close()

    after_skip_message = after_process_message

    def after_worker_shutdown(self, broker, worker):
        """The CEL helper child goes with the worker (engine/checks/cel_runner.py)."""
        stop_helper()


def setup_broker(settings: Settings, bus=None, broker: dramatiq.Broker | None = None) -> dramatiq.Broker:
    """Build (or take) the broker, install it, and bind the actors to it."""
    configure(settings, bus)
    if broker is not None:
        pass
    elif settings.REDIS_URL:  # both wait for work instead of polling for it (tasks/wakes.py)
        broker = WakingRedisBroker(url=settings.REDIS_URL, beat_seconds=settings.WORKER_BEAT_SECONDS)
    else:
        broker = WakingStubBroker()
        broker.emit_after("process_boot")
    broker.add_middleware(DatabaseConnection())
    dramatiq.set_broker(broker)
    from tasks.checks import ACTORS as CHECK_ACTORS
    from tasks.commands import ACTORS as COMMAND_ACTORS
    from tasks.deliveries import ACTORS as DELIVERY_ACTORS
    from tasks.pushes import ACTORS as PUSH_ACTORS

    for actor in CHECK_ACTORS + DELIVERY_ACTORS + COMMAND_ACTORS + PUSH_ACTORS:  # rebinds them when a process (a test run) builds a second broker
        actor.broker = broker
        broker.declare_actor(actor)
    return broker
