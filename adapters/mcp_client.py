"""Vigil's synchronous client of the owner's MCP servers: tools/list and tools/call over Streamable HTTP.

A thin facade over the official SDK (`mcp` 2.x): each call opens one MCP session (negotiating the protocol
era the SDK's way), does its one job and closes it, inside `anyio.run`, so it suits worker and web threads
that have no running event loop. It must not be called from a thread that is running one.

Every connection the SDK's httpx2 client opens goes through engine/http.py's SSRF rules at connect time:
the host is resolved and every address checked by `resolve_guarded` (never Vigil itself), then connected to by
address (TLS still verifies the URL's host name); with OUTBOUND_PROXY, checked the same way and then asked of the
operator's proxy (engine/egress.py). Env proxies are ignored, redirects are followed only within the
endpoint's origin (the SDK's rule), and one call reads at most MAX_RESPONSE_BYTES. The bearer token is sent
as a header only: it is never logged and is scrubbed from every error message, even one a hostile server
echoes back.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import ssl
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
import certifi
import httpcore2
import httpx2
import mcp_types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from engine.addresses import Own, check_url, resolve_guarded
from engine.egress import Egress, Proxy
from engine.errors import BlockedURL, FetchError

log = logging.getLogger(__name__)

#: Most bytes one list_tools/call_tool reads from the server, over all its HTTP responses.
MAX_RESPONSE_BYTES = 4 * 1024 * 1024
#: Most tools/list pages followed before the listing is called endless.
MAX_PAGES = 50
_TRANSIENT = frozenset({429, 502, 503, 504})
_HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
_CLIENT_INFO = mcp_types.Implementation(name="vigil", version="0.1")
_T = TypeVar("_T")


@dataclass(frozen=True)
class McpTool:
    name: str
    title: str | None
    description: str
    input_schema: dict
    #: only the hints the server set, by their wire names (readOnlyHint, …); hints, never trusted
    annotations: dict


@dataclass(frozen=True)
class McpResult:
    is_error: bool
    #: the text content items, joined by newlines
    text: str
    #: structuredContent, or None
    structured: object | None


class McpError(Exception):
    """A list or call that could not be done; `message` is one sentence for the model or the owner.

    `kind` is one of "blocked" (the URL, or an SSRF refusal), "unreachable", "timeout", "not_mcp", "auth",
    "protocol" (the server answered with an MCP error); `unreachable` is True for the two that may pass.
    """

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.message = message
        self.kind = kind

    @property
    def unreachable(self) -> bool:
        return self.kind in ("unreachable", "timeout")


def list_tools(url: str, bearer_token: str | None, timeout: float = 10.0, *,
               allow_loopback: bool = False, own: Own | None = None, egress: Egress | None = None) -> list[McpTool]:
    """Every tool the server lists, following pagination cursors. `own` is Vigil itself, never connected to;
    `egress` the operator's proxy (OUTBOUND_PROXY), which the connections go through after the guard."""
    return _run(url, bearer_token, timeout, (allow_loopback, own, egress), _list_all, "list its tools")


def call_tool(url: str, bearer_token: str | None, name: str, arguments: dict, timeout: float = 25.0, *,
              allow_loopback: bool = False, own: Own | None = None, egress: Egress | None = None) -> McpResult:
    """One tools/call; a tool that failed is a result with is_error, not an McpError."""
    action = functools.partial(_call, name=name, arguments=arguments)
    return _run(url, bearer_token, timeout, (allow_loopback, own, egress), action, f"run '{name}'")


async def _list_all(client: Client) -> list[McpTool]:
    tools, cursor, seen = [], None, set()
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(_tool(tool) for tool in page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools
        if cursor in seen:
            raise _ListingLoop("repeated a page cursor")
        seen.add(cursor)
    raise _ListingLoop(f"listed more than {MAX_PAGES} pages of tools")


async def _call(client: Client, name: str, arguments: dict) -> McpResult:
    result = await client.call_tool(name, arguments)
    text = "\n".join(block.text for block in result.content if isinstance(block, mcp_types.TextContent))
    return McpResult(is_error=result.is_error, text=text, structured=result.structured_content)


def _tool(tool: mcp_types.Tool) -> McpTool:
    annotations = tool.annotations
    hints = {} if annotations is None else annotations.model_dump(by_alias=True, exclude_none=True)
    return McpTool(name=tool.name, title=tool.title or (annotations and annotations.title) or None,
                   description=tool.description or "", input_schema=dict(tool.input_schema),
                   annotations={key: value for key, value in hints.items() if key in _HINTS})


# --- running one exchange ---------------------------------------------------------------------------------

@dataclass
class _Trace:
    """What the exchange got to, for the error message: the phase and the last HTTP answer."""

    token_sent: bool = False
    phase: str = "connect"
    status: int | None = None
    content_type: str = ""


class _ListingLoop(Exception):
    """tools/list pagination that does not end."""


class _TooLarge(Exception):
    """The server sent more than MAX_RESPONSE_BYTES."""


def _run(url: str, token: str | None, timeout: float, guard: tuple[bool, Own | None, Egress | None],
         action: Callable[[Client], Awaitable[_T]], asked: str) -> _T:
    """Run `action` on a connected client; `asked` completes "the server was asked to …" in errors."""
    try:
        check_url(url)
    except BlockedURL as exc:
        raise McpError(exc.message, "blocked") from None
    trace = _Trace(token_sent=bool(token))
    try:
        # in a context of its own: a web handler's worker thread inherits the request's context variables, in
        # which sniffio reads "asyncio is running here" although this thread runs no loop
        return contextvars.Context().run(anyio.run, _exchange, url, token, timeout, guard, action, trace)
    except Exception as exc:  # the SDK's task groups hand errors back wrapped in ExceptionGroups
        error = _translate(exc, url, token, timeout, trace, asked)
        if error is None:  # not a failure of the server or the network: a bug, so it surfaces as itself
            raise
        log.info("MCP server at %s, asked to %s, failed: %s (phase %s, HTTP %s)", urlsplit(url).netloc,
                 asked, error.kind, trace.phase, trace.status)
        raise error from exc


async def _exchange(url: str, token: str | None, timeout: float, guard: tuple[bool, Own | None, Egress | None],
                    action: Callable[[Client], Awaitable[_T]], trace: _Trace) -> _T:
    async def record(response: httpx2.Response) -> None:
        trace.status = response.status_code
        trace.content_type = response.headers.get("content-type", "").lower()

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with anyio.fail_after(timeout):
        async with httpx2.AsyncClient(transport=_transport(url, *guard), headers=headers,
                                      timeout=httpx2.Timeout(timeout), trust_env=False,
                                      event_hooks={"response": [record]}) as http:
            transport = streamable_http_client(url, http_client=http)
            async with Client(transport, cache=None, read_timeout_seconds=timeout,
                              client_info=_CLIENT_INFO) as client:
                trace.phase = "request"
                return await action(client)


# --- errors -------------------------------------------------------------------------------------------------

def _translate(exc: BaseException, url: str, token: str | None, timeout: float, trace: _Trace,
               asked: str) -> McpError | None:
    found = _classify(list(_flatten(exc)), urlsplit(url).netloc, timeout, trace, asked)
    if found is not None and token and token in found.message:
        return McpError(found.message.replace(token, "[the token]"), found.kind)
    return found


def _classify(errors: list[BaseException], host: str, timeout: float, trace: _Trace,
              asked: str) -> McpError | None:
    def first(*types: type) -> Any:
        return next((e for e in errors if isinstance(e, types)), None)

    if blocked := first(BlockedURL):
        return McpError(blocked.message, "blocked")
    if unresolved := first(FetchError):
        return McpError(f"Could not connect to the MCP server at {host}: {_lower(unresolved.message)}",
                        "unreachable")
    if trace.status in (401, 403):
        return _auth_error(host, trace.status, trace.token_sent)
    if first(TimeoutError, httpx2.TimeoutException) or _codes(errors) & {mcp_types.REQUEST_TIMEOUT}:
        return McpError(f"The MCP server at {host} did not answer within {timeout:g} seconds.", "timeout")
    if first(ssl.SSLError):
        return McpError(f"The secure connection to the MCP server at {host} failed (certificate or TLS "
                        "problem).", "unreachable")
    if first(httpx2.ConnectError):
        return McpError(f"Could not connect to the MCP server at {host}; check the address and that the "
                        "server is running.", "unreachable")
    if first(_TooLarge):
        return McpError(f"The MCP server at {host} sent more than {MAX_RESPONSE_BYTES / 2**20:g} MiB when "
                        f"asked to {asked}; Vigil stopped reading.", "protocol")
    if loop := first(_ListingLoop):
        return McpError(f"The MCP server at {host} {loop}; its tool listing never ends.", "protocol")
    if first(httpx2.TransportError):
        return McpError(f"The connection to the MCP server at {host} broke when it was asked to {asked}.",
                        "unreachable")
    # the SDK raises RuntimeError for a result that breaks the tool's output schema; before the session is
    # up a RuntimeError is ours (anyio.run inside a running loop, say) and must surface
    unusable = first(ValidationError) or (first(RuntimeError) if trace.phase == "request" else None)
    return _answer_error(first(MCPError), unusable, host, trace, asked)


def _answer_error(mcp_error: MCPError | None, unusable: Exception | None, host: str, trace: _Trace,
                  asked: str) -> McpError | None:
    """The server answered, but not with what was asked for."""
    if mcp_error is None and unusable is None:
        return None
    if mcp_error is not None and not _answered_json_rpc(trace) and trace.status in _TRANSIENT:
        return McpError(f"The MCP server at {host} answered HTTP {trace.status} when asked to {asked}; it "
                        "may be down or overloaded, so try again later.", "unreachable")
    if trace.phase == "connect":
        return _not_mcp(host, trace, mcp_error)
    if mcp_error is not None and _answered_json_rpc(trace):
        return McpError(f"The MCP server at {host} refused to {asked}: {_clip(mcp_error.error.message)}",
                        "protocol")
    answer = f"HTTP {trace.status}" if mcp_error is not None else "a reply that is not valid MCP"
    return McpError(f"The MCP server at {host} answered {answer} when asked to {asked}.", "protocol")


def _auth_error(host: str, status: int, token_sent: bool) -> McpError:
    if status == 401 and not token_sent:
        return McpError(f"The MCP server at {host} requires a bearer token (401 Unauthorized); add one to the "
                        "connection.", "auth")
    if status == 401:
        return McpError(f"The MCP server at {host} refused the credentials (401 Unauthorized); check or "
                        "replace the connection's bearer token.", "auth")
    return McpError(f"The MCP server at {host} refused access (403 Forbidden); the connection's token does "
                    "not have the access it needs.", "auth")


def _not_mcp(host: str, trace: _Trace, error: MCPError | None) -> McpError:
    if error is not None and error.code == mcp_types.UNSUPPORTED_PROTOCOL_VERSION:
        return McpError(f"The MCP server at {host} speaks only MCP versions this Vigil does not support.",
                        "not_mcp")
    answer = f" (it answered HTTP {trace.status})" if trace.status else ""
    return McpError(f"The server at {host} did not answer as an MCP server{answer}; check that the URL is "
                    "its Streamable HTTP endpoint, often ending in /mcp.", "not_mcp")


def _answered_json_rpc(trace: _Trace) -> bool:
    """Whether the last answer could have carried a JSON-RPC error (rather than the SDK making one up)."""
    json_or_sse = trace.content_type.startswith(("application/json", "text/event-stream"))
    return trace.status is not None and json_or_sse and (trace.status < 400
                                                          or trace.content_type.startswith("application/json"))


def _codes(errors: list[BaseException]) -> set[int]:
    return {e.code for e in errors if isinstance(e, MCPError)}


def _flatten(exc: BaseException) -> Iterator[BaseException]:
    """The error, the members of exception groups, and their causes, each once."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        error = todo.pop(0)
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        yield error
        todo.extend(getattr(error, "exceptions", ()))
        todo.extend([error.__cause__, error.__context__])


def _lower(sentence: str) -> str:
    return sentence[:1].lower() + sentence[1:]


def _clip(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    text = text if len(text) <= limit else text[:limit - 1] + "…"
    return text if text.endswith((".", "!", "?", "…")) else text + "."


# --- the guarded transport --------------------------------------------------------------------------------

@functools.cache
def _tls_context() -> ssl.SSLContext:
    return ssl.create_default_context(cafile=certifi.where())  # verifies the certificate and host name


class _GuardedTransport(httpx2.AsyncHTTPTransport):
    """httpx2's transport with its connection pool built on _GuardedBackend.

    httpx2 does not take a network backend, so the pool it built is replaced; the MCP tests' SSRF case
    fails if a later httpx2 stops using `_pool`.
    """

    def __init__(self, allow_loopback: bool, own: Own | None = None) -> None:
        super().__init__(trust_env=False)
        self._pool = httpcore2.AsyncConnectionPool(ssl_context=_tls_context(), max_connections=4,
                                                   network_backend=_GuardedBackend(allow_loopback, own))


def _transport(url: str, allow_loopback: bool, own: Own | None, egress: Egress | None) -> httpx2.AsyncHTTPTransport:
    """The guarded transport, or the proxied one when OUTBOUND_PROXY is set and NO_PROXY doesn't name the host (an
    exchange stays on the endpoint's origin: the SDK follows redirects within it only)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    proxy = egress.proxy_for(parts.hostname or "", port) if egress else None
    if proxy is None:
        return _GuardedTransport(allow_loopback, own)
    return _ProxiedTransport(proxy, allow_loopback, own)


class _ProxiedTransport(httpx2.AsyncHTTPTransport):
    """httpx2's transport through the operator's proxy (absolute-form http, CONNECT for https; TLS still verified
    for the url's host), each request's destination checked by resolve_guarded before the proxy is asked."""

    def __init__(self, proxy: Proxy, allow_loopback: bool, own: Own | None = None) -> None:
        super().__init__(trust_env=False)
        self._allow_loopback, self._own = allow_loopback, own
        headers = [(b"Proxy-Authorization", proxy.authorization.encode("latin-1"))] if proxy.authorization else []
        self._pool = httpcore2.AsyncHTTPProxy(
            proxy_url=httpcore2.URL(scheme=b"http", host=proxy.host.encode("ascii"), port=proxy.port, target=b"/"),
            proxy_headers=headers, ssl_context=_tls_context(), max_connections=4,
            network_backend=_GuardedBackend(allow_loopback, own, guard=False))

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        port = request.url.port or (443 if request.url.scheme == "https" else 80)
        await anyio.to_thread.run_sync(resolve_guarded, request.url.host, port, self._allow_loopback, self._own,
                                       abandon_on_cancel=True)
        return await super().handle_async_request(request)


class _GuardedBackend(httpcore2.AsyncNetworkBackend):
    """Resolves the host and checks every address (engine.addresses.resolve_guarded: never Vigil itself), then
    connects by address."""

    def __init__(self, allow_loopback: bool, own: Own | None = None, guard: bool = True) -> None:
        """`guard` False: the connections go to the operator's proxy (what they carry is checked before)."""
        self._allow_loopback, self._own, self._guard = allow_loopback, own, guard
        self._inner = httpcore2.AnyIOBackend()
        self._budget = [MAX_RESPONSE_BYTES]  # shared by every connection of this exchange

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore2.AsyncNetworkStream:
        if not self._guard:
            stream = await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
            return _CountedStream(stream, self._budget)
        addresses = await anyio.to_thread.run_sync(resolve_guarded, host, port, self._allow_loopback,
                                                   self._own, abandon_on_cancel=True)
        error: Exception = httpcore2.ConnectError(f"no address for {host}")
        for address in addresses:
            try:
                stream = await self._inner.connect_tcp(address, port, timeout, local_address, socket_options)
                return _CountedStream(stream, self._budget)
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                error = exc
        raise error

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> httpcore2.AsyncNetworkStream:
        raise BlockedURL("Unix sockets may not be used for MCP connections.")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _CountedStream(httpcore2.AsyncNetworkStream):
    """A connection that stops reading once the exchange's byte budget is spent."""

    def __init__(self, stream: httpcore2.AsyncNetworkStream, budget: list[int]) -> None:
        self._stream = stream
        self._budget = budget

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = await self._stream.read(max_bytes, timeout)
        self._budget[0] -= len(data)
        if self._budget[0] < 0:
            raise _TooLarge()
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._stream.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore2.AsyncNetworkStream:
        stream = await self._stream.start_tls(ssl_context, server_hostname, timeout)
        return _CountedStream(stream, self._budget)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)
