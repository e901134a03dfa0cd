"""Conversation ids are unique per account, not across all accounts.

A runtime names its conversations itself; with one index over every account, one account could take an id
another account's runtime would use, and that runtime's calls were refused. The unique index now covers
(user_id, external_id); it starts with user_id, so the foreign key's own index on user_id is dropped too.
"""

import peewee


def up(db: peewee.Database) -> None:
    db.execute_sql("DROP INDEX IF EXISTS conversation_external_id")
    db.execute_sql("CREATE UNIQUE INDEX conversation_user_id_external_id ON conversations (user_id, external_id)")
    db.execute_sql("DROP INDEX IF EXISTS conversation_user_id")
