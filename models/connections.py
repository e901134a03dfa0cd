"""MCP connections (Settings → Connections) and the watches of their tools.

Only the owner's browser session adds or removes a connection; a runtime token never can. Listing and calling a
connection's tools is network I/O, done by the callers (app/, tasks/) with adapters/mcp_client.py and no database
connection held: what reaches this module is the listing they got.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace
from datetime import datetime

import peewee

from engine.addresses import check_url
from engine.crypto import Keyring
from engine.errors import BlockedURL, SpecError
from engine.spec import MonitorSpec
from engine.tools import check_mcp_arguments, mcp_fingerprint
from models.db import iso, write_transaction
from models.tables import McpConnection, User
from models.tools import ToolRefused, connection_key, end_watches

_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")


def check_connection(name: object, url: object) -> tuple[str, str]:
    """A connection's name and URL, checked; raises ToolRefused."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ToolRefused("name must be 1–40 lower-case letters, digits, _ or -, starting with a letter or digit.")
    if not isinstance(url, str) or not url.strip():
        raise ToolRefused("url is required: the MCP server's Streamable HTTP address, e.g. https://mcp.example.com/mcp.")
    try:
        check_url(url.strip())
    except BlockedURL as exc:
        raise ToolRefused(f"url can't be used: {exc.message}") from None
    return name, url.strip()


def add_connection(user: User, name: str, url: str, token: str | None, keyring: Keyring,
                   now: datetime) -> McpConnection:
    try:
        with write_transaction():
            return McpConnection.create(user=user.id, name=name, url=url,
                                        token_encrypted=keyring.encrypt(token) if token else "", created_at=now)
    except peewee.IntegrityError:
        raise ToolRefused(f"There is a connection named {name!r} already; remove it first or pick another name.",
                          409) from None


def remove_connection(user: User, name: str, now: datetime) -> list:
    """Remove it; every watch of its tools ends and says so. Returns them with their wakes."""
    with write_transaction():
        row = find_connection(user.id, name)
        if row is None:
            raise ToolRefused(f"There is no connection {name!r}.", 404)
        row.delete_instance()
        return end_watches(f"tool:{user.id}:@{name}:%", f"The MCP connection {name!r} was removed, so the watch "
                           "stopped.", now, like=True)


def find_connection(user_id: int, name: str) -> McpConnection | None:
    return McpConnection.get_or_none((McpConnection.user == user_id) & (McpConnection.name == name))


def user_connections(user: User) -> list[McpConnection]:
    return list(McpConnection.select().where(McpConnection.user == user.id).order_by(McpConnection.name))


def connection_json(row: McpConnection) -> dict:
    """Never the token: only whether there is one."""
    return {"name": row.name, "url": row.url, "has_token": bool(row.token_encrypted),
            "created_at": iso(row.created_at)}


def credentials(row: McpConnection, keyring: Keyring) -> tuple[str, str | None]:
    return row.url, keyring.decrypt(row.token_encrypted) if row.token_encrypted else None


def pick_tool(listing: list, connection: str, name: str):
    """The one tool of that name in a connection's listing; ToolRefused when it is missing or listed twice."""
    found = [tool for tool in listing if tool.name == name]
    if not found:
        names = ", ".join(repr(t.name) for t in listing[:20]) or "none"
        raise ToolRefused(f"The MCP connection {connection!r} has no tool {name!r} (its tools: {names}).")
    if len(found) > 1:
        raise ToolRefused(listed_twice(connection, name))
    return found[0]


def listed_twice(connection: str, name: str) -> str:
    return f"The MCP connection {connection!r} lists two tools named {name!r}; Vigil won't guess which one to run."


def duplicated_names(listing: list) -> list[str]:
    """The tool names a connection's listing shows more than once."""
    return sorted(name for name, times in Counter(tool.name for tool in listing).items() if times > 1)


def end_duplicated_watches(user_id: int, connection: str, listing: list, now: datetime) -> list:
    """As soon as Vigil sees a listing that names a tool twice, every live watch of that name on the connection
    ends, with the notice its own next poll would give. Returns them with their wakes."""
    ended = []
    for name in duplicated_names(listing):
        with write_transaction():
            ended += end_watches(connection_key(user_id, connection, name),
                                 f"{listed_twice(connection, name)} The watch stopped rather than guess.", now)
    return ended


def resolve_connection_watch(user: User, spec: MonitorSpec, listing: list) -> tuple[MonitorSpec, bool]:
    """The MCP tool a watch names, from the connection's listing: it exists once, isn't destructive, its arguments
    fit. Returns the spec with its fingerprint, and whether the owner must approve it (no readOnlyHint)."""
    source = spec.source
    tool = pick_tool(listing, source.connection, source.tool)
    hints = tool.annotations or {}
    if hints.get("destructiveHint") is True:
        raise ToolRefused(f"The tool {tool.name!r} says it is destructive (destructiveHint), so it can't be watched: "
                          "a watch re-runs it on every poll.")
    try:
        arguments = check_mcp_arguments(tool.name, tool.input_schema, source.arguments)
    except SpecError as exc:
        raise ToolRefused(str(exc)) from None
    fingerprint = mcp_fingerprint(tool.name, tool.input_schema, hints)
    resolved = replace(source, arguments=arguments, tool_fingerprint=fingerprint)
    return replace(spec, source=resolved), hints.get("readOnlyHint") is not True
