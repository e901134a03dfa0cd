"""Depth-1 chaining counted per wake (issue 27): a run woken by wake message W may arm one more monitor, so at most
one monitor has parent_message_id W. A unique index makes that the database's guarantee, so two creates racing with
the same context.woken_by can't both be stored (NULLs, monitors no wake armed, stay distinct on SQLite and
PostgreSQL alike). A wake that armed several before this keeps its earliest; the later ones keep their depth (their
own wakes still can't chain) but no longer name the wake, since the index can hold it once."""

import peewee

_LATER_CHILDREN = """
UPDATE monitors SET parent_message_id = NULL
 WHERE parent_message_id IS NOT NULL
   AND EXISTS (SELECT 1 FROM monitors AS earlier
                WHERE earlier.parent_message_id = monitors.parent_message_id
                  AND (earlier.created_at < monitors.created_at
                       OR (earlier.created_at = monitors.created_at AND earlier.id < monitors.id)))
"""


def up(db: peewee.Database) -> None:
    db.execute_sql(_LATER_CHILDREN)
    db.execute_sql("CREATE UNIQUE INDEX monitor_parent_message_id ON monitors (parent_message_id)")
