"""The events Vigil publishes, built from rows after they were written."""

from __future__ import annotations

from models.conversations import is_watching, message_json
from models.monitors import event_payload
from tasks.runtime import current


def publish_monitor(monitor, *, status_changed: bool = True) -> None:
    """monitor.updated, and the conversation's watching mark when the status may have moved."""
    runtime = current()
    runtime.publish(monitor.user_id, "monitor.updated", event_payload(monitor))
    if status_changed:
        runtime.publish(monitor.user_id, "conversation.updated",
                        {"conversation_id": monitor.conversation.external_id,
                         "watching": is_watching(monitor.conversation_id)})


def publish_quiet(monitors: list) -> None:
    """monitor.updated for a batch of quiet checks, sent together."""
    if monitors:
        current().bus.publish_many([(m.user_id, "monitor.updated", event_payload(m)) for m in monitors])


def publish_message(user_id: int, conversation_id: str, message) -> None:
    current().publish(user_id, "message.created", {"conversation_id": conversation_id, **message_json(message)})
