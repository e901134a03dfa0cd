"""Paired devices and command monitors: devices, their pairing codes, command runs with their numbered
records, and the owner's approval of each exact command."""

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

    class JSONText(peewee.TextField):
        pass

    class Device(Base):
        user = peewee.ForeignKeyField(User, on_delete="CASCADE", index=False)
        name = peewee.CharField(max_length=100)
        token_digest = peewee.CharField(max_length=64, unique=True)
        approval_mode = peewee.CharField(max_length=10, default="ask")
        denylist = JSONText(default="[]")
        hostname = peewee.CharField(max_length=200, default="")
        runner_version = peewee.CharField(max_length=40, default="")
        session_id = peewee.CharField(max_length=64, default="")
        last_seen_at = peewee.DateTimeField(null=True)
        online = peewee.BooleanField(default=False)
        created_at = peewee.DateTimeField()
        revoked_at = peewee.DateTimeField(null=True)

        class Meta:
            table_name = "devices"
            indexes = ((("user", "name"), True),)

    class PairingCode(Base):
        user = peewee.ForeignKeyField(User, on_delete="CASCADE")
        name = peewee.CharField(max_length=100, default="")
        code_digest = peewee.CharField(max_length=64, unique=True)
        expires_at = peewee.DateTimeField()
        used_at = peewee.DateTimeField(null=True)
        created_at = peewee.DateTimeField()

        class Meta:
            table_name = "pairing_codes"

    class CommandRun(Base):
        id = peewee.CharField(max_length=32, primary_key=True)
        device = peewee.ForeignKeyField(Device, on_delete="CASCADE", index=False)
        monitor = peewee.ForeignKeyField(Monitor, on_delete="CASCADE", index=False)
        kind = peewee.CharField(max_length=10)
        command = peewee.TextField()
        cwd = peewee.CharField(max_length=1000, null=True)
        timeout = peewee.IntegerField(null=True)
        status = peewee.CharField(max_length=20, default="pending")
        claim_seq = peewee.IntegerField(default=0)
        acked_seq = peewee.IntegerField(default=0)
        exit_code = peewee.IntegerField(null=True)
        end_reason = peewee.CharField(max_length=20, default="")
        created_at = peewee.DateTimeField()
        sent_at = peewee.DateTimeField(null=True)
        started_at = peewee.DateTimeField(null=True)
        finished_at = peewee.DateTimeField(null=True)
        deadline_at = peewee.DateTimeField(null=True)
        output = peewee.TextField(null=True)
        timed_out = peewee.BooleanField(default=False)
        processed_at = peewee.DateTimeField(null=True)

        class Meta:
            table_name = "command_runs"
            indexes = ((("device", "status"), False), (("monitor", "status"), False))

    class RunRecord(Base):
        run = peewee.ForeignKeyField(CommandRun, on_delete="CASCADE", index=False)
        seq = peewee.IntegerField()
        kind = peewee.CharField(max_length=20)
        lines = peewee.IntegerField(default=0)
        received_at = peewee.DateTimeField()

        class Meta:
            table_name = "run_records"
            indexes = ((("run", "seq"), True),)

    class CommandApproval(Base):
        monitor = peewee.ForeignKeyField(Monitor, unique=True, on_delete="CASCADE")
        device = peewee.ForeignKeyField(Device, on_delete="CASCADE")
        command = peewee.TextField()
        cwd = peewee.CharField(max_length=1000, null=True)
        mode = peewee.CharField(max_length=10)
        decision = peewee.CharField(max_length=10, null=True)
        decided_at = peewee.DateTimeField(null=True)
        created_at = peewee.DateTimeField()

        class Meta:
            table_name = "command_approvals"

    db.create_tables([Device, PairingCode, CommandRun, RunRecord, CommandApproval])
    db.execute_sql("ALTER TABLE monitors ADD COLUMN device_id INTEGER")
    db.execute_sql("CREATE INDEX monitor_device_id ON monitors (device_id)")
