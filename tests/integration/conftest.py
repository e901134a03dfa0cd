"""Integration fixtures: a migrated PostgreSQL database, Redis, the app and a worker on a stub broker."""

from __future__ import annotations

import pytest
import redis
from dramatiq import Worker
from dramatiq.brokers.stub import StubBroker
from litestar.testing import TestClient

from models import ALL_TABLES, database
from models.accounts import create_token, create_user
from models.db import bind
from models.migrate import migrate
from tests.conftest import TEST_DATABASE_URL, TEST_REDIS_URL, require
from adapters.settings import Settings
from tests.integration.embedded import laptop  # noqa: F401  (a fixture: the default install with its local runner)


@pytest.fixture(scope="session")
def postgres():
    require(TEST_DATABASE_URL)
    require(TEST_REDIS_URL)
    bind(TEST_DATABASE_URL)
    with database.connection_context():
        database.execute_sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public;")
        migrate()
    return database


@pytest.fixture(autouse=True)
def clean(postgres):
    """Every test starts with empty tables and an empty Redis database."""
    with postgres.connection_context():
        names = ", ".join(m._meta.table_name for m in ALL_TABLES)
        postgres.execute_sql(f"TRUNCATE {names} RESTART IDENTITY CASCADE")
    redis.Redis.from_url(TEST_REDIS_URL).flushdb()
    yield
    if not postgres.is_closed():
        postgres.close()


@pytest.fixture()
def settings(tmp_path) -> Settings:
    return Settings(VIGIL_DATA_DIR=str(tmp_path), DATABASE_URL=TEST_DATABASE_URL, REDIS_URL=TEST_REDIS_URL,
                    SECRET_KEY="integration-test-secret", FETCH_ALLOW_LOOPBACK=True,
                    MONITOR_MIN_INTERVAL_SECONDS=1, FETCH_TIMEOUT_SECONDS=5)


@pytest.fixture()
def broker(settings):
    """The actors on an in-memory broker, with events through the real Redis."""
    from tasks.broker import setup_broker

    stub = StubBroker()
    stub.emit_after("process_boot")
    setup_broker(settings, broker=stub)
    worker = Worker(stub, worker_timeout=50, worker_threads=2)
    worker.start()
    yield stub
    worker.stop()
    stub.close()


@pytest.fixture()
def drain(broker):
    """Process every queued message, then return."""
    from tasks.deliveries import relay

    def run() -> None:
        assert relay.wait_idle(), "the web's delivery relay did not hand its deliveries to the broker"
        broker.join("checks")
        broker.join("browser")  # pages rendered in a browser (tasks/checks.check_rendered)
        broker.join("deliveries")
        broker.join("pushes")
    return run


@pytest.fixture()
def run_due_checks(drain):
    """Tick the real scheduler on the test's own clock and process what it enqueued."""
    from tests.integration.helpers import Clock

    return Clock(drain)


@pytest.fixture()
def reconfigure(settings, broker):
    """Run the rest of the test with some settings changed, as an operator would set them; the test's own
    settings come back after it, so what it changed (a coalescing window, say) can't leak into the next test that
    the same process runs."""
    from dataclasses import replace

    import tasks.runtime as runtime

    def apply(**changes) -> Settings:
        changed = replace(settings, **changes)
        runtime.configure(changed)
        return changed
    yield apply
    runtime.configure(settings)


@pytest.fixture()
def client(settings, broker):
    from app import create_app

    with TestClient(create_app(settings)) as test_client:
        yield test_client


@pytest.fixture()
def owner(postgres):
    return _account(postgres, "owner@example.com", "owner-password")


@pytest.fixture()
def stranger(postgres):
    return _account(postgres, "stranger@example.com", "stranger-password")


def _account(postgres, email: str, password: str):
    """A user and a runtime token of theirs."""
    with postgres.connection_context():
        return create_user(email, password), create_token(email)
