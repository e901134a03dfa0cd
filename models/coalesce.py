"""Wake coalescing (issue 18): a conversation's wakes within its window reach the agent as one message.

Several monitors of one conversation firing close together would each resume the agent; with a window, the agent
runs once and reads every fact. A conversation coalesces when its own coalesce_seconds (context.coalesce_seconds),
else the WAKE_COALESCE_SECONDS setting, is above 0. Each wake still gets its Wake row, so every fact is deduped on
its own (monitor, dedupe key); instead of a message it is held (held_wakes) until the window that the first held
wake opened closes. The scheduler's tick then delivers what each closed conversation holds as one message, links
every held Wake to it and queues its pushes, in one transaction; a window that held one wake delivers it as the
plain wake it would have been. Held rows are claimed FOR UPDATE SKIP LOCKED on PostgreSQL, so two schedulers
never deliver one twice (SQLite has one writer).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import groupby

from engine.wake import coalesced_metadata, coalesced_text
from models.compiled import Compiled, run_prepared
from models.conversations import append_message
from models.db import database, write_transaction
from models.due import sooner
from models.tables import Conversation, HeldWake, Message, Wake
from models.wake_endpoints import queue_pushes

#: the longest window, for the setting and context.coalesce_seconds alike
MAX_SECONDS = 3600
#: WAKE_COALESCE_SECONDS: the window of a conversation that set none (tasks/runtime.configure sets it)
DEFAULT_SECONDS = 0
#: conversations whose windows one flush closes; the rest wait for the next tick
FLUSH_LIMIT = 100


def coalesce_by_default(seconds: int) -> None:
    global DEFAULT_SECONDS
    DEFAULT_SECONDS = seconds


def seconds_error(value) -> str | None:
    """Why a context.coalesce_seconds can't be used, in one sentence for the runtime; None when it can, or when
    none was given (None)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SECONDS:
        return f"context.coalesce_seconds must be a whole number of seconds from 0 (off) to {MAX_SECONDS}."
    return None


def window(own: int | None, default: int) -> int:
    """The conversation's window: its own when it set one (0 turns coalescing off for it), else the default."""
    return default if own is None else own


def due_at(open_due: datetime | None, now: datetime, seconds: int) -> datetime:
    """When a wake held at `now` is delivered: with the window already open, else at the end of one opening now."""
    return open_due if open_due is not None else now + timedelta(seconds=seconds)


_OWN_WINDOW = Compiled(lambda conversation_id: Conversation.select(Conversation.coalesce_seconds)
                       .where(Conversation.id == conversation_id))


def window_seconds(conversation_id: int) -> int:
    return window(_OWN_WINDOW.scalar(conversation_id), DEFAULT_SECONDS)


def hold(wake_id: int, conversation_id: int, user_id: int, content: str, metadata: dict, now: datetime,
         seconds: int) -> datetime:
    """Hold a wake, with its message as it would have been alone, until its conversation's window closes; when."""
    opened = (HeldWake.select(HeldWake.due_at).where(HeldWake.conversation == conversation_id)
              .order_by(HeldWake.due_at).first())
    due = due_at(opened.due_at if opened else None, now, seconds)
    HeldWake.insert({HeldWake.wake: wake_id, HeldWake.conversation: conversation_id, HeldWake.user: user_id,
                     HeldWake.content: content, HeldWake.metadata: metadata, HeldWake.due_at: due,
                     HeldWake.created_at: now}).execute()
    if opened is None:
        sooner(due)  # a window opened: the scheduler delivers it when it closes
    return due


def wake_ctes(after: str = "") -> str:
    """The CTEs of _WAKE_SQL, after a `WITH` or another CTE's comma. `after`: a CTE of the caller's statement that
    the wake's insert selects from too, so the wake is written only when that CTE returned its row (the claimed
    update of models/results, for a fire in one round trip)."""
    source = f"gate, {after}" if after else "gate"
    return (
        "gate AS (SELECT COALESCE((SELECT coalesce_seconds FROM conversations WHERE id = CAST(%s AS integer)), "
        "CAST(%s AS integer)) AS seconds), "
        "w AS (INSERT INTO wakes (monitor_id, dedupe_key, created_at, message_id) "
        "SELECT CAST(%s AS varchar), CAST(%s AS varchar), CAST(%s AS timestamp), "
        f"CASE WHEN gate.seconds <= 0 THEN nextval('messages_id_seq') END FROM {source} "
        "ON CONFLICT DO NOTHING RETURNING id, message_id), "
        "m AS (INSERT INTO messages (id, conversation_id, role, content, metadata, created_at) "
        "SELECT w.message_id, CAST(%s AS integer), 'wake', CAST(%s AS text), CAST(%s AS text), CAST(%s AS timestamp) "
        "FROM w WHERE w.message_id IS NOT NULL RETURNING id), "
        "touched AS (UPDATE conversations SET updated_at = CAST(%s AS timestamp) WHERE id = CAST(%s AS integer) "
        "AND EXISTS (SELECT 1 FROM m)), "
        "pushes AS (INSERT INTO wake_pushes (endpoint_id, message_id, status, attempts, next_attempt_at, created_at) "
        "SELECT e.id, m.id, 'pending', 0, CAST(%s AS timestamp), CAST(%s AS timestamp) FROM wake_endpoints e, m "
        "WHERE e.user_id = CAST(%s AS integer) AND e.enabled RETURNING 1)")


#: what a statement ending in wake_ctes selects, in this order: written_of reads it
WAKE_RESULT = ("(SELECT id FROM w), (SELECT message_id FROM w), (SELECT seconds FROM gate), "
               "(SELECT COUNT(*) FROM pushes)")

#: PostgreSQL: a new wake and, when its conversation does not coalesce, its message, as one statement (write_wake
#: took six round trips: the wake, the window's lookup, the message, the conversation's updated_at, the wake's
#: message id, the pushes). The message's id is drawn first, so the wake is inserted already linked to it; the
#: wake's insert is the gate (a repeat inserts nothing, so neither does anything after it). Its foreign key to
#: the message is checked at the end of the statement, when the message is there. Returns the wake's id (None for
#: a repeat), the message's id (None when the wake is held or a repeat), the window and the pushes queued.
_WAKE_SQL = f"WITH {wake_ctes()} SELECT {WAKE_RESULT}"


@dataclass(frozen=True)
class Written:
    """What write_new_wake did: the wake's id (None: a repeat), and its message, or the window it is held for."""
    wake_id: int | None
    message: Message | None
    seconds: int


def wake_params(monitor_id: str, conversation_id: int, user_id: int, dedupe_key: str, text: str, metadata: dict,
                now: datetime) -> tuple:
    """wake_ctes' parameters."""
    return (conversation_id, DEFAULT_SECONDS, monitor_id, dedupe_key, now, conversation_id, text,
            Message.metadata.db_value(metadata), now, now, conversation_id, now, now, user_id)


def written_of(row, conversation_id: int, text: str, metadata: dict, now: datetime) -> Written:
    """Written, from WAKE_RESULT's four values."""
    wake_id, message_id, seconds, pushes = row
    if message_id is None:
        return Written(wake_id, None, seconds)
    message = Message(id=message_id, conversation=conversation_id, role="wake", content=text, metadata=metadata,
                      created_at=now)
    message.pushes = pushes
    return Written(wake_id, message, seconds)


def write_new_wake(monitor_id: str, conversation_id: int, user_id: int, dedupe_key: str, text: str, metadata: dict,
                   now: datetime) -> Written:
    """PostgreSQL's write_wake, in one round trip (_WAKE_SQL); a held wake is left for the caller to hold."""
    row = run_prepared("vigil_write_wake", _WAKE_SQL, wake_params(
        monitor_id, conversation_id, user_id, dedupe_key, text, metadata, now)).fetchone()
    return written_of(row, conversation_id, text, metadata, now)


_LINK_MESSAGE = Compiled(lambda message_id, wake_id: Wake.update({Wake.message: message_id}).where(Wake.id == wake_id))


def deliver(conversation_id: int, user_id: int, text: str, metadata: dict, wake_ids: list[int]) -> Message:
    """The wake message, each wake it carries linked to it, and its pushes to the account's wake endpoints (the
    outbox), in the caller's transaction: committed with the wakes or not at all."""
    message = append_message(conversation_id, "wake", text, metadata)
    for wake_id in wake_ids:
        _LINK_MESSAGE.rowcount(message.id, wake_id)
    message.pushes = queue_pushes(user_id, message.id, message.created_at)
    return message


@dataclass(frozen=True)
class Flushed:
    """A closed window's message, with what publishing it needs: its account and the runtime's conversation id."""
    user_id: int
    conversation_id: str
    message: Message


def flush_due(now: datetime) -> list[Flushed]:
    """Deliver the held wakes of every conversation whose window closed by `now`, one message each. A tick with
    none due reads one index entry and takes no write lock (SQLite's is the whole database)."""
    if not HeldWake.select(HeldWake.id).where(HeldWake.due_at <= now).exists():
        return []
    with write_transaction():
        held = _claim_closed(now)
        return [_deliver_window(list(rows)) for _, rows in groupby(held, key=lambda row: row.conversation_id)]


def _claim_closed(now: datetime) -> list[HeldWake]:
    """What the closed windows hold, by conversation, oldest first; rows another scheduler holds are skipped."""
    closed = (HeldWake.select(HeldWake.conversation).where(HeldWake.due_at <= now).distinct()
              .limit(FLUSH_LIMIT))
    query = (HeldWake.select().where(HeldWake.conversation.in_(closed))
             .order_by(HeldWake.conversation, HeldWake.id))
    if database.for_update:
        query = query.for_update(skip_locked=True)
    return list(query)


def _deliver_window(rows: list[HeldWake]) -> Flushed:
    """One message for the window: a lone wake as itself, several as a list of each (engine.wake.coalesced_text)."""
    first = rows[0]
    wakes = [(row.metadata, row.content) for row in rows]
    if len(rows) == 1:
        text, metadata = first.content, first.metadata
    else:
        text, metadata = coalesced_text(wakes), coalesced_metadata(wakes)
    message = deliver(first.conversation_id, first.user_id, text, metadata, [row.wake_id for row in rows])
    HeldWake.delete().where(HeldWake.id.in_([row.id for row in rows])).execute()
    external_id = Conversation.select(Conversation.external_id).where(Conversation.id == first.conversation_id) \
        .scalar()
    return Flushed(first.user_id, external_id, message)
