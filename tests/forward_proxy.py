"""A small real forward proxy on 127.0.0.1 for tests, standing for an operator's egress proxy (Smokescreen, Squid):
CONNECT tunnels and absolute-form plain http, connecting by the name it was asked for. It records what it carried
(method, host:port, the request target and whether it was authorized), so a test can show a request went through
it; `require` makes it answer 407 without the right Proxy-Authorization, `deny` 403 for the hosts listed."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Carried:
    method: str
    host: str
    port: int
    target: str
    authorization: str


class ForwardProxy:
    def __init__(self, require: str = "", deny: tuple[str, ...] = ()) -> None:
        self.require, self.deny = require, deny
        self.carried: list[Carried] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def port(self) -> int:
        return self._listener.getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def hosts(self) -> list[str]:
        return [f"{c.host}:{c.port}" for c in self.carried]

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def __enter__(self) -> ForwardProxy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(client,), daemon=True).start()

    def _handle(self, client: socket.socket) -> None:
        client.settimeout(10)
        try:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = client.recv(65536)
                if not chunk:
                    client.close()
                    return
                head += chunk
            head, _, rest = head.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
            if method == "CONNECT":
                host, _, port = target.rpartition(":")
                host, port = host.strip("[]"), int(port)
            else:
                parts = urlsplit(target)
                host, port = parts.hostname, parts.port or 80
            authorization = headers.get("proxy-authorization", "")
            self.carried.append(Carried(method, host, port, target, authorization))
            if self.require and authorization != self.require:
                client.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
                client.close()
                return
            if host in self.deny:
                client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 6\r\n\r\ndenied")
                client.close()
                return
            upstream = socket.create_connection((host, port), timeout=10)
            if method == "CONNECT":
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                path = urlsplit(target)
                origin = (path.path or "/") + (f"?{path.query}" if path.query else "")
                kept = [line for line in lines[1:] if not line.lower().startswith("proxy-")]
                upstream.sendall("\r\n".join([f"{method} {origin} HTTP/1.1", *kept]).encode("latin-1")
                                 + b"\r\n\r\n")
            if rest:
                upstream.sendall(rest)
        except (OSError, ValueError):
            client.close()
            return
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
