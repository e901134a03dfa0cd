"""GET /api/conversations/{id}/messages: a runtime reads what arrived after its cursor."""

from __future__ import annotations

from litestar import Controller, Request, get
from litestar.exceptions import NotFoundException, ValidationException
from litestar.params import FromPath, FromQuery

from app.auth import token_user
from app.openapi import MessagePage, errors
from models import connection
from models.conversations import find_conversation, message_json, messages_after

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


def _cursor(after: str) -> int:
    if not after.isdigit() or len(after) > 18:
        raise ValidationException("after must be a cursor returned as next_cursor (or 0 for the start).")
    return int(after)
