"""Wake coalescing (issue 18): a conversation's own window (NULL: the WAKE_COALESCE_SECONDS setting), and the
wakes held while a window is open, each with what its message would have been alone, until they are delivered
together as one message."""

import peewee

from models.migrations._frozen import base_model, stand_in


def up(db: peewee.Database) -> None:
    Base = base_model(db)
    User, Conversation, Wake = (stand_in(Base, name) for name in ("users", "conversations", "wakes"))

    class HeldWake(Base):
        wake = peewee.ForeignKeyField(Wake, unique=True, on_delete="CASCADE")
        conversation = peewee.ForeignKeyField(Conversation, on_delete="CASCADE", index=False)
        user = peewee.ForeignKeyField(User, on_delete="CASCADE", index=False)
        content = peewee.TextField()
        metadata = peewee.TextField(default="{}")
        due_at = peewee.DateTimeField()
        created_at = peewee.DateTimeField()

        class Meta:
            table_name = "held_wakes"
            indexes = ((("conversation", "due_at"), False), (("due_at",), False))

    db.execute_sql("ALTER TABLE conversations ADD COLUMN coalesce_seconds INTEGER")
    db.create_tables([HeldWake])
