"""Browser sessions kept server-side (issue 28): the cookie carries only a random id and this table the id's
digest, the account, the session's CSRF token and when it was made and last seen. Signing out deletes the row, so
a cookie replayed afterwards is signed out; "Sign out everywhere" and a password change delete the account's
rows. Sessions signed by the old cookie backend are not carried over: everyone signs in once more."""

import peewee

from models.migrations._frozen import base_model, stand_in


def up(db: peewee.Database) -> None:
    Base = base_model(db)
    User = stand_in(Base, "users")

    class BrowserSession(Base):
        user = peewee.ForeignKeyField(User, on_delete="CASCADE")
        digest = peewee.CharField(max_length=64, unique=True)
        csrf = peewee.CharField(max_length=64)
        created_at = peewee.DateTimeField()
        last_seen_at = peewee.DateTimeField()

        class Meta:
            table_name = "sessions"

    db.create_tables([BrowserSession])
