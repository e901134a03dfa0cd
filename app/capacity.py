"""How one web process shares out its threads, so slow work can't take the capacity of the cheap paths.

- Every synchronous handler runs in one of two lanes, chosen by path: `public` (trigger links, approval pages,
  login, event streams, health, the runner's calls) or `api` (the tool endpoint, the REST API, the owner's
  pages). Each lane has threads of its own (WEB_PUBLIC_THREADS, WEB_THREADS), so a flood of one can't starve
  the other.
- First checks at create (a baseline fetch over the network) run in a third pool, admitted without waiting:
  at most CREATE_CONCURRENCY at once per process and CREATE_CONCURRENCY_PER_ACCOUNT per account. A call over
  either bound is turned away at once ("try again"), never queued.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import TypeVar

from litestar.concurrency import set_asyncio_executor

T = TypeVar("T")

PUBLIC, API = "public", "api"
#: paths whose handlers run in the public lane (prefixes)
PUBLIC_PATHS = ("/api/triggers/", "/approve/", "/api/approvals/", "/login", "/healthz", "/readyz", "/metrics",
                "/ui/events", "/api/events", "/api/runner/", "/static/")

_lane: contextvars.ContextVar[str] = contextvars.ContextVar("vigil_lane", default=API)


class LaneExecutor(Executor):
    """What Litestar's sync_to_thread submits to: each call goes to the pool of the request's lane."""

    def __init__(self, sizes: dict[str, int]) -> None:
        self.sizes = dict(sizes)
        self._pools = {lane: ThreadPoolExecutor(size, thread_name_prefix=f"web-{lane}") for lane, size in sizes.items()}

    def submit(self, fn, /, *args, **kwargs) -> Future:
        # Called on the event loop, in the request's context, so the lane its middleware chose is visible here.
        return self._pools[_lane.get()].submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        for pool in self._pools.values():
            pool.shutdown(wait=wait, cancel_futures=cancel_futures)


_executor: LaneExecutor | None = None


def install_lanes(api_threads: int, public_threads: int) -> None:
    """Make Litestar's sync handlers run in the lanes (once per process; again only if the sizes change)."""
    global _executor
    sizes = {API: api_threads, PUBLIC: public_threads}
    if _executor is not None and _executor.sizes == sizes:
        return
    old, _executor = _executor, LaneExecutor(sizes)
    set_asyncio_executor(_executor)
    if old is not None:
        old.shutdown(wait=False)


def lane_pool(lane: str) -> Executor:
    """The threads of `lane`, for work handed to them outside Litestar (app/runner_records.py)."""
    assert _executor is not None, "install_lanes first"
    return _executor._pools[lane]


def lanes_middleware(app):
    """ASGI middleware: pick the request's lane from its path before any handler runs."""
    async def choose_lane(scope, receive, send) -> None:
        if scope["type"] == "http":
            _lane.set(PUBLIC if scope["path"].startswith(PUBLIC_PATHS) else API)
        await app(scope, receive, send)
    return choose_lane


class Busy(Exception):
    """No slot for a first check now; str() is the sentence for the model."""


BUSY = "Vigil is busy taking other first checks; try again in a few seconds."


class CreateGate:
    """Admission for first checks: a slot per process and per account, taken without waiting."""

    def __init__(self, total: int, per_account: int) -> None:
        self.total, self.per_account = total, per_account
        self._lock = threading.Lock()
        self._running = 0
        self._by_account: dict[int, int] = {}
        self._pool = ThreadPoolExecutor(total, thread_name_prefix="web-create")

    def _enter(self, account: int) -> bool:
        with self._lock:
            if self._running >= self.total or self._by_account.get(account, 0) >= self.per_account:
                return False
            self._running += 1
            self._by_account[account] = self._by_account.get(account, 0) + 1
            return True

    def _leave(self, account: int) -> None:
        with self._lock:
            self._running -= 1
            left = self._by_account[account] - 1
            if left:
                self._by_account[account] = left
            else:
                del self._by_account[account]

    def running(self, account: int | None = None) -> int:
        with self._lock:
            return self._running if account is None else self._by_account.get(account, 0)

    async def run(self, account: int, fn: Callable[[], T], deadline: float) -> T:
        """fn() in the create pool, or Busy at once when either bound is full. The slot is held until fn
        returns, even if the caller stops waiting at `deadline` (TimeoutError): outbound work stays bounded."""
        if not self._enter(account):
            raise Busy(BUSY)

        def task() -> T:
            try:
                return fn()
            finally:
                self._leave(account)

        future = asyncio.get_running_loop().run_in_executor(self._pool, contextvars.copy_context().run, task)
        return await asyncio.wait_for(asyncio.shield(future), deadline)


_gate: CreateGate | None = None


def create_gate(total: int, per_account: int) -> CreateGate:
    """This process's gate (made on first use; made again only if the bounds change)."""
    global _gate
    if _gate is None or (_gate.total, _gate.per_account) != (total, per_account):
        _gate = CreateGate(total, per_account)
    return _gate
