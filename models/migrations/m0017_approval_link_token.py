"""An approval request keeps its token encrypted, so the owner's approval card can show the link again (only its
digest was kept, so the link was in the agent's tool result alone)."""

import peewee


def up(db: peewee.Database) -> None:
    db.execute_sql("ALTER TABLE approval_requests ADD COLUMN token_encrypted TEXT NOT NULL DEFAULT ''")
