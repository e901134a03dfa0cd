"""GET /api/conversations/{id}/messages: a runtime reads what arrived after its cursor."""

from __future__ import annotations

from litestar import Controller, Request, get
from litestar.exceptions import NotFoundException, ValidationException
from litestar.params import FromPath, FromQuery

from app.auth import token_user
from app.openapi import MessagePage, errors
from models import connection
from models.conversations import find_conversation, message_json, latest_message_id, messages_after, wakes_after

MAX_LIMIT = 500


class ConversationsController(Controller):
    path = "/api/conversations"

    @get("/{conversation_id:str}/messages", sync_to_thread=True, responses=errors(400, 401, 404))
    def messages(self, request: Request, conversation_id: FromPath[str], after: FromQuery[str] = "0",
                 limit: FromQuery[int] = 100) -> MessagePage:
        cursor = _cursor(after)
        if not 1 <= limit <= MAX_LIMIT:
            raise ValidationException(f"limit must be between 1 and {MAX_LIMIT}.")
        with connection():
            user = token_user(request)
            conversation = find_conversation(user, conversation_id)
            if conversation is None:
                raise NotFoundException("No conversation with this id under your token.")
            messages = messages_after(conversation, cursor, limit)
        next_cursor = str(messages[-1].id) if messages else str(cursor)
        return {"messages": [message_json(m) for m in messages], "next_cursor": next_cursor}


class WakesController(Controller):
    @get("/api/wakes", sync_to_thread=True, responses=errors(400, 401))
    def wakes(self, request: Request, after: FromQuery[str] = "0", conversation_id: FromQuery[str | None] = None,
              limit: FromQuery[int] = 100) -> MessagePage:
        """The account's wakes after a cursor, every conversation's (or one's), each with its conversation_id:
        what `vigil watch` catches up on after a reconnect."""
        with connection():
            return wake_page(token_user(request), conversation_id, after, limit)


def wake_page(user, conversation_id: str | None, after: str, limit: int) -> dict:
    """Wakes after the cursor (`latest`: none, and the cursor of the newest, to follow from now); a conversation
    that has none yet (or isn't this account's) has an empty page."""
    cursor = latest_message_id() if after == "latest" else _cursor(after)
    if after == "latest":
        return {"messages": [], "next_cursor": str(cursor)}
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValidationException(f"limit must be between 1 and {MAX_LIMIT}.")
    conversation = None
    if conversation_id is not None:
        conversation = find_conversation(user, conversation_id)
        if conversation is None:
            return {"messages": [], "next_cursor": str(cursor)}
    found = wakes_after(user, cursor, conversation, limit)
    return {"messages": [{"conversation_id": external, **message_json(m)} for m, external in found],
            "next_cursor": str(found[-1][0].id) if found else str(cursor)}


def _cursor(after: str) -> int:
    if not isinstance(after, str) or not (after.isascii() and after.isdigit()) or len(after) > 18:
        raise ValidationException("after must be a cursor returned as next_cursor (or 0 for the start).")
    return int(after)
