"""uvicorn's Server, woken once a second instead of ten times.

uvicorn's main loop sleeps 0.1 s at a time to look at its exit flag and refresh the Date header: ten wake-ups a
second whatever the traffic, ~2 ms of CPU a second for a web process that serves nothing (issue 32 measured the
production `vigil web` at 2.1 ms/s idle, all of it on the event loop's thread). Here the exit signal wakes the
loop itself, and the tick runs once a second, on the second, which is what the Date header needs (it names whole
seconds) and what a request-count limit needs.
"""

from __future__ import annotations

import asyncio
import time

import uvicorn


class QuietServer(uvicorn.Server):
    _woken: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    async def main_loop(self) -> None:
        self._loop, self._woken = asyncio.get_running_loop(), asyncio.Event()
        # counter 0 each time: uvicorn refreshes the Date header when counter % 10 == 0
        while not await self.on_tick(0):
            try:
                await asyncio.wait_for(self._woken.wait(), 1.0 - time.time() % 1.0)
            except asyncio.TimeoutError:
                pass

    def handle_exit(self, sig, frame) -> None:
        """The signal, as uvicorn handles it; then the sleeping main loop is woken to act on it at once."""
        super().handle_exit(sig, frame)
        if self._loop is not None and self._woken is not None:
            try:
                self._loop.call_soon_threadsafe(self._woken.set)
            except RuntimeError:  # the loop has closed
                pass
