"""A TCP proxy on 127.0.0.1 that hands each new connection to the next of several backends in turn, so a
client that opens a connection per request (the runner does) alternates between web processes."""

from __future__ import annotations

import itertools
import socket
import threading
from collections.abc import Sequence


class RoundRobinProxy:
    def __init__(self, backends: Sequence[tuple[str, int]] = ()) -> None:
        self._backends = list(backends)
        self._turn = itertools.count()
        self._lock = threading.Lock()
        self.connections: dict[tuple[str, int], int] = {backend: 0 for backend in backends}
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def add(self, backend: tuple[str, int]) -> None:
        """One more backend, for one whose port is known only once it runs (the proxy's address was needed first)."""
        with self._lock:
            self._backends.append(backend)
            self.connections[backend] = 0

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if not self._backends:
                    client.close()
                    continue
                backend = self._backends[next(self._turn) % len(self._backends)]
                self.connections[backend] += 1
            threading.Thread(target=self._join, args=(client, backend), daemon=True).start()

    def _join(self, client: socket.socket, backend: tuple[str, int]) -> None:
        try:
            upstream = socket.create_connection(backend, timeout=5)
        except OSError:
            client.close()  # that backend is down: the client sees a refused request and retries
            return
        upstream.settimeout(None)
        threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()
        _pipe(client, upstream)


def _pipe(source: socket.socket, target: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        for sock in (source, target):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
