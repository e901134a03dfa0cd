"""Tables and the transactional operations on them. Imports engine/, never app/ or tasks/."""

from models.db import bind, connection, database, utcnow  # noqa: F401
from models.tables import (  # noqa: F401
    ALL_TABLES, ApiToken, ApprovalRequest, AuditEvent, Conversation, Delivery, JudgeModel, Message, Monitor, MonitorRun, TokenUsage,
    TriggerLink, User, Wake,
)
