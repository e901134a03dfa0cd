"""Small helpers the integration tests share."""

from __future__ import annotations

import asyncio
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from datetime import timedelta

from models import database, utcnow
from models.tables import Message, Monitor, Wake


@contextmanager
def db():
    with database.connection_context():
        yield database


@contextmanager
def transaction_held_elsewhere(hold=lambda: None):
    """Another thread inside a write transaction (having run `hold()` in it: rows it locks, say) for the length of
    the block, as another writer of this process would be: the in-process worker, a second scheduler."""
    from models.db import write_transaction

    holding, done = threading.Event(), threading.Event()

    def holder() -> None:
        with database.connection_context(), write_transaction():
            hold()
            holding.set()
            done.wait(60)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert holding.wait(30), "the other thread never began its transaction"
        yield
    finally:
        done.set()
        thread.join(30)


def wakes(monitor_id: str | None = None) -> list[Message]:
    """The wake messages written (of one monitor, or all), oldest first."""
    query = Message.select().join(Wake, on=(Wake.message == Message.id))
    if monitor_id is not None:
        query = query.where(Wake.monitor == monitor_id)
    with db():
        return list(query.order_by(Message.id))


def monitor_row(monitor_id: str) -> Monitor:
    with db():
        return Monitor.get_by_id(monitor_id)


def tool(client, token: str, action: str, arguments: dict | None = None, conversation: str = "conv-1",
         channel: str = "chat"):
    """Call the tool endpoint as an agent runtime would."""
    return client.post("/api/tool/monitor", headers={"Authorization": f"Bearer {token}"},
                       json={"action": action, "arguments": arguments or {},
                             "context": {"conversation_id": conversation, "channel": channel, "agent_id": "agent-1"}})


class Clock:
    """Ticks the real scheduler at a time of the test's own, moving ahead on every call."""

    def __init__(self, drain) -> None:
        self.drain = drain
        self.offset = 0

    def __call__(self, seconds_ahead: int = 4000) -> int:
        """Tick as if `seconds_ahead` more had passed, then let the worker process it all."""
        from tasks.scheduler import tick

        self.offset += seconds_ahead
        with db():
            claimed = tick(utcnow() + timedelta(seconds=self.offset), 500)
        self.drain()
        return claimed

    def now(self):
        return utcnow() + timedelta(seconds=self.offset)


def wait_for(probe, timeout: float = 30, message: str = "timed out waiting"):
    """probe()'s first truthy value, asked every 0.2 s; AssertionError(message) after `timeout` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(message)


def login(client, email: str = "owner@example.com", password: str = "owner-password") -> str:
    """Sign in through the login form; returns the session's CSRF token for JSON calls."""
    form = client.get("/login")
    csrf = re.search(r'name="_csrf" value="([^"]+)"', form.text).group(1)
    signed_in = client.post("/login", data={"email": email, "password": password, "_csrf": csrf},
                            follow_redirects=False)
    assert signed_in.status_code == 303, signed_in.text
    page = client.get("/settings/devices")
    return re.search(r'"X-CSRF-Token": "([^"]+)"', page.text).group(1)


@contextmanager
def running_stack(tmp_path: Path, *, worker: bool = True, scheduler: bool = False, **settings: str):
    """`vigil web` (and a worker, and the scheduler) as processes on the integration database, for clients that
    need real HTTP (the MCP SDK, `vigil watch`); each stopped by SIGTERM and required to exit 0."""
    from tests.conftest import TEST_DATABASE_URL, TEST_REDIS_URL
    from tests.reliability.stack import Stack

    stack = Stack(tmp_path, TEST_DATABASE_URL, TEST_REDIS_URL, **settings)
    try:
        if worker:
            stack.start_worker(threads=2)
        if scheduler:
            stack.start_scheduler()
        stack.start_web()
        yield stack
    finally:
        problems = stack.stop_all()
    assert not problems, f"{problems}\n{stack.log_tails()}"


def run_coroutine(coroutine):
    """asyncio.run in a thread of its own: under ./scripts/test's workers an e2e file may have run first in this
    process, and Playwright's sync API leaves its event loop running in the main thread, where asyncio.run refuses."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
