"""The runner's calls on kept-alive connections: one per thread (the poller holds its own, the uploader its own).

urllib opens a connection for every call and closes it after. A watched command's lines go up in a POST every
200 ms or so, so that was a TCP (and, against an https server, a TLS) handshake for every batch, on the device
and on the server alike. Here each thread keeps its connection open between calls; a connection the server
closed meanwhile (its keep-alive ran out) is found on the next call, which is then sent once more on a fresh
one. Every runner call may be sent twice (records and results are numbered and stored once, a poll only reads,
a pairing is sent once, on a fresh connection).

Behind a proxy set in the environment (http_proxy and friends), or when the server answers with a redirect,
the client falls back to urllib, which knows how to go through both.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import urllib.request
from typing import Callable, Optional
from urllib.parse import urlsplit

#: what a kept connection shows when the server closed it while it sat idle between calls
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


def direct(server: str) -> bool:
    """Whether calls to `server` go straight to it (no proxy from the environment applies)."""
    parts = urlsplit(server)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    return parts.scheme not in urllib.request.getproxies() or bool(urllib.request.proxy_bypass(parts.hostname))


class KeptConnections:
    """Per-thread connections to one server; `track(connection_class)` gives the factory the client can abort."""

    def __init__(self, server: str, track: Callable):
        parts = urlsplit(server)
        self._prefix = parts.path.rstrip("/")
        self._host, self._port = parts.hostname, parts.port
        self._tls = parts.scheme == "https"
        self._connect = track(http.client.HTTPSConnection if self._tls else http.client.HTTPConnection)
        self._context = ssl.create_default_context() if self._tls else None
        self._local = threading.local()

    def call(self, method: str, path: str, data: Optional[bytes], headers: dict,
             timeout: float) -> Optional[tuple[int, str, object, bytes]]:
        """(status, reason, headers, body); None for a redirect (the caller follows it another way). Network
        errors are raised as OSError or http.client.HTTPException."""
        for attempt in (1, 2):
            connection, reused = self._connection(timeout)
            try:
                connection.request(method, self._prefix + path, body=data, headers=headers)
                response = connection.getresponse()
                raw = response.read()
            except _STALE:
                self._drop()
                if reused and attempt == 1:
                    continue
                raise
            except (OSError, http.client.HTTPException):
                self._drop()
                raise
            if response.will_close:
                self._drop()
            if 300 <= response.status < 400:
                return None
            return response.status, response.reason, response.headers, raw
        raise http.client.HTTPException("unreachable")  # the loop always returns or raises

    def _connection(self, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        connection = getattr(self._local, "connection", None)
        if connection is not None and connection.sock is not None:
            connection.sock.settimeout(timeout)
            return connection, True
        kwargs = {"timeout": timeout, **({"context": self._context} if self._tls else {})}
        connection = self._connect(self._host, port=self._port, **kwargs)
        self._local.connection = connection
        return connection, False

    def _drop(self) -> None:
        connection = getattr(self._local, "connection", None)
        self._local.connection = None
        if connection is not None:
            connection.close()
