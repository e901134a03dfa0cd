"""Tool sources: the agents' declared HTTP tools (their header values encrypted), and the owner's approval of one
exact tool call, as a command's approval is kept."""

import peewee


def up(db: peewee.Database) -> None:
    class Base(peewee.Model):
        class Meta:
            database = db

    class User(Base):
        class Meta:
            table_name = "users"

    class Monitor(Base):
        id = peewee.CharField(max_length=32, primary_key=True)

        class Meta:
            table_name = "monitors"

    class AgentTool(Base):
        user = peewee.ForeignKeyField(User, on_delete="CASCADE", index=False)
        agent_id = peewee.CharField(max_length=200)
        name = peewee.CharField(max_length=64)
        definition = peewee.TextField()
        headers_encrypted = peewee.TextField(default="")
        fingerprint = peewee.CharField(max_length=64)
        created_at = peewee.DateTimeField()
        updated_at = peewee.DateTimeField()

        class Meta:
            table_name = "agent_tools"
            indexes = ((("user", "agent_id", "name"), True),)

    class ToolApproval(Base):
        monitor = peewee.ForeignKeyField(Monitor, unique=True, on_delete="CASCADE")
        tool_key = peewee.CharField(max_length=300)
        arguments = peewee.TextField()
        fingerprint = peewee.CharField(max_length=64)
        decision = peewee.CharField(max_length=10, null=True)
        decided_at = peewee.DateTimeField(null=True)
        created_at = peewee.DateTimeField()

        class Meta:
            table_name = "tool_approvals"

    db.create_tables([AgentTool, ToolApproval])
