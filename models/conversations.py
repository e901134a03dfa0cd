"""Conversations as agent runtimes name them, and their messages in order."""

from __future__ import annotations

from peewee import fn

from models.compiled import Compiled, with_id
from models.db import iso, utcnow
from models.tables import ACTIVE, Conversation, Message, Monitor, User



def conversation_for(user: User, external_id: str, channel: str, agent_id: str,
                     coalesce_seconds: int | None = None) -> Conversation:
    """The user's conversation with this id, created on first use. Ids are the runtime's own, unique per
    account: another account's conversation of the same id is a different one, and never seen from here.
    `coalesce_seconds` (context.coalesce_seconds, checked by the caller) sets its own wake coalescing window;
    None leaves it as it is. One this call created has `created_now` set (not stored), so its caller can announce
    it to the owner's open pages (tasks/events.announce_conversation)."""
    conv = Conversation.get_or_none((Conversation.user == user) & (Conversation.external_id == external_id))
    if conv is None:
        conv, created = Conversation.get_or_create(
            user=user, external_id=external_id,
            defaults={"channel": channel, "agent_id": agent_id, "title": external_id[:200],
                      "coalesce_seconds": coalesce_seconds})
        conv.created_now = created
    if coalesce_seconds is not None and conv.coalesce_seconds != coalesce_seconds:
        Conversation.update(coalesce_seconds=coalesce_seconds).where(Conversation.id == conv.id).execute()
        conv.coalesce_seconds = coalesce_seconds
    return conv


def find_conversation(user: User, external_id: str) -> Conversation | None:
    if "\x00" in external_id:  # none is ever stored (PostgreSQL text can't hold NUL), and the query would fail
        return None
    return Conversation.get_or_none((Conversation.external_id == external_id) & (Conversation.user == user))


_NEW_MESSAGE = Compiled(lambda conversation_id, role, content, metadata, created_at: with_id(Message.insert({
    Message.conversation: conversation_id, Message.role: role, Message.content: content,
    Message.metadata: metadata, Message.created_at: created_at})))
_TOUCH = Compiled(lambda now, conversation_id: Conversation.update({Conversation.updated_at: now})
                  .where(Conversation.id == conversation_id))


def append_message(conversation_id: int, role: str, content: str, metadata: dict) -> Message:
    now = utcnow()
    message_id = _NEW_MESSAGE.inserted_id(conversation_id, role, content, Message.metadata.db_value(metadata), now)
    _TOUCH.rowcount(now, conversation_id)
    return Message(id=message_id, conversation=conversation_id, role=role, content=content, metadata=metadata,
                   created_at=now)


def messages_after(conversation: Conversation, after: int, limit: int = 100) -> list[Message]:
    return list(Message.select().where((Message.conversation == conversation) & (Message.id > after))
                .order_by(Message.id).limit(limit))


def wakes_after(user: User, after: int, conversation: Conversation | None = None,
                limit: int = 100) -> list[tuple[Message, str]]:
    """The account's wakes after a cursor (of one conversation, or all), oldest first, each with its
    conversation's id as the runtime named it."""
    query = (Message.select(Message, Conversation.external_id).join(Conversation)
             .where((Conversation.user == user) & (Message.id > after) & (Message.role == "wake")))
    if conversation is not None:
        query = query.where(Message.conversation == conversation)
    return [(row, row.conversation.external_id) for row in query.order_by(Message.id).limit(limit)]


def latest_message_id() -> int:
    """The newest message's id, any account's: a cursor to follow from now (ids are shared, so it reveals only
    how many messages exist, which a cursor does already)."""
    return Message.select(fn.MAX(Message.id)).scalar() or 0


def user_conversations(user: User) -> list[Conversation]:
    """The user's conversations, newest activity first, each with `.watching` set."""
    conversations = list(Conversation.select().where(Conversation.user == user)
                         .order_by(Conversation.updated_at.desc()).limit(200))
    watched = {row.conversation_id for row in Monitor.select(Monitor.conversation)
               .where((Monitor.user == user) & (Monitor.status == ACTIVE))}
    for conv in conversations:
        conv.watching = conv.id in watched
    return conversations


def is_watching(conversation_id: int) -> bool:
    return Monitor.select().where((Monitor.conversation == conversation_id)
                                  & (Monitor.status == ACTIVE)).exists()


def message_json(message: Message) -> dict:
    return {"id": message.id, "role": message.role, "content": message.content,
            "metadata": message.metadata or {}, "created_at": iso(message.created_at)}
