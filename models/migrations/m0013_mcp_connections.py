"""MCP connections: servers the owner adds in Settings → Connections, whose tools a monitor may re-run; the
bearer token is stored encrypted."""

import peewee


def up(db: peewee.Database) -> None:
    class Base(peewee.Model):
        class Meta:
            database = db

    class User(Base):
        class Meta:
            table_name = "users"

    class McpConnection(Base):
        user = peewee.ForeignKeyField(User, on_delete="CASCADE", index=False)
        name = peewee.CharField(max_length=40)
        url = peewee.CharField(max_length=2000)
        token_encrypted = peewee.TextField(default="")
        created_at = peewee.DateTimeField()

        class Meta:
            table_name = "mcp_connections"
            indexes = ((("user", "name"), True),)

    db.create_tables([McpConnection])
