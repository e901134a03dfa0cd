"""The events Vigil publishes, built from rows after they were written."""

from __future__ import annotations

from adapters.metrics import count_wakes
from models.accounts import token_json
from models.conversations import is_watching, message_json
from models.db import utcnow
from models.devices import device_json
from models.monitors import event_payload
from models.tables import ACTIVE
from tasks.pushes import queue_pushes_of
from tasks.runtime import current


def publish_monitor(monitor, woke=None, *, status_before: str | None = None) -> None:
    """What a change to a monitor means for its owner's pages, in one round trip: monitor.updated; the
    conversation's watching mark unless the status is known not to have moved; and the wake, if one was
    written."""
    batch = MonitorEvents()
    batch.add(monitor, woke, status_before=status_before)
    batch.publish()


def publish_created(monitor) -> None:
    """A monitor just created: its conversation's conversation.created first when the same call created that too
    (and nothing announced it yet), then monitor.created, then what every change to a monitor publishes; one round
    trip. The owner's open pages add the new row and sidebar entry from these (app/live.py)."""
    batch = MonitorEvents()
    conversation = monitor.conversation
    if getattr(conversation, "created_now", False):
        batch.events.append(conversation_created(conversation, monitor.status == ACTIVE))
    batch.events.append((monitor.user_id, "monitor.created", event_payload(monitor)))
    batch.add(monitor)
    batch.publish()


def announce_conversation(conversation) -> None:
    """conversation.created for a conversation this call created (models.conversations.conversation_for), once."""
    if getattr(conversation, "created_now", False):
        current().bus.publish(*conversation_created(conversation, False))


def conversation_created(conversation, watching: bool) -> tuple[int, str, dict]:
    """The event carries what the sidebar shows of it, so a page renders its entry without a query."""
    conversation.created_now = False  # announced: a later publish of the same object does not repeat it
    return (conversation.user_id, "conversation.created",
            {"conversation_id": conversation.external_id, "id": conversation.id, "title": conversation.title,
             "watching": watching})


def publish_token(row, bus=None) -> None:
    """token.created: what Settings → Tokens lists of a new token (models.accounts.token_json, never the token
    itself, which is not stored). `bus` for a process without a runtime (the `vigil token create` command)."""
    (bus or current().bus).publish(row.user_id, "token.created", token_json(row))


def publish_token_revoked(user_id: int, token_id: int) -> None:
    """token.revoked: the owner's open Settings → Tokens pages drop its row."""
    current().bus.publish(user_id, "token.revoked", {"id": token_id})


class MonitorEvents:
    """The events of several monitor changes (a batch of deliveries), sent in one round trip at the end. Each
    change's events are built when it is added, since the same monitor may change again before they are sent."""

    def __init__(self) -> None:
        self.events: list[tuple[int, str, dict]] = []
        self.wakes: list = []

    def add(self, monitor, woke=None, *, status_before: str | None = None) -> None:
        conversation = monitor.conversation.external_id
        self.events.append((monitor.user_id, "monitor.updated", event_payload(monitor)))
        if monitor.status != status_before:
            self.events.append((monitor.user_id, "conversation.updated",
                                {"conversation_id": conversation, "watching": is_watching(monitor.conversation_id)}))
        if woke is not None:
            self.events.append((monitor.user_id, "message.created",
                                {"conversation_id": conversation, **message_json(woke)}))
            self.wakes.append(woke)
        source = monitor.source or {}
        if source.get("type") == "command" and source.get("device_id"):
            self.events.append(work_event(monitor.user_id, source["device_id"]))

    def extend(self, other: MonitorEvents) -> None:
        self.events.extend(other.events)
        self.wakes.extend(other.wakes)

    def clear(self) -> None:
        self.events.clear()
        self.wakes.clear()

    def publish(self) -> None:
        """The events in one round trip, then the wakes' pushes and counts."""
        if self.events:
            current().bus.publish_many(self.events)
        queue_pushes_of(self.wakes)
        count_wakes(self.wakes)


def publish_wakes(monitor, messages: list) -> None:
    """message.created for each wake written (a stream's records), then the monitor's own events."""
    conversation = monitor.conversation.external_id
    events = [(monitor.user_id, "message.created", {"conversation_id": conversation, **message_json(m)})
              for m in messages if m is not None]
    if events:
        current().bus.publish_many(events)
    queue_pushes_of(messages)
    count_wakes(messages)


def publish_coalesced(flushed: list) -> None:
    """message.created for each coalesced window's message (models/coalesce.flush_due), then its pushes, as a wake
    written at once would have had them."""
    if flushed:
        current().bus.publish_many([(f.user_id, "message.created", {"conversation_id": f.conversation_id,
                                                                     **message_json(f.message)}) for f in flushed])
    messages = [f.message for f in flushed]
    queue_pushes_of(messages)
    count_wakes(messages)


def work_event(user_id: int, device_id: int) -> tuple[int, str, dict]:
    """The hint that wakes a device's long-poll: there is work, or a stop order (the poll reads which)."""
    return (user_id, "device.work", {"device_id": device_id})


def publish_work(user_id: int, device_ids: list[int]) -> None:
    if device_ids:
        current().bus.publish_many([work_event(user_id, device_id) for device_id in device_ids])


def publish_device(device, listing: bool = False) -> None:
    """device.updated, for Settings → Devices: online or offline, last seen, what it runs; `listing` when the
    device was just paired or revoked (the page's list itself changes)."""
    runtime = current()
    data = {**device_json(device, utcnow(), runtime.presence), "listing": listing}
    runtime.bus.publish(device.user_id, "device.updated", data)


def publish_quiet(monitors: list) -> None:
    """monitor.updated for a batch of quiet checks, sent together."""
    if monitors:
        current().bus.publish_many([(m.user_id, "monitor.updated", event_payload(m)) for m in monitors])
