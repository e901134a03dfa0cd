"""Builds the broker every actor module uses: Redis in production, in-memory when embedded."""

from __future__ import annotations

import dramatiq
from dramatiq.brokers.stub import StubBroker

from models import database
from tasks.runtime import configure
from vigil.settings import Settings


class DatabaseConnection(dramatiq.Middleware):
    """Opens this thread's database connection around each message, and closes it after."""

    def before_process_message(self, broker, message):
        database.connect(reuse_if_open=True)

    def after_process_message(self, broker, message, *, result=None, exception=None):
        if not database.is_closed():
            database.close()

    after_skip_message = after_process_message


def setup_broker(settings: Settings, bus=None, broker: dramatiq.Broker | None = None) -> dramatiq.Broker:
    """Build (or take) the broker, install it, and bind the actors to it."""
    configure(settings, bus)
    if broker is not None:
        pass
    elif settings.REDIS_URL:
        from dramatiq.brokers.redis import RedisBroker

        broker = RedisBroker(url=settings.REDIS_URL)
    else:
        broker = StubBroker()
        broker.emit_after("process_boot")
    broker.add_middleware(DatabaseConnection())
    dramatiq.set_broker(broker)
    from tasks.checks import ACTORS as CHECK_ACTORS
    from tasks.deliveries import ACTORS as DELIVERY_ACTORS

    for actor in CHECK_ACTORS + DELIVERY_ACTORS:  # rebinds them when a process (a test run) builds a second broker
        actor.broker = broker
        broker.declare_actor(actor)
    return broker
