"""Small helpers the integration tests share."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import timedelta

from models import database, utcnow


@contextmanager
def db():
    with database.connection_context():
        yield database


def tool(client, token: str, action: str, arguments: dict | None = None, conversation: str = "conv-1",
         channel: str = "chat"):
    """Call the tool endpoint as an agent runtime would."""
    return client.post("/api/tool/monitor", headers={"Authorization": f"Bearer {token}"},
                       json={"action": action, "arguments": arguments or {},
                             "context": {"conversation_id": conversation, "channel": channel, "agent_id": "agent-1"}})


def run_due_checks(drain, seconds_ahead: int = 4000) -> int:
    """Tick the real scheduler as if `seconds_ahead` had passed, then let the worker process it all."""
    from tasks.scheduler import tick

    with db():
        claimed = tick(utcnow() + timedelta(seconds=seconds_ahead), 500)
    drain()
    return claimed
