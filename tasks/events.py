"""The events Vigil publishes, built from rows after they were written."""

from __future__ import annotations

from models.conversations import is_watching, message_json
from models.monitors import event_payload
from tasks.runtime import current


def publish_monitor(monitor, woke=None, *, status_before: str | None = None) -> None:
    """What a change to a monitor means for its owner's pages, in one round trip: monitor.updated; the
    conversation's watching mark unless the status is known not to have moved; and the wake, if one was
    written."""
    conversation = monitor.conversation.external_id
    events = [(monitor.user_id, "monitor.updated", event_payload(monitor))]
    if monitor.status != status_before:
        events.append((monitor.user_id, "conversation.updated",
                       {"conversation_id": conversation, "watching": is_watching(monitor.conversation_id)}))
    if woke is not None:
        events.append((monitor.user_id, "message.created", {"conversation_id": conversation, **message_json(woke)}))
    current().bus.publish_many(events)


def publish_quiet(monitors: list) -> None:
    """monitor.updated for a batch of quiet checks, sent together."""
    if monitors:
        current().bus.publish_many([(m.user_id, "monitor.updated", event_payload(m)) for m in monitors])
