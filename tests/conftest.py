"""Fixtures shared by integration and e2e tests: the real PostgreSQL and Redis, and page servers."""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse

import pytest

from tests.servers import PageServer

#: Set by the test command: a missing service fails the run instead of skipping tests.
REQUIRE_SERVICES = os.environ.get("VIGIL_REQUIRE_SERVICES") == "1"
TEST_DATABASE_URL = os.environ.get("VIGIL_TEST_DATABASE_URL", "postgresql://vigil:vigil@127.0.0.1:5432/vigil_test")
E2E_DATABASE_URL = os.environ.get("VIGIL_E2E_DATABASE_URL", "postgresql://vigil:vigil@127.0.0.1:5432/vigil_e2e")
TEST_REDIS_URL = os.environ.get("VIGIL_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


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
