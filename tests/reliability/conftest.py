"""Fault-test fixtures: PostgreSQL and Redis servers of these tests' own, which they stop and restart at will.

Missing initdb or redis-server skips these tests locally and fails them under the test command
(VIGIL_REQUIRE_SERVICES=1); `./scripts/test` installs both packages when they are missing.
"""

from __future__ import annotations

import pytest
import redis

from tests.conftest import REQUIRE_SERVICES
from tests.reliability.services import Postgres, Redis, ensure_running, missing_tools
from tests.reliability.stack import Stack, new_stack
from tests.servers import PageServer


def _require_tools() -> None:
    missing = missing_tools()
    if missing:
        message = f"fault tests need {', '.join(missing)}; run ./scripts/test"
        if REQUIRE_SERVICES:
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="session")
def pg_server():
    """A PostgreSQL cluster in a temp dir, on a free port; removed at the end whatever happened."""
    _require_tools()
    server = Postgres()
    try:
        server.start()
        yield server
    finally:
        server.destroy()


@pytest.fixture(scope="session")
def redis_server():
    _require_tools()
    server = Redis()
    try:
        server.start()
        yield server
    finally:
        server.destroy()


@pytest.fixture()
def services(pg_server, redis_server):
    """Both servers up at the start of each test (a failed test may have left one stopped), Redis emptied."""
    ensure_running(pg_server, redis_server)
    redis.Redis.from_url(redis_server.url()).flushall()
    return pg_server, redis_server



@pytest.fixture()
def stack_factory(services):
    """Builds production-mode stacks, each on a fresh database; stops every process they started at the end."""
    pg, rds = services
    stacks: list[Stack] = []

    def build(**settings: str) -> Stack:
        stack = new_stack(pg, rds, len(stacks), **settings)
        stacks.append(stack)
        return stack

    yield build
    problems = []
    for stack in stacks:
        problems += stack.stop_all()
        stack.remove(keep=bool(problems))
    if problems:
        pytest.fail("; ".join(problems) + "\n" + "\n".join(stack.log_tails() for stack in stacks))


@pytest.fixture()
def pages():
    server = PageServer().start()
    yield server
    server.stop()
