"""Screenshots of pages rendered in a browser (issue 31): the newest few of each monitor, its baseline's and its
fires', for its page. Import Screenshot from models.tables, which re-exports it (importing this module first would
be circular)."""

from __future__ import annotations

from datetime import datetime

import peewee

from models.db import BaseModel, database
from models.tables import Monitor


class Screenshot(BaseModel):
    """A JPEG of what a rendered page showed (the selected element, or the viewport) when a check of it was a
    baseline or a fire."""
    monitor = peewee.ForeignKeyField(Monitor, on_delete="CASCADE", index=False)
    kind = peewee.CharField(max_length=20)
    taken_at = peewee.DateTimeField()
    image = peewee.BlobField()

    class Meta:
        table_name = "screenshots"
        indexes = ((("monitor", "id"), False),)  # m0027


def keep_screenshot(monitor_id: str, kind: str, image: bytes, taken_at: datetime, kept: int) -> int | None:
    """Store a screenshot and delete the monitor's older ones past `kept`, in one short transaction; its id, or None
    when none are kept (or the monitor is gone)."""
    if kept < 1:
        return None
    with database.atomic():
        if not Monitor.select().where(Monitor.id == monitor_id).exists():
            return None
        shot_id = Screenshot.insert(monitor=monitor_id, kind=kind, taken_at=taken_at, image=image).execute()
        stale = [row.id for row in Screenshot.select(Screenshot.id).where(Screenshot.monitor == monitor_id)
                 .order_by(Screenshot.id.desc()).offset(kept)]
        if stale:
            Screenshot.delete().where(Screenshot.id.in_(stale)).execute()
    return shot_id


def screenshots_of(monitor_id: str) -> list[tuple[int, str, datetime]]:
    """The monitor's screenshots as (id, kind, taken_at), newest first, without their images."""
    query = (Screenshot.select(Screenshot.id, Screenshot.kind, Screenshot.taken_at)
             .where(Screenshot.monitor == monitor_id).order_by(Screenshot.id.desc()))
    return [(row.id, row.kind, row.taken_at) for row in query]


def screenshot_image(user_id: int, monitor_id: str, shot_id: int) -> bytes | None:
    """A screenshot's JPEG if its monitor is `user_id`'s, else None (another account's is as absent as none)."""
    row = (Screenshot.select(Screenshot.image).join(Monitor)
           .where((Screenshot.id == shot_id) & (Screenshot.monitor == monitor_id) & (Monitor.user == user_id))
           .first())
    return bytes(row.image) if row is not None else None
