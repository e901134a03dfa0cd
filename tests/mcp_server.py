"""A real MCP server for tests: the official SDK's MCPServer over Streamable HTTP on 127.0.0.1.

    with serve_mcp() as server:
        server.status = "closed"
        mcp_client.call_tool(server.url, None, "get_status", {"ticket": "T-1"}, allow_loopback=True)
        assert server.calls["get_status"] == 1

Tools on offer (pick with `tools=`; the first three are the default):

- `get_status(ticket)`  readOnlyHint: returns {"ticket": ticket, "status": server.status}
- `bump(n)`             no hints (not read-only): adds n to server.counter and returns it
- `wipe()`              destructiveHint: sets server.counter to 0
- `explode(reason)`     raises a ToolError: the result comes back with isError set
- `refuse()`            raises an MCPError: a JSON-RPC error, not a result

With `page_size=` tools/list answers that many tools a page, with nextCursor for the rest.
`list_twice(name)` makes tools/list show that tool twice (as a server that merges two backends can),
while tools/call keeps running the one registered.
`reshape_get_status()` re-registers get_status with an extra argument, so its inputSchema (and a
fingerprint of it) changes while the server keeps running. With `token=` every request needs
`Authorization: Bearer <token>`; anything else is answered 401 by the SDK's bearer middleware.
"""

from __future__ import annotations

import hmac
import logging
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from mcp.server import MCPServer
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, ListToolsResult, ToolAnnotations

DEFAULT_TOOLS = ("get_status", "bump", "wipe")
READ_ONLY = ToolAnnotations(read_only_hint=True)
DESTRUCTIVE = ToolAnnotations(destructive_hint=True)


class _OneToken:
    """The SDK's TokenVerifier protocol: accepts exactly one bearer token."""

    def __init__(self, token: str) -> None:
        self._token = token

    async def verify_token(self, token: str) -> AccessToken | None:
        if hmac.compare_digest(token.encode(), self._token.encode()):
            return AccessToken(token=token, client_id="vigil-tests", scopes=[])
        return None


class _PagingServer(MCPServer):
    """MCPServer lists every tool in one page; this one pages them when page_size is set."""

    page_size: int | None = None
    #: names listed twice (McpTestServer.list_twice)
    listed_twice: frozenset[str] = frozenset()

    async def _handle_list_tools(self, ctx, params) -> ListToolsResult:
        tools = await self.list_tools()
        tools += [tool for tool in tools if tool.name in self.listed_twice]
        if not self.page_size:
            return ListToolsResult(tools=tools)
        start = int(params.cursor) if params is not None and params.cursor else 0
        end = start + self.page_size
        return ListToolsResult(tools=tools[start:end], next_cursor=str(end) if end < len(tools) else None)


class McpTestServer:
    """One MCPServer in a uvicorn thread on a free port; `url` is its endpoint (…/mcp)."""

    def __init__(self, tools: tuple[str, ...] = DEFAULT_TOOLS, *, token: str | None = None,
                 json_response: bool = False, page_size: int | None = None) -> None:
        #: what get_status reports; tests change it between calls
        self.status = "open"
        #: what bump adds to and wipe resets
        self.counter = 0
        #: calls answered, per tool name
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._mcp = _quiet_server(token)
        self._mcp.page_size = page_size
        for name in tools:
            self._register(name)
        app = self._mcp.streamable_http_app(stateless_http=True, json_response=json_response)
        self._socket = socket.create_server(("127.0.0.1", 0))
        self._uvicorn = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on",
                                                      timeout_graceful_shutdown=1))
        self._thread = threading.Thread(target=self._uvicorn.run, kwargs={"sockets": [self._socket]},
                                        name="mcp-test-server", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._socket.getsockname()[1]}/mcp"

    def start(self) -> McpTestServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._uvicorn.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the MCP test server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._uvicorn.should_exit = True
        self._thread.join(timeout=5)
        self._socket.close()

    def reshape_get_status(self) -> None:
        """get_status now also takes `verbose: bool = False`: same name, a different inputSchema."""
        def get_status(ticket: str, verbose: bool = False) -> dict[str, str]:
            """The status of a support ticket, with more detail when verbose."""
            self._count("get_status")
            detail = {"detail": f"{ticket} is {self.status}"} if verbose else {}
            return {"ticket": ticket, "status": self.status, **detail}
        self._mcp.remove_tool("get_status")
        self._mcp.add_tool(get_status, annotations=READ_ONLY)

    def list_twice(self, name: str) -> None:
        """tools/list shows `name` twice from now on."""
        self._mcp.listed_twice = self._mcp.listed_twice | {name}

    def _count(self, name: str) -> None:
        with self._lock:
            self.calls[name] += 1

    def _register(self, name: str) -> None:
        def get_status(ticket: str) -> dict[str, str]:
            """The status of a support ticket."""
            self._count("get_status")
            return {"ticket": ticket, "status": self.status}

        def bump(n: int) -> int:
            """Add n to the counter and return the new value."""
            self._count("bump")
            with self._lock:
                self.counter += n
                return self.counter

        def wipe() -> str:
            """Reset the counter to zero."""
            self._count("wipe")
            self.counter = 0
            return "wiped"

        def explode(reason: str) -> str:
            """Always fails, as a tool whose backend is down does."""
            self._count("explode")
            raise ToolError(f"the ticket system is down: {reason}")

        def refuse() -> str:
            """Always answers a JSON-RPC error instead of a result."""
            self._count("refuse")
            raise MCPError(code=INVALID_PARAMS, message="refuse does not take calls today")

        catalogue = {"get_status": (get_status, READ_ONLY), "bump": (bump, None),
                     "wipe": (wipe, DESTRUCTIVE), "explode": (explode, None), "refuse": (refuse, None)}
        fn, annotations = catalogue[name]
        self._mcp.add_tool(fn, annotations=annotations)


def _quiet_server(token: str | None) -> _PagingServer:
    """MCPServer() calls logging.basicConfig (a rich handler on the root logger): undo that here."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        if token is None:
            return _PagingServer("vigil-test-tools", log_level="WARNING")
        auth = AuthSettings(issuer_url="http://127.0.0.1/", resource_server_url=None)
        return _PagingServer("vigil-test-tools", log_level="WARNING", token_verifier=_OneToken(token),
                             auth=auth)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


@contextmanager
def serve_mcp(tools: tuple[str, ...] = DEFAULT_TOOLS, *, token: str | None = None,
              json_response: bool = False, page_size: int | None = None) -> Iterator[McpTestServer]:
    server = McpTestServer(tools, token=token, json_response=json_response, page_size=page_size).start()
    try:
        yield server
    finally:
        server.stop()
