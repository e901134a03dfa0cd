"""Fixtures shared by integration and e2e tests: the real PostgreSQL and Redis, and page servers."""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse

import psycopg2
import psycopg2.errors
import pytest

from tests.servers import PageServer

#: Set by the test command: a missing service fails the run instead of skipping tests.
REQUIRE_SERVICES = os.environ.get("VIGIL_REQUIRE_SERVICES") == "1"
#: pytest-xdist's worker ("gw0", "gw1", …; "" when tests run in one process): each worker has a database and Redis
#: database of its own, so two workers never truncate or flush each other's rows
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def for_worker_database(url: str) -> str:
    """`…/vigil_test` → `…/vigil_test_gw1` under worker gw1 (created by ensure_database), unchanged otherwise."""
    return f"{url}_{WORKER}" if WORKER else url


def for_worker_redis(url: str) -> str:
    """Redis db N for worker gw0, N - 10 for gw1, then two lower for each further worker (mod 16): with the
    defaults (15 for tests, 14 for e2e) workers use 15/14, 5/4, 3/2, 1/0, clear of the benches' dbs (6 to 13), so a
    bench running beside the test command never flushes a worker's queued messages."""
    if not WORKER:
        return url
    parsed = urlparse(url)
    number, worker = int(parsed.path.strip("/") or 0), int(WORKER.removeprefix("gw"))
    offset = 0 if worker == 0 else 10 + 2 * (worker - 1)
    return parsed._replace(path=f"/{(number - offset) % 16}").geturl()


TEST_DATABASE_URL = for_worker_database(
    os.environ.get("VIGIL_TEST_DATABASE_URL", "postgresql://vigil:vigil@127.0.0.1:5432/vigil_test"))
E2E_DATABASE_URL = for_worker_database(
    os.environ.get("VIGIL_E2E_DATABASE_URL", "postgresql://vigil:vigil@127.0.0.1:5432/vigil_e2e"))
TEST_REDIS_URL = for_worker_redis(os.environ.get("VIGIL_TEST_REDIS_URL", "redis://127.0.0.1:6379/15"))


def ensure_database(url: str) -> None:
    """A worker's own database, created (by the test role, which may CREATEDB) the first time it is needed."""
    parsed = urlparse(url)
    name = parsed.path.strip("/")
    try:
        conn = psycopg2.connect(parsed._replace(path="/postgres").geturl(), connect_timeout=5)
    except psycopg2.OperationalError:
        return  # not reachable: require() says so where a test needs it
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if cur.fetchone() is None:
                try:
                    cur.execute(f'CREATE DATABASE "{name}"')
                except psycopg2.errors.DuplicateDatabase:
                    pass
    finally:
        conn.close()


def pytest_configure(config) -> None:
    if WORKER:
        ensure_database(TEST_DATABASE_URL)


def require(url: str) -> None:
    """Skip (or, under the test command, fail) when the service behind `url` is not listening."""
    parsed = urlparse(url)
    try:
        socket.create_connection((parsed.hostname, parsed.port), timeout=2).close()
    except OSError as exc:
        message = f"{parsed.scheme} at {parsed.hostname}:{parsed.port} is not reachable ({exc}); run ./scripts/test"
        if REQUIRE_SERVICES:
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture()
def pages():
    server = PageServer().start()
    yield server
    server.stop()
