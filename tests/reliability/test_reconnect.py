"""Web, worker and scheduler reconnect by themselves: PostgreSQL and then Redis are stopped and started again
under a running stack, and afterwards a new delivery and a new page change each wake their conversation, with
no process restarted. While a server is down, /readyz and the trigger link say so with a 503 to retry."""

from __future__ import annotations

import time

import pytest
import requests

pytestmark = pytest.mark.reliability

WAIT = 60   #: bound for each recovery


def _eventually(check, what: str, stack, seconds: float = WAIT):
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except (requests.RequestException, OSError) as exc:
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"not within {seconds}s: {what} (last: {last!r})\n{stack.log_tails()}")


def _wakes(stack, monitor_id: str) -> list[str]:
    rows = stack.query("SELECT m.content FROM wakes w JOIN messages m ON m.id = w.message_id "
                       "WHERE w.monitor_id = %s ORDER BY m.id", (monitor_id,))
    return [content for (content,) in rows]


def test_web_worker_and_scheduler_reconnect_after_postgres_and_redis_restarts(stack_factory, services, pages):
    pg, rds = services
    stack = stack_factory()
    stack.start_web()
    stack.start_worker()
    stack.start_scheduler()
    pids = {name: process.pid for name, process in stack.processes.items()}
    hook = stack.tool("reconnect-hook", description="the job calls back", source={"type": "webhook"}, max_wakes=10)
    url = pages.set("/reconnect", "<p>build pending</p>")
    page = stack.tool("reconnect-page", description="the build page changes", check={"type": "change"},
                      source={"type": "page", "url": url}, interval="1s", max_wakes=10)

    def deliver(fact: str) -> requests.Response:
        return requests.post(hook["url"], json={"fact": fact}, headers={"Idempotency-Key": fact}, timeout=30)

    assert requests.get(f"{stack.base}/readyz", timeout=10).json() == {"ok": True, "database": "ok", "redis": "ok"}
    _eventually(lambda: stack.query("SELECT check_count FROM monitors WHERE id = %s", (page["monitor_id"],))[0][0] >= 2,
                "the scheduler and worker are checking the page", stack)

    pg.stop()
    try:
        health = requests.get(f"{stack.base}/readyz", timeout=30)
        assert health.status_code == 503 and health.json()["database"].startswith("unreachable")
        assert requests.get(f"{stack.base}/healthz", timeout=10).status_code == 200, "the process still serves"
        refused = deliver("while-postgres-is-down")
        assert refused.status_code == 503 and refused.headers["Retry-After"] and refused.json()["detail"]
        time.sleep(2)  # the worker and scheduler meet the outage too
    finally:
        pg.start()
    _eventually(lambda: requests.get(f"{stack.base}/readyz", timeout=10).status_code == 200,
                "/readyz is 200 again after PostgreSQL came back", stack)

    rds.stop()
    try:
        health = requests.get(f"{stack.base}/readyz", timeout=30)
        assert health.status_code == 503 and health.json()["redis"].startswith("unreachable")
        # Stored in PostgreSQL, so accepted; it can't be queued, so the sweep queues it once Redis is back.
        assert deliver("while-redis-is-down").status_code == 202
        time.sleep(2)
    finally:
        rds.start()
    _eventually(lambda: requests.get(f"{stack.base}/readyz", timeout=10).status_code == 200,
                "/readyz is 200 again after Redis came back", stack)

    assert deliver("after-both-came-back").status_code == 202
    pages.set("/reconnect", "<p>build finished</p>")
    _eventually(lambda: len(_wakes(stack, hook["monitor_id"])) == 2, "both accepted deliveries woke", stack)
    woken = "\n".join(_wakes(stack, hook["monitor_id"]))
    assert "while-redis-is-down" in woken and "after-both-came-back" in woken
    assert "while-postgres-is-down" not in woken
    [wake] = _eventually(lambda: _wakes(stack, page["monitor_id"]), "the page change woke", stack)
    assert "finished" in wake
    assert {name: process.pid for name, process in stack.processes.items()} == pids
    assert all(stack.alive().values()), stack.log_tails()


def test_a_process_started_while_postgres_is_down_waits_for_it(stack_factory, services, pages):
    pg, _ = services
    stack = stack_factory()
    stack.start_web()
    stack.start_worker()
    url = pages.set("/late", "<p>waiting</p>")
    page = stack.tool("late-start", description="the page changes", check={"type": "change"},
                      source={"type": "page", "url": url}, interval="1s")
    pg.stop()
    try:
        stack.start_scheduler()
        _eventually(lambda: stack.grep_logs("waiting for the database"), "the scheduler says it waits", stack)
        assert stack.alive()["scheduler"], stack.log_tails()
    finally:
        pg.start()
    _eventually(lambda: stack.query("SELECT check_count FROM monitors WHERE id = %s", (page["monitor_id"],))[0][0] >= 2,
                "the late scheduler claims the page's checks", stack)
