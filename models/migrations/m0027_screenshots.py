"""Screenshots of pages rendered in a browser (issue 31): a JPEG of what the page showed on its baseline and on each
fire, the newest MONITOR_SCREENSHOTS_KEPT of a monitor kept, shown on the monitor page beside the before → after.
A blob column (bytea on PostgreSQL, BLOB on SQLite), deleted with its monitor."""

import peewee

from models.migrations._frozen import base_model


def up(db: peewee.Database) -> None:
    Base = base_model(db)

    class MonitorRef(Base):
        id = peewee.CharField(max_length=32, primary_key=True)

        class Meta:
            table_name = "monitors"

    class Screenshot(Base):
        monitor = peewee.ForeignKeyField(MonitorRef, on_delete="CASCADE", index=False)
        kind = peewee.CharField(max_length=20)
        taken_at = peewee.DateTimeField()
        image = peewee.BlobField()

        class Meta:
            table_name = "screenshots"
            indexes = ((("monitor", "id"), False),)

    db.create_tables([Screenshot])
