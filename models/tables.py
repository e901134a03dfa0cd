"""The tables, as the code sees them now. Migrations carry their own frozen copies."""

from __future__ import annotations

import peewee

from models.db import BaseModel, JSONField, utcnow


class User(BaseModel):
    email = peewee.CharField(max_length=320, unique=True)
    password_hash = peewee.CharField(max_length=255)
    created_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "users"


class ApiToken(BaseModel):
    user = peewee.ForeignKeyField(User, backref="tokens", on_delete="CASCADE")
    digest = peewee.CharField(max_length=64, unique=True)
    label = peewee.CharField(max_length=100, default="")
    created_at = peewee.DateTimeField(default=utcnow)
    last_used_at = peewee.DateTimeField(null=True)

    class Meta:
        table_name = "api_tokens"


class BrowserSession(BaseModel):
    """A signed-in browser (m0025): its cookie holds a random id, this row only the id's digest, so signing out
    (or a password change) ends it at once."""
    user = peewee.ForeignKeyField(User, on_delete="CASCADE")
    digest = peewee.CharField(max_length=64, unique=True)
    #: the session's CSRF token, kept here rather than in the cookie
    csrf = peewee.CharField(max_length=64)
    created_at = peewee.DateTimeField(default=utcnow)
    #: moved at most once a minute (models/sessions.py), for the idle expiry
    last_seen_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "sessions"


class Conversation(BaseModel):
    user = peewee.ForeignKeyField(User, backref="conversations", on_delete="CASCADE", index=False)
    external_id = peewee.CharField(max_length=200)
    channel = peewee.CharField(max_length=40, default="chat")
    agent_id = peewee.CharField(max_length=200, default="")
    title = peewee.CharField(max_length=200, default="")
    created_at = peewee.DateTimeField(default=utcnow)
    updated_at = peewee.DateTimeField(default=utcnow)
    #: the conversation's own wake coalescing window, from context.coalesce_seconds (m0020); None: the setting's
    coalesce_seconds = peewee.IntegerField(null=True)

    class Meta:
        table_name = "conversations"
        #: a runtime's conversation ids are its own: unique per account (m0007)
        indexes = ((("user", "external_id"), True),)


class Message(BaseModel):
    conversation = peewee.ForeignKeyField(Conversation, backref="messages", on_delete="CASCADE")
    role = peewee.CharField(max_length=20)
    content = peewee.TextField()
    metadata = JSONField(default=dict)
    created_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "messages"


#: a monitor's statuses; live ones may still wake their conversation
ACTIVE, PAUSED, DONE, CANCELLED, EXPIRED = "active", "paused", "done", "cancelled", "expired"
LIVE = (ACTIVE, PAUSED)
#: a command monitor on an `ask` device, until the owner approves the exact command (then active) or denies it
AWAITING = "awaiting_approval"
#: the statuses that have not ended
NOT_ENDED = (*LIVE, AWAITING)
#: seed 001's error path: ended by repeated evaluation failures or the daily fire cap; told once, never resumed
ERROR = "error"


class Monitor(BaseModel):
    id = peewee.CharField(max_length=32, primary_key=True)
    user = peewee.ForeignKeyField(User, backref="monitors", on_delete="CASCADE")
    conversation = peewee.ForeignKeyField(Conversation, backref="monitors", on_delete="CASCADE")
    description = peewee.CharField(max_length=500)
    source = JSONField()
    check = JSONField()
    on_match = peewee.TextField(default="")
    interval_seconds = peewee.IntegerField()
    max_wakes = peewee.IntegerField(default=1)
    wakes_used = peewee.IntegerField(default=0)
    #: how many events it has written: the next one's monitor_runs.seq (m0022)
    events_written = peewee.IntegerField(default=0)
    status = peewee.CharField(max_length=20, default="active")
    next_check_at = peewee.DateTimeField()
    expires_at = peewee.DateTimeField()
    claim_seq = peewee.IntegerField(default=0)
    check_count = peewee.IntegerField(default=0)
    last_checked_at = peewee.DateTimeField(null=True)
    last_changed_at = peewee.DateTimeField(null=True)
    raw_hash = peewee.CharField(max_length=64, default="")
    content_hash = peewee.CharField(max_length=64, default="")
    check_state = JSONField(null=True)
    baseline = peewee.TextField(default="")
    fire_count = peewee.IntegerField(default=0)
    failure_count = peewee.IntegerField(default=0)
    last_error = peewee.TextField(default="")
    created_at = peewee.DateTimeField(default=utcnow)
    updated_at = peewee.DateTimeField(default=utcnow)
    condition = peewee.TextField(default="")
    judge_model = peewee.CharField(max_length=100, default="")
    judge_failures = peewee.IntegerField(default=0)
    judge_tokens = peewee.IntegerField(default=0)
    unreachable_since = peewee.DateTimeField(null=True)
    prev_checked_at = peewee.DateTimeField(null=True)
    #: false for monitors whose events arrive (trigger links): the scheduler never claims them
    polled = peewee.BooleanField(default=True)
    #: a command monitor's device (m0008)
    device_id = peewee.IntegerField(null=True, index=True)
    #: seed 001's note, replayed verbatim in every wake (m0009)
    note = peewee.TextField(default="")
    #: depth-1 chaining (m0010): the wake message whose run armed this monitor, and the chain's depth; unique
    #: (m0023): that run arms one monitor
    parent_message_id = peewee.IntegerField(null=True, unique=True)
    depth = peewee.IntegerField(default=0)
    #: a document watch's "<user id>:<item_type>:<item_id>" (m0011): a write queues these monitors' checks
    watch_key = peewee.CharField(max_length=300, null=True, index=True)
    #: the validators an HTTP source sent with the body raw_hash is of, sent back as If-None-Match and
    #: If-Modified-Since (m0018); empty when it sent none
    etag = peewee.TextField(default="")
    last_modified = peewee.TextField(default="")
    #: a trigger link's expected deliveries (m0019, engine/expect.py): the deadline the next delivery must beat
    #: (None without an expect); since when, for how many windows, no delivery came; and when one came back
    #: after that, until the scheduler has said so. Partial indexes (WHERE … IS NOT NULL): (status, expect_due_at)
    #: and (expect_back_at)
    expect_due_at = peewee.DateTimeField(null=True)
    expect_missed_since = peewee.DateTimeField(null=True)
    expect_missed_count = peewee.IntegerField(default=0)
    expect_back_at = peewee.DateTimeField(null=True)

    class Meta:
        table_name = "monitors"
        #: the scheduler's two passes a tick: claiming due monitors and expiring old ones (m0005)
        indexes = ((("status", "next_check_at"), False), (("status", "expires_at"), False))

    @property
    def wakes_left(self) -> int:
        return max(self.max_wakes - self.wakes_used, 0)


class MonitorRun(BaseModel):
    """An event of a monitor's history: a check that found something (a change, a match, an error, a skip), a
    decision, a pause. Quiet checks write none: they are counted from `check_count` (the monitor's counter when
    the event was written). The newest MONITOR_EVENTS_KEPT of each monitor are kept."""
    monitor = peewee.ForeignKeyField(Monitor, backref="runs", on_delete="CASCADE", index=False)
    kind = peewee.CharField(max_length=20)
    detail = peewee.TextField(default="")
    created_at = peewee.DateTimeField(default=utcnow)
    check_count = peewee.IntegerField(default=0)
    #: engine/explain.change_data: what it read, before → after, the reasoning, the judge's verdict
    data = JSONField(null=True)
    #: the monitor's own number for it (monitors.events_written when it was written), for the prune (m0022)
    seq = peewee.IntegerField(null=True)

    class Meta:
        table_name = "monitor_runs"
        indexes = ((("monitor", "id"), False), (("monitor", "seq"), False))  # m0021, m0022


class Wake(BaseModel):
    """One fact reported to the conversation; the unique key is what makes a wake happen once."""
    monitor = peewee.ForeignKeyField(Monitor, backref="wakes", on_delete="CASCADE", index=False)
    dedupe_key = peewee.CharField(max_length=200)
    message = peewee.ForeignKeyField(Message, null=True, on_delete="SET NULL")
    created_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "wakes"
        indexes = ((("monitor", "dedupe_key"), True), (("monitor", "created_at"), False))  # m0021


class HeldWake(BaseModel):
    """A wake written while its conversation coalesces (m0020): held until its window closes at due_at, then
    delivered with the others of the window as one message (models/coalesce), and deleted."""
    wake = peewee.ForeignKeyField(Wake, unique=True, on_delete="CASCADE")
    conversation = peewee.ForeignKeyField(Conversation, on_delete="CASCADE", index=False)
    user = peewee.ForeignKeyField(User, on_delete="CASCADE", index=False)
    #: the wake's own message, as it would have been written alone
    content = peewee.TextField()
    metadata = JSONField(default=dict)
    #: the window's end: the first held wake's time plus the conversation's coalescing seconds
    due_at = peewee.DateTimeField()
    created_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "held_wakes"
        indexes = ((("conversation", "due_at"), False), (("due_at",), False))


class JudgeModel(BaseModel):
    """A catalog entry of one account: a name that resolves to a provider, its key (encrypted) and the upstream
    model. Names are the account's own (m0024): another account's entry of the same name is another entry."""
    user = peewee.ForeignKeyField(User, on_delete="CASCADE", index=False)
    name = peewee.CharField(max_length=100)
    base_url = peewee.CharField(max_length=500)
    #: "" for a model without a key (a local server)
    api_key_encrypted = peewee.TextField()
    model = peewee.CharField(max_length=200)
    api_version = peewee.CharField(max_length=40, default="")
    created_at = peewee.DateTimeField(default=utcnow)
    updated_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "judge_models"
        indexes = ((("user", "name"), True),)


class TokenUsage(BaseModel):
    """Tokens a model call spent, billed to a user (source "monitor_judge" for the judge)."""
    user = peewee.ForeignKeyField(User, on_delete="CASCADE")
    monitor = peewee.ForeignKeyField(Monitor, null=True, on_delete="SET NULL")
    source = peewee.CharField(max_length=40)
    model_name = peewee.CharField(max_length=100)
    prompt_tokens = peewee.IntegerField(default=0)
    completion_tokens = peewee.IntegerField(default=0)
    created_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "token_usage"


class TriggerLink(BaseModel):
    """A webhook URL that wakes its monitor's conversation; only the token's digest is stored."""
    monitor = peewee.ForeignKeyField(Monitor, unique=True, backref="trigger_links", on_delete="CASCADE")
    token_digest = peewee.CharField(max_length=64, unique=True)
    #: for the owner's link card; requests are looked up by the digest
    token_encrypted = peewee.TextField()
    signature = peewee.CharField(max_length=30)
    secret_encrypted = peewee.TextField(default="")
    max_hits = peewee.IntegerField()
    hits = peewee.IntegerField(default=0)
    expires_at = peewee.DateTimeField()
    revoked_at = peewee.DateTimeField(null=True)
    created_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "trigger_links"


class Delivery(BaseModel):
    """One accepted POST to a trigger link, stored before it is answered 202: the durable outbox."""
    link = peewee.ForeignKeyField(TriggerLink, backref="deliveries", on_delete="CASCADE", index=False)
    dedupe_key = peewee.CharField(max_length=250)
    body = peewee.TextField()
    content_type = peewee.CharField(max_length=200, default="")
    received_at = peewee.DateTimeField(default=utcnow)
    processed_at = peewee.DateTimeField(null=True)
    outcome = peewee.CharField(max_length=30, default="")

    class Meta:
        table_name = "deliveries"
        # and delivery_unprocessed, partial: (received_at) WHERE processed_at IS NULL (migration m0006)
        indexes = ((("link", "dedupe_key"), True),)


class AuditEvent(BaseModel):
    user = peewee.ForeignKeyField(User, null=True, on_delete="SET NULL")
    action = peewee.CharField(max_length=60)
    monitor = peewee.ForeignKeyField(Monitor, null=True, on_delete="SET NULL")
    detail = peewee.TextField(default="")
    created_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "audit_events"


class ApprovalRequest(BaseModel):
    """The request behind a /approve/<token> page; the first decision is the only one."""
    monitor = peewee.ForeignKeyField(Monitor, unique=True, backref="approvals", on_delete="CASCADE")
    token_digest = peewee.CharField(max_length=64, unique=True)
    #: for the owner's approval card (m0017); "" for a request made before it. Requests are found by the digest
    token_encrypted = peewee.TextField(default="")
    decision = peewee.CharField(max_length=60, null=True)
    comment = peewee.TextField(default="")
    decided_at = peewee.DateTimeField(null=True)
    created_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "approval_requests"


class Device(BaseModel):
    """A machine the owner paired, where command monitors run; only its token's digest is stored."""
    user = peewee.ForeignKeyField(User, backref="devices", on_delete="CASCADE", index=False)
    name = peewee.CharField(max_length=100)
    token_digest = peewee.CharField(max_length=64, unique=True)
    #: ask: every command needs the owner's approval; full: commands arm at once
    approval_mode = peewee.CharField(max_length=10, default="ask")
    #: the owner's own patterns, on top of engine.denylist's defaults
    denylist = JSONField(default=list)
    hostname = peewee.CharField(max_length=200, default="")
    runner_version = peewee.CharField(max_length=40, default="")
    #: the runner session that polls; one live session per device
    session_id = peewee.CharField(max_length=64, default="")
    last_seen_at = peewee.DateTimeField(null=True)
    #: as last published to the owner's pages (the scheduler marks devices offline)
    online = peewee.BooleanField(default=False)
    created_at = peewee.DateTimeField(default=utcnow)
    revoked_at = peewee.DateTimeField(null=True)

    class Meta:
        table_name = "devices"
        indexes = ((("user", "name"), True),)


class PairingCode(BaseModel):
    """A one-time code the owner hands to `vigil runner pair`; only its digest is stored."""
    user = peewee.ForeignKeyField(User, on_delete="CASCADE")
    name = peewee.CharField(max_length=100, default="")
    code_digest = peewee.CharField(max_length=64, unique=True)
    expires_at = peewee.DateTimeField()
    used_at = peewee.DateTimeField(null=True)
    created_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "pairing_codes"


class CommandRun(BaseModel):
    """One dispatch of a command monitor to its device: a polled run, or a stream watcher's whole life."""
    id = peewee.CharField(max_length=32, primary_key=True)
    device = peewee.ForeignKeyField(Device, backref="runs", on_delete="CASCADE", index=False)
    monitor = peewee.ForeignKeyField(Monitor, backref="command_runs", on_delete="CASCADE", index=False)
    kind = peewee.CharField(max_length=10)
    #: as it runs: placeholders filled in
    command = peewee.TextField()
    cwd = peewee.CharField(max_length=1000, null=True)
    timeout = peewee.IntegerField(null=True)
    #: pending (not started yet), running, stopping (a stop order is out), done, expired
    status = peewee.CharField(max_length=20, default="pending")
    claim_seq = peewee.IntegerField(default=0)
    #: the highest record seq stored without a gap
    acked_seq = peewee.IntegerField(default=0)
    exit_code = peewee.IntegerField(null=True)
    end_reason = peewee.CharField(max_length=20, default="")
    created_at = peewee.DateTimeField(default=utcnow)
    #: first handed to the device's runner
    sent_at = peewee.DateTimeField(null=True)
    started_at = peewee.DateTimeField(null=True)
    finished_at = peewee.DateTimeField(null=True)
    #: a polled run not answered by then is unreachable
    deadline_at = peewee.DateTimeField(null=True)
    #: a polled run's result, until the worker has checked it (processed_at)
    output = peewee.TextField(null=True)
    timed_out = peewee.BooleanField(default=False)
    processed_at = peewee.DateTimeField(null=True)

    class Meta:
        table_name = "command_runs"
        indexes = ((("device", "status"), False), (("monitor", "status"), False))


class RunRecord(BaseModel):
    """A numbered record of a run, stored once, in the same transaction as its wake."""
    run = peewee.ForeignKeyField(CommandRun, backref="records", on_delete="CASCADE", index=False)
    seq = peewee.IntegerField()
    kind = peewee.CharField(max_length=20)
    lines = peewee.IntegerField(default=0)
    received_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "run_records"
        indexes = ((("run", "seq"), True),)


class CommandApproval(BaseModel):
    """The owner's approval of one exact call: the device, the command as written, the cwd, the mode."""
    monitor = peewee.ForeignKeyField(Monitor, unique=True, backref="command_approvals", on_delete="CASCADE")
    device = peewee.ForeignKeyField(Device, on_delete="CASCADE")
    command = peewee.TextField()
    cwd = peewee.CharField(max_length=1000, null=True)
    mode = peewee.CharField(max_length=10)
    #: approved, denied, or None while it waits
    decision = peewee.CharField(max_length=10, null=True)
    decided_at = peewee.DateTimeField(null=True)
    created_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "command_approvals"


class Document(BaseModel):
    """A record the platform keeps in Vigil (a transcription job, an ingest, a custom record), versioned."""
    user = peewee.ForeignKeyField(User, on_delete="CASCADE", index=False)
    item_type = peewee.CharField(max_length=70)
    item_id = peewee.CharField(max_length=200)
    version = peewee.IntegerField(default=1)
    #: the JSON object, as canonical text (sorted keys)
    body = peewee.TextField()
    created_at = peewee.DateTimeField(default=utcnow)
    updated_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "documents"
        indexes = ((("user", "item_type", "item_id"), True),)


class AgentTool(BaseModel):
    """An agent's declared HTTP tool, as its runtime registered it; header values (secrets) stored encrypted."""
    user = peewee.ForeignKeyField(User, on_delete="CASCADE", index=False)
    agent_id = peewee.CharField(max_length=200)
    name = peewee.CharField(max_length=64)
    #: engine.tools.tool_to_record: everything but the header values
    definition = JSONField()
    headers_encrypted = peewee.TextField(default="")
    #: engine.tools.fingerprint: the executable surface; a watch armed on another one ends
    fingerprint = peewee.CharField(max_length=64)
    created_at = peewee.DateTimeField(default=utcnow)
    updated_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "agent_tools"
        indexes = ((("user", "agent_id", "name"), True),)


class ToolApproval(BaseModel):
    """The owner's approval of one exact tool call: the agent's tool, its arguments as written, its fingerprint."""
    monitor = peewee.ForeignKeyField(Monitor, unique=True, backref="tool_approvals", on_delete="CASCADE")
    tool_key = peewee.CharField(max_length=300)
    arguments = JSONField()
    fingerprint = peewee.CharField(max_length=64)
    decision = peewee.CharField(max_length=10, null=True)
    decided_at = peewee.DateTimeField(null=True)
    created_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "tool_approvals"


class McpConnection(BaseModel):
    """An MCP server the owner connected (Settings → Connections); its bearer token stored encrypted."""
    user = peewee.ForeignKeyField(User, on_delete="CASCADE", index=False)
    name = peewee.CharField(max_length=40)
    url = peewee.CharField(max_length=2000)
    token_encrypted = peewee.TextField(default="")
    created_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "mcp_connections"
        indexes = ((("user", "name"), True),)


# The wake-push outbox's tables live in models/push_tables.py (this module stays under 500 lines); they are
# re-exported here, and only here imports that module.
from models.push_tables import WakeAttempt, WakeEndpoint, WakePush  # noqa: E402
from models.screenshots import Screenshot  # noqa: E402

ALL_TABLES = [User, ApiToken, Conversation, Message, Monitor, MonitorRun, Wake, HeldWake, JudgeModel, TokenUsage,
              TriggerLink, Delivery, AuditEvent, ApprovalRequest, Device, PairingCode, CommandRun, RunRecord,
              CommandApproval, Document, AgentTool, ToolApproval, McpConnection, WakeEndpoint, WakePush,
              WakeAttempt, BrowserSession, Screenshot]
