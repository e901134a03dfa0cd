"""Seed 001's guardrails on arming a monitor: armed monitors per conversation and per account, and depth-1
chaining (a run woken by a monitor may arm one more; that one's wake may arm none)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import peewee

from engine.spec import Limits, MonitorSpec
from models.db import database
from models.tables import NOT_ENDED, Conversation, Monitor, User, Wake

#: a monitor armed by a woken run has depth 1; a run it wakes may arm nothing more
MAX_DEPTH = 1
#: seed 001's guard, word for word
ONE_MORE = ("A run that was itself woken by a monitor may arm one more monitor (depth 1); chaining further is "
            "refused, so watch → wake → watch → wake loops cannot run away.")


class GuardrailRefused(ValueError):
    """A monitor that can't be armed now; str() is the sentence for the model."""


class LineageUnknown(ValueError):
    """context.woken_by names no wake of this account: a mistake in the call, not a limit reached."""


def check_armed_limits(user: User, conversation: Conversation, limits: Limits) -> None:
    """Refuse a new monitor past the conversation's or the account's armed limit, naming it."""
    armed = Monitor.select().where(Monitor.status.in_(NOT_ENDED))
    in_conversation = armed.where(Monitor.conversation == conversation).count()
    if in_conversation >= limits.max_armed_per_conversation:
        raise GuardrailRefused(f"This conversation already has {in_conversation} armed monitors, the most it may have "
                               f"({limits.max_armed_per_conversation}); cancel one with monitor_cancel and its slot "
                               "frees at once.")
    in_account = armed.where(Monitor.user == user).count()
    if in_account >= limits.max_armed_per_account:
        raise GuardrailRefused(f"This account already has {in_account} armed monitors, the most it may have "
                               f"({limits.max_armed_per_account}); cancel one (monitor_list shows this conversation's) "
                               "and its slot frees at once.")


def with_lineage(user: User, spec: MonitorSpec, woken_by: int | None) -> MonitorSpec:
    """The spec with the wake that armed it; refused when that wake came from a monitor a woken run armed."""
    if woken_by is None:
        return spec
    parent = (Wake.select(Wake.message, Monitor.depth).join(Monitor)
              .where((Wake.message == woken_by) & (Monitor.user == user))
              .order_by(Monitor.depth.desc()).first())  # a coalesced message carries several: the deepest counts
    if parent is None:
        raise LineageUnknown(f"context.woken_by {woken_by} is not a wake of this account; pass the id of the wake "
                               "message that started this run, or leave it out.")
    depth = parent.monitor.depth + 1
    if depth > MAX_DEPTH:
        raise GuardrailRefused("This run was woken by a monitor that a woken run armed; monitors chain one level "
                               "deep, so no further monitor can be armed from here. Tell the user what you found "
                               "instead.")
    if _has_child(woken_by):
        raise GuardrailRefused(already_chained(woken_by))
    return replace(spec, parent_message_id=woken_by, depth=depth)


def already_chained(woken_by: int) -> str:
    return (f"This run already armed its one more monitor from the wake context.woken_by {woken_by}. {ONE_MORE} "
            "Tell the user what you found instead.")


def _has_child(woken_by: int) -> bool:
    return Monitor.select(Monitor.id).where(Monitor.parent_message_id == woken_by).exists()


@contextmanager
def one_per_wake(woken_by: int | None) -> Iterator[None]:
    """Around a monitor's insert: the database's word on a wake's one more monitor (m0023's unique index on
    monitors.parent_message_id). Two creates with the same woken_by that both passed with_lineage race here; the
    second is refused as with_lineage would have refused it."""
    try:
        with database.atomic():
            yield
    except peewee.IntegrityError:
        if woken_by is None or not _has_child(woken_by):
            raise
        raise GuardrailRefused(already_chained(woken_by)) from None
