"""app/live.Shared: a new row is loaded once per web process, however many pages of its owner are open."""

from __future__ import annotations

import asyncio
import threading

from app.live import Shared
from tests.integration.helpers import run_coroutine


def test_shared_load_runs_once_for_every_stream_that_asks():
    shared, calls, release = Shared(), [], threading.Event()

    def load():
        calls.append(1)
        release.wait(10)
        return "<tr>row</tr>"

    async def streams():
        waiting = [asyncio.ensure_future(shared.get(("monitor", "m1"), load)) for _ in range(20)]
        await asyncio.sleep(0)
        release.set()
        return await asyncio.gather(*waiting)

    assert run_coroutine(streams()) == ["<tr>row</tr>"] * 20
    assert calls == [1] and shared.loads == 1


def test_shared_load_survives_the_first_stream_closing_while_it_runs():
    shared, release = Shared(), threading.Event()

    def load():
        release.wait(10)
        return "row"

    async def streams():
        first = asyncio.ensure_future(shared.get("k", load))
        second = asyncio.ensure_future(shared.get("k", load))
        await asyncio.sleep(0)
        first.cancel()  # the page that asked first was closed
        release.set()
        return await second, first

    value, first = run_coroutine(streams())
    assert value == "row" and first.cancelled()


def test_shared_load_error_reaches_each_waiter_and_other_keys_load_on_their_own():
    shared = Shared()

    def broken():
        raise LookupError("gone")

    async def streams():
        results = await asyncio.gather(shared.get("a", broken), shared.get("a", broken), return_exceptions=True)
        return results, await shared.get("b", lambda: "b")

    results, other = run_coroutine(streams())
    assert [type(r) for r in results] == [LookupError, LookupError] and other == "b"
    assert shared.loads == 2


def test_shared_keeps_at_most_its_bound():
    shared = Shared(most=3)

    async def fill():
        for key in range(10):
            await shared.get(key, lambda key=key: key)
        return await shared.get(0, lambda: "loaded again")

    assert run_coroutine(fill()) == "loaded again"
    assert len(shared._entries) <= 3


def test_shared_loads_again_after_its_keep_time():
    shared = Shared(keep_seconds=0.0)

    async def twice():
        return await shared.get("k", lambda: 1), await shared.get("k", lambda: 2)

    assert run_coroutine(twice()) == (1, 2)
