"""The guarded forward proxy a Chromium driven by Vigil must use, so every request a rendered page makes passes the
SSRF guard — the document, its redirects, images, fetch()/XHR, websockets — and DNS rebinding can't get round it.

A browser resolves names and connects by itself; it can't be asked to run Vigil's guard. Told to use this proxy
(`--proxy-server`, or Playwright's `proxy={"server": proxy.url}` at launch or per context), it hands every request
here instead: a CONNECT host:port for https and wss, an absolute-form request (GET http://host/…) for plain http
and ws. For each one the proxy resolves the host, runs engine/addresses.resolve_guarded (no loopback unless
FETCH_ALLOW_LOOPBACK, no private, link-local or metadata address, never Vigil itself — its public origins and
WEB_LISTEN_ADDRESSES, whatever FETCH_ALLOW_LOOPBACK says) and connects to the address it checked, never resolving
again. With OUTBOUND_PROXY set (and NO_PROXY not naming the host) it chains through the operator's proxy instead,
asking it for the host by name as engine/egress.py explains. A refused request is answered 403 with a one-line
reason; nothing is logged but the host and port (a url's query may hold a token).

It listens on BROWSER_PROXY_HOST (127.0.0.1 unless a browser service elsewhere must reach it), and serves only this
machine and BROWSER_CDP_URL's host: anyone else who could reach it would get Vigil's egress.

Playwright adds `<-loopback>` to Chromium's bypass list itself, so loopback addresses go through the proxy too
(Chromium would otherwise reach them directly); don't list localhost or 127.0.0.1 in `bypass`.

Use, from a worker thread or from asyncio code alike (the proxy runs its own event loop in a thread of its own):

    proxy = start_guarded_proxy(settings)            # listening on BROWSER_PROXY_HOST, a port of its own
    browser = playwright.chromium.launch(proxy=proxy.playwright)   # or browser.new_context(proxy=proxy.playwright)
    ...
    proxy.close()                                    # or `with start_guarded_proxy(settings) as proxy:`
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ipaddress
import logging
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from engine.addresses import Own, check_url, resolve_guarded
from engine.egress import MAX_CONNECT_HEAD, Egress, check_connect_answer
from engine.errors import BlockedURL, FetchError

log = logging.getLogger(__name__)

#: bytes moved at a time, and the longest request head a client may send
CHUNK = 65536
MAX_HEAD = 64 * 1024
#: refusals remembered for `GuardedProxy.refusals` (host:port and reason, never a path)
REMEMBERED_REFUSALS = 100
_HOP_BY_HOP = frozenset({b"proxy-authorization", b"proxy-connection", b"connection", b"keep-alive"})


@dataclass(frozen=True)
class Refusal:
    host: str
    port: int
    reason: str


class GuardedProxy:
    """A running guarded proxy: `url` (http://127.0.0.1:<port>) to give the browser, `close()` to stop it.

    Bounded: at most `max_tunnels` client connections at once (one more is answered 503), and a connection on
    which nothing moved either way for `idle_seconds` is closed. `refusals` holds the last few refused requests,
    so a caller can tell a page the guard stopped from a page that failed (say, to report the document itself
    was refused); `carried` and `refused` count requests since start.
    """

    def __init__(self, *, allow_loopback: bool, own: Own | None, egress: Egress | None, max_tunnels: int = 64,
                 idle_seconds: float = 30.0, resolve=resolve_guarded, host: str = "127.0.0.1",
                 clients: Clients | None = None):
        """`host`: the address the proxy listens on and the browser reaches it at; `clients`: who may use it
        besides this machine (loopback peers always may)."""
        self.allow_loopback, self.own, self.egress = allow_loopback, own, egress
        self.host, self.clients = host, clients or Clients()
        self.max_tunnels, self.idle_seconds = max_tunnels, idle_seconds
        self._resolve = resolve
        self.carried = self.refused = self.active = 0
        self.refusals: collections.deque[Refusal] = collections.deque(maxlen=REMEMBERED_REFUSALS)
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="vigil-guarded-proxy", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failed is not None:
            raise self._failed
        self.port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    @property
    def playwright(self) -> dict[str, str]:
        """Playwright's `proxy` option (launch or new_context)."""
        return {"server": self.url}

    @property
    def chromium_args(self) -> list[str]:
        """The switches for a Chromium started by hand (Playwright's `proxy` option adds them itself)."""
        return [f"--proxy-server={self.url}", "--proxy-bypass-list=<-loopback>"]

    def close(self) -> None:
        """Stops listening, closes every connection, ends the proxy's thread. Safe to call twice."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self) -> GuardedProxy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._serve, self.host, 0, limit=MAX_HEAD))
        except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
            self._failed = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._server.close()
            tasks = asyncio.all_tasks(self._loop)
            for task in tasks:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self._loop.run_until_complete(self._loop.shutdown_default_executor())
            self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = (writer.get_extra_info("peername") or ("",))[0]
        # this machine is served at once; only another peer may need a lookup (blocking: off the loop)
        if not _loopback(peer) and not await self._loop.run_in_executor(None, self.clients.allows, peer):
            log.info("browser proxy refused a connection from %s, which is not a client of it", peer)
            await _answer(writer, 403, "Vigil's browser proxy serves this machine and the browser service of "
                                       "BROWSER_CDP_URL only.")
            writer.close()
            return
        if self.active >= self.max_tunnels:
            await _answer(writer, 503, "Too many connections through Vigil's browser proxy; try again shortly.")
            writer.close()
            return
        self.active += 1
        try:
            await self._one(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            self.active -= 1
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.idle_seconds)
        request = _Request.parse(head)
        if request is None:
            await _answer(writer, 400, "Vigil's browser proxy takes CONNECT host:port or an absolute http:// url.")
            return
        try:
            addresses = await self._loop.run_in_executor(
                None, self._resolve, request.host, request.port, self.allow_loopback, self.own)
        except BlockedURL as exc:
            self._refuse(request, exc.message)
            await _answer(writer, 403, f"Refused by Vigil's SSRF guard: {exc.message}")
            return
        except FetchError as exc:
            await _answer(writer, 502, exc.message)
            return
        proxy = self.egress.proxy_for(request.host, request.port) if self.egress else None
        try:
            upstream = await (self._through(proxy, request) if proxy else self._direct(addresses, request))
        except FetchError as exc:
            await _answer(writer, 502, exc.message)
            return
        self.carried += 1
        up_reader, up_writer = upstream
        try:
            if request.method == b"CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
            await self._splice(reader, writer, up_reader, up_writer)
        finally:
            up_writer.close()

    def _refuse(self, request: _Request, reason: str) -> None:
        self.refused += 1
        self.refusals.append(Refusal(request.host, request.port, reason))
        log.info("browser proxy refused %s:%d: %s", request.host, request.port, reason)

    async def _direct(self, addresses: list[str], request: _Request):
        """A connection to the first checked address that takes one, by address (no second resolution)."""
        for address in addresses:
            try:
                upstream = await asyncio.wait_for(asyncio.open_connection(address, request.port), self.idle_seconds)
            except (OSError, asyncio.TimeoutError):
                continue
            if request.method != b"CONNECT":
                upstream[1].write(request.origin_form())
            return upstream
        raise FetchError(f"Could not connect to {request.host}:{request.port}.", unreachable=True)

    async def _through(self, proxy, request: _Request):
        """A connection through the operator's proxy: a CONNECT tunnel, or the request forwarded in absolute form."""
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(proxy.host, proxy.port), self.idle_seconds)
        except (OSError, asyncio.TimeoutError):
            raise FetchError(f"The egress proxy {proxy.shown} (OUTBOUND_PROXY) could not be reached.",
                             unreachable=True) from None
        try:
            if request.method == b"CONNECT":
                up_writer.write(proxy.connect_head(request.host, request.port))
                answer = await asyncio.wait_for(up_reader.readuntil(b"\r\n\r\n"), self.idle_seconds)
                if len(answer) > MAX_CONNECT_HEAD:
                    raise FetchError(f"The egress proxy {proxy.shown} sent too long an answer to CONNECT.")
                check_connect_answer(proxy, answer, request.host, request.port)
            else:
                up_writer.write(request.absolute_form(proxy.authorization))
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            up_writer.close()
            raise FetchError(f"The egress proxy {proxy.shown} did not answer.", unreachable=True) from exc
        except BaseException:
            up_writer.close()
            raise
        return up_reader, up_writer

    async def _splice(self, reader, writer, up_reader, up_writer) -> None:
        """Moves bytes both ways until both ends closed, or nothing moved either way for idle_seconds (then the
        caller closes both). One watch for the idle time per connection, not a timer and a task per chunk moved
        (wait_for): a 100 KiB image through the proxy cost ~0.3 ms less CPU (1.86 → 1.56 ms with its origin and
        client in the same process)."""
        moved = [time.monotonic()]
        pumps = asyncio.gather(self._pump(reader, up_writer, moved), self._pump(up_reader, writer, moved),
                               return_exceptions=True)
        while not pumps.done():
            left = moved[0] + self.idle_seconds - time.monotonic()
            if left <= 0:
                pumps.cancel()
                break
            await asyncio.wait({pumps}, timeout=left)
        with contextlib.suppress(asyncio.CancelledError):
            await pumps

    @staticmethod
    async def _pump(source: asyncio.StreamReader, target: asyncio.StreamWriter, moved: list[float]) -> None:
        try:
            while data := await source.read(CHUNK):
                moved[0] = time.monotonic()
                target.write(data)
                await target.drain()
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                if target.can_write_eof():
                    target.write_eof()
                else:
                    target.close()


class Clients:
    """Who may use a proxy that listens beyond loopback (BROWSER_PROXY_HOST): this machine, and the hosts named —
    the browser service of BROWSER_CDP_URL — by their addresses, looked up again when an unknown peer connects
    (at most every REFRESH_SECONDS: a container's address may change). Anyone else would get Vigil's egress."""

    REFRESH_SECONDS = 30.0

    def __init__(self, hosts: tuple[str, ...] = ()):
        self.hosts = tuple(host for host in hosts if host)
        self._addresses: frozenset[str] = frozenset()
        self._looked = -self.REFRESH_SECONDS
        self._lock = threading.Lock()

    def allows(self, peer: str) -> bool:
        """Whether a connection from `peer` (an address) is served; may resolve the hosts (blocking)."""
        try:
            address = ipaddress.ip_address(peer.split("%")[0])
        except ValueError:
            return False
        if _is_loopback(address):
            return True
        plain = str(address.ipv4_mapped or address) if address.version == 6 else str(address)
        with self._lock:
            if plain in self._addresses or not self.hosts:
                return plain in self._addresses
            if time.monotonic() - self._looked < self.REFRESH_SECONDS:
                return False
            self._looked = time.monotonic()
            self._addresses = frozenset(self._resolve())
            return plain in self._addresses

    def _resolve(self) -> set[str]:
        found = set()
        for host in self.hosts:
            with contextlib.suppress(OSError, UnicodeError):
                found.update(str(info[4][0]).split("%")[0] for info in socket.getaddrinfo(host, None))
        return found


@dataclass(frozen=True)
class _Request:
    method: bytes
    host: str
    port: int
    #: the request target as written (absolute-form), the version and the header lines, for a forwarded request
    target: bytes = b""
    version: bytes = b"HTTP/1.1"
    headers: tuple[bytes, ...] = ()

    @classmethod
    def parse(cls, head: bytes) -> _Request | None:
        """CONNECT host:port, or a request whose target is an absolute http:// url; None for anything else."""
        lines = head.rstrip(b"\r\n").split(b"\r\n")
        parts = lines[0].split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            return None
        method, target, version = parts
        text = target.decode("latin-1")
        url = f"http://{text}/" if method == b"CONNECT" else text
        try:
            if not url.lower().startswith("http://"):
                return None
            check_url(url)
            split = urlsplit(url)
            port = split.port or 80
        except (BlockedURL, ValueError):
            return None
        if method == b"CONNECT" and split.port is None:
            return None
        return cls(method, split.hostname, port, target, version, tuple(lines[1:]))

    def _kept_headers(self) -> list[bytes]:
        kept = [line for line in self.headers if line.split(b":", 1)[0].strip().lower() not in _HOP_BY_HOP]
        upgrade = any(line.split(b":", 1)[0].strip().lower() == b"upgrade" for line in self.headers)
        # one request per connection (the next one on it would go to this checked address whatever its Host);
        # a websocket upgrade keeps its Connection: Upgrade
        kept.append(b"Connection: Upgrade" if upgrade else b"Connection: close")
        return kept

    def origin_form(self) -> bytes:
        """The request as sent to the host itself: path and query only."""
        split = urlsplit(self.target.decode("latin-1"))
        path = (split.path or "/") + (f"?{split.query}" if split.query else "")
        return self._head(path.encode("latin-1"), self._kept_headers())

    def absolute_form(self, authorization: str) -> bytes:
        """The request as sent on to the operator's proxy, with its credentials (the browser has none)."""
        extra = [f"Proxy-Authorization: {authorization}".encode("latin-1")] if authorization else []
        return self._head(self.target, [*self._kept_headers(), *extra])

    def _head(self, target: bytes, headers: list[bytes]) -> bytes:
        return b"\r\n".join([b" ".join((self.method, target, self.version)), *headers]) + b"\r\n\r\n"


def _loopback(peer: str) -> bool:
    """Whether a peer address is this machine (an IPv4-mapped one too)."""
    try:
        return _is_loopback(ipaddress.ip_address(peer.split("%")[0]))
    except ValueError:
        return False


def _is_loopback(address) -> bool:
    return address.is_loopback or (address.version == 6 and address.ipv4_mapped is not None
                                   and address.ipv4_mapped.is_loopback)


async def _answer(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    phrase = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway", 503: "Service Unavailable"}[status]
    body = (text + "\n").encode("utf-8")
    writer.write(f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                 f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("latin-1") + body)
    with contextlib.suppress(OSError):
        await writer.drain()


def own_of(settings) -> Own:
    """Vigil itself as the settings describe it (tasks/runtime.own_endpoints, which adapters/ can't import)."""
    return Own.of((settings.PUBLIC_API_BASE_URL, settings.PUBLIC_APP_URL, settings.API_URL),
                  settings.listen_addresses)


def start_guarded_proxy(settings, *, own: Own | None = None, max_tunnels: int = 64,
                        idle_seconds: float = 30.0) -> GuardedProxy:
    """A GuardedProxy on a free port of BROWSER_PROXY_HOST (127.0.0.1 by default), guarded as the fetcher is by
    `settings`: FETCH_ALLOW_LOOPBACK (for tests and local dashboards), Vigil's own origins (`own`, default from the
    settings), and chained through OUTBOUND_PROXY/NO_PROXY. Beyond loopback it serves only this machine and
    BROWSER_CDP_URL's host. Returns once it listens; call close() when done."""
    cdp_host = urlsplit(getattr(settings, "BROWSER_CDP_URL", "") or "").hostname or ""
    return GuardedProxy(allow_loopback=settings.FETCH_ALLOW_LOOPBACK, own=own if own is not None else own_of(settings),
                        egress=settings.egress, max_tunnels=max_tunnels, idle_seconds=idle_seconds,
                        host=getattr(settings, "BROWSER_PROXY_HOST", "") or "127.0.0.1",
                        clients=Clients((cdp_host,)))
