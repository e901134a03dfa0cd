"""A worker's view of the owner's MCP connections: each connection's tool listing, cached for at most one poll
interval of the watch asking, and the calls themselves (adapters/mcp_client.py). No database connection is held
across either: the callers read what they need first."""

from __future__ import annotations

import threading
import time

from adapters.mcp_client import McpTool, call_tool, list_tools
from engine.addresses import Own
from engine.egress import Egress

#: (connection id, url) -> (listed at, monotonic; the tools)
_listings: dict[tuple[int, str], tuple[float, list[McpTool]]] = {}
_lock = threading.Lock()
#: connections are few per worker; past this the oldest listings go
MAX_CACHED = 256


def listing(connection_id: int, url: str, token: str | None, max_age: float, allow_loopback: bool,
            timeout: float = 10.0, own: Own | None = None, egress: Egress | None = None) -> list[McpTool]:
    """The connection's tools, listed again when the cached listing is older than `max_age`; raises McpError."""
    key = (connection_id, url)
    with _lock:
        cached = _listings.get(key)
    if cached is not None and time.monotonic() - cached[0] <= max_age:
        return cached[1]
    tools = list_tools(url, token, timeout=timeout, allow_loopback=allow_loopback, own=own, egress=egress)
    with _lock:
        if len(_listings) >= MAX_CACHED:
            _listings.pop(min(_listings, key=lambda k: _listings[k][0]))
        _listings[key] = (time.monotonic(), tools)
    return tools


def forget(connection_id: int) -> None:
    with _lock:
        for key in [k for k in _listings if k[0] == connection_id]:
            del _listings[key]


__all__ = ["call_tool", "forget", "listing"]
