"""Approval requests: create one, read it for its page, and take the first decision, race-safe."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from engine.crypto import Keyring
from engine.describe import approval_word
from engine.tokens import new_token, token_digest
from engine.wake import decision_text
from models.db import database, iso
from models.events import record_event
from models.results import write_wake
from models.tables import ApprovalRequest, Monitor

TOKEN_PREFIX = "apr_"
MAX_COMMENT = 2000


class ApprovalClosed(Exception):
    """The request can't take a decision; `status` is the HTTP answer (404 unknown/ended, 409, 410)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


@dataclass(frozen=True)
class ApprovalView:
    """What the public page and GET /api/approvals/<token> show: never the monitor's description."""
    question: str
    details: str
    options: tuple[str, ...]
    allow_comment: bool
    expires_at: datetime
    state: str              # open | decided | expired | ended
    decision: str | None
    comment: str

    def as_json(self) -> dict:
        return {"question": self.question, "details": self.details, "options": list(self.options),
                "allow_comment": self.allow_comment, "expires_at": iso(self.expires_at), "state": self.state,
                "decision": self.decision, "comment": self.comment or None}


def create_request(monitor: Monitor, now: datetime, keyring: Keyring | None = None) -> str:
    """The request's token; kept as its digest, and encrypted for the owner's card when there is a keyring."""
    token = new_token(TOKEN_PREFIX)
    ApprovalRequest.create(monitor=monitor.id, token_digest=token_digest(token),
                           token_encrypted=keyring.encrypt(token) if keyring else "", created_at=now)
    return token


def find(token: str) -> ApprovalRequest | None:
    if not token.startswith(TOKEN_PREFIX) or len(token) > 100:
        return None
    return (ApprovalRequest.select(ApprovalRequest, Monitor).join(Monitor)
            .where(ApprovalRequest.token_digest == token_digest(token)).first())


def view(request: ApprovalRequest, now: datetime) -> ApprovalView:
    monitor, source = request.monitor, request.monitor.source
    return ApprovalView(source["question"], source.get("details") or "", tuple(source["options"]),
                        bool(source.get("allow_comment", True)), monitor.expires_at,
                        request_state(request.decision, monitor, now), request.decision, request.comment)


def request_state(decision: str | None, monitor: Monitor, now: datetime) -> str:
    """open | decided | expired | ended, from the decision and the request's monitor."""
    if decision is not None:
        return "decided"
    if monitor.status in ("cancelled", "done"):
        return "ended"
    if monitor.status == "expired" or monitor.expires_at <= now:
        return "expired"
    return "open"


def decide(request: ApprovalRequest, decision: str, comment: str, now: datetime):
    """Take the decision if it is the first; returns the wake message. Raises ApprovalClosed."""
    current = view(request, now)
    if current.state == "ended":
        raise ApprovalClosed(404, "This approval request has ended.")
    if current.state == "expired":
        raise ApprovalClosed(410, "This approval request has expired.")
    if decision not in current.options:
        raise ApprovalClosed(400, f"The decision must be one of: {', '.join(current.options)}.")
    comment = (comment or "").strip() if current.allow_comment else ""
    if len(comment) > MAX_COMMENT:
        raise ApprovalClosed(400, f"The comment is too long; keep it under {MAX_COMMENT} characters.")
    with database.atomic():
        taken = (ApprovalRequest.update(decision=decision, comment=comment, decided_at=now)
                 .where((ApprovalRequest.id == request.id) & ApprovalRequest.decision.is_null()).execute())
        if taken != 1:
            raise ApprovalClosed(409, "A decision was already made.")
        monitor = request.monitor
        Monitor.update(status="done", wakes_used=Monitor.wakes_used + 1, updated_at=now).where(
            Monitor.id == monitor.id).execute()
        text = decision_text(monitor.description, current.question, decision, comment)
        record_event(monitor, "decision", decision, now, {"reason": f"Decided through the approval link: {decision}.",
                                                          "decision": decision, "comment": comment or None})
        return write_wake(monitor, "approval", "decision", text,
                          {"decision": decision, "comment": comment or None, "decided_by": "link"})


def approval_cards(monitors: list[Monitor], keyring: Keyring, base_url: str, now: datetime) -> dict[str, dict]:
    """What the owner's approval cards show, by monitor id: the link (None for a request made before links were
    kept), the question, options, expiry, state, and the decision with its comment once made."""
    by_id = {m.id: m for m in monitors if (m.source or {}).get("type") == "approval"}
    if not by_id:
        return {}
    cards = {}
    for request in ApprovalRequest.select().where(ApprovalRequest.monitor.in_(list(by_id))):
        monitor = by_id[request.monitor_id]
        token = keyring.decrypt(request.token_encrypted) if request.token_encrypted else None
        state = request_state(request.decision, monitor, now)
        cards[monitor.id] = {
            "url": f"{base_url}/approve/{token}" if token else None, "question": monitor.source.get("question"),
            "options": list(monitor.source.get("options") or ()), "expires_at": monitor.expires_at, "state": state,
            "word": approval_word(state, request.decision), "decision": request.decision,
            "comment": request.comment, "decided_at": request.decided_at}
    return cards
