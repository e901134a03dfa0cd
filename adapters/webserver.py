"""uvicorn's HTTP/1.1 protocol with a header deadline, so a slowloris client can't hold a connection.

The protocol is uvicorn's httptools one (llhttp, in C): a request costs the web process noticeably less CPU
than with the pure-Python h11 parser (a paired device's line batches are one request each; issue 27 measured
the parser as the largest part of the event loop's share). h11 stays the fallback where httptools is not
installed; the guard below is the same for both.

uvicorn times out an idle keep-alive connection, but any byte cancels that timer, and a fresh connection
has none: a client that sends one header byte a second holds its connection (and its buffers) for as long
as it likes. Here a request's headers must be complete within WEB_HEADER_TIMEOUT_SECONDS of the connection
opening, or of the last answer on it; otherwise the connection is closed. A body, once the headers are in,
is read by the app's own coroutine and holds no thread.
"""

from __future__ import annotations

import asyncio

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as BaseProtocol
except ImportError:  # pragma: no cover - httptools is a dependency; h11 comes with uvicorn itself
    from uvicorn.protocols.http.h11_impl import H11Protocol as BaseProtocol


def guarded_protocol(header_timeout: float, base: type = BaseProtocol) -> type:
    class HeaderDeadlineProtocol(base):
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._header_timer is None and self._between_requests():
                self._arm()
            super().data_received(data)
            if not self._between_requests():
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _between_requests(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(header_timeout, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self._between_requests() and not self.transport.is_closing():
                self.transport.close()

    return HeaderDeadlineProtocol
