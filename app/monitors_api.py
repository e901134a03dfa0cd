"""GET /api/monitors and POST /api/monitors/{id}/pause|resume|cancel, for scripts and the page's buttons."""

from __future__ import annotations

from litestar import Controller, Request, Response, delete, get, post
from litestar.exceptions import NotFoundException, ValidationException
from litestar.params import FromPath, FromQuery

from app.auth import api_user, bearer_token, check_csrf, session_user
from app.openapi import MonitorList, Secret, errors
from app.templating import render
from models import connection, utcnow
from models.triggers import reveal_secret
from tasks.runtime import current
from models.conversations import find_conversation
from models.describe_data import facts_for
from models.monitors import (
    MonitorNotFound, StillRunning, TransitionRefused, change_status, delete_ended, find_monitor, monitor_json,
    user_monitors,
)
from models.claims import claim_now
from engine.describe import is_polled
from models.tables import ACTIVE
from tasks.checks import send_claims
from tasks.events import publish_monitor
from app.devices import owner_session
from models.commands import CommandRefused, decide_command
from models.tools import ToolRefused, decide_tool
from models.tables import AWAITING

ACTIONS = ("pause", "resume", "cancel")
#: a command's approval: the owner's browser session only
DECISIONS = ("approve", "deny")
REVEALS_PER_MINUTE = 10
#: Check now: once per this many seconds per monitor
CHECK_NOW_SECONDS = 10
NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}


class MonitorsController(Controller):
    path = "/api/monitors"

    @get("/", sync_to_thread=True, responses=errors(400, 401))
    def list_monitors(self, request: Request, conversation_id: FromQuery[str | None] = None,
                      status: FromQuery[str | None] = None) -> MonitorList:
        if status not in (None, "live", "all"):
            raise ValidationException("status must be live or all.")
        user, _ = api_user(request)
        with connection():
            conversation = find_conversation(user, conversation_id) if conversation_id else None
            if conversation_id and conversation is None:
                return {"monitors": []}
            monitors = user_monitors(user, conversation, live=status == "live")
            return {"monitors": [monitor_json(m) for m in monitors]}

    @get("/{monitor_id:str}", sync_to_thread=True, responses=errors(401, 404, 429))
    def get_one(self, request: Request, monitor_id: FromPath[str]) -> Response:
        """One monitor, with monitorState as seed 001 names it (armed, awaiting_approval, fired, expired, error,
        cancelled; paused when its owner paused it), for workflows that poll it."""
        user, _ = api_user(request)
        with connection():
            monitor = find_monitor(user, monitor_id)
        if monitor is None:
            raise NotFoundException("No such monitor.")
        return Response(monitor_json(monitor), headers={"Cache-Control": "no-store"})

    @get("/{monitor_id:str}/secret", sync_to_thread=True, responses=errors(404, 429))
    def secret(self, request: Request, monitor_id: FromPath[str]) -> Response[Secret]:
        """The signing secret, for the owner's own browser session only; audited, rate limited, never cached."""
        user = session_user(request)
        if user is None or bearer_token(request):
            raise NotFoundException("No such secret.")
        runtime = current()
        if not runtime.limiter.allow("reveal-secret", str(user.id), REVEALS_PER_MINUTE):
            return Response({"detail": "Too many reveals; wait a minute."}, status_code=429, headers=NO_STORE)
        with connection():
            secret = reveal_secret(user.id, monitor_id, runtime.keyring, utcnow())
        if secret is None:
            raise NotFoundException("No such secret.")
        if request.headers.get("hx-request"):
            return Response(render("partials/_secret.html", secret=secret), media_type="text/html", headers=NO_STORE)
        return Response({"secret": secret}, headers=NO_STORE)

    @post("/{monitor_id:str}/check", status_code=202, sync_to_thread=True, responses=errors(401, 403, 404, 409, 429))
    def check_now(self, request: Request, monitor_id: FromPath[str]) -> Response:
        """Check a polled monitor at once, as its schedule would (no model call unless it fires); once per
        CHECK_NOW_SECONDS per monitor. The owner's session with its CSRF token, or the account's runtime token."""
        user, from_session = api_user(request)
        if from_session:
            check_csrf(request, None)
        with connection():
            monitor = find_monitor(user, monitor_id)
            if monitor is None:
                raise NotFoundException("No such monitor.")
            refused = _not_checkable(monitor)
            if refused:
                return _answer(request, monitor_id, refused, 409)
            limiter = current().limiter
            wait = limiter.blocked_for("check-now", monitor_id, 1, CHECK_NOW_SECONDS)
            if wait:
                return _answer(request, monitor_id, f"It was just checked; check again in {wait} seconds.", 429,
                               {"Retry-After": str(wait)})
            limiter.count("check-now", monitor_id, 1, CHECK_NOW_SECONDS)
            now = utcnow()
            claim = claim_now(monitor_id, now)
            if claim is None:
                return _answer(request, monitor_id, "The monitor stopped meanwhile; reload to see why.", 409)
            send_claims([claim], now)
        return _answer(request, monitor_id, "Checking now; the page shows what it finds.", 202)

    @delete("/{monitor_id:str}", status_code=200, sync_to_thread=True, responses=errors(403, 404, 409))
    def delete_monitor(self, request: Request, monitor_id: FromPath[str]) -> Response:
        """Delete a monitor that has ended (done, cancelled, expired, error) with its history; its wakes stay in
        the conversation. The owner's browser session with its CSRF token only."""
        user = owner_session(request)
        with connection():
            try:
                delete_ended(user, monitor_id)
            except MonitorNotFound:
                raise NotFoundException("No such monitor.") from None
            except StillRunning as exc:
                return Response({"detail": str(exc), "status_code": 409}, status_code=409)
        if request.headers.get("hx-request"):
            return Response("", media_type="text/html")  # the row swaps itself out
        return Response({"deleted": monitor_id})

    @post("/{monitor_id:str}/{action:str}", status_code=200, sync_to_thread=True,
          responses=errors(401, 403, 404, 409))
    def act(self, request: Request, monitor_id: FromPath[str], action: FromPath[str]) -> Response:
        if action in DECISIONS:
            return _decide(request, monitor_id, action == "approve")
        if action not in ACTIONS:
            raise NotFoundException(f"Unknown action {action!r}; use pause, resume or cancel.")
        user, from_session = api_user(request)
        if from_session:
            check_csrf(request, None)
        with connection():
            try:
                monitor = change_status(user, monitor_id, action)
            except MonitorNotFound:
                raise NotFoundException("No such monitor.") from None
            except TransitionRefused as exc:
                return Response({"detail": f"{str(exc)[:1].upper()}{str(exc)[1:]}.", "status_code": 409},
                                status_code=409)
            publish_monitor(monitor)
            if request.headers.get("hx-request"):
                return Response(render("partials/_monitor_row.html", monitor=monitor,
                                       facts=facts_for(monitor, utcnow())), media_type="text/html")
            return Response(monitor_json(monitor))


def _not_checkable(monitor) -> str | None:
    """Why Check now can't run for `monitor`, in a sentence, or None."""
    if not (monitor.polled and is_polled(monitor.source or {})):
        return ("Only a polled source (a page, feed, JSON, file, metric, command or tool poll) can be checked now; "
                "this one is checked when its events arrive.")
    if monitor.status != ACTIVE:
        hint = " Resume it first." if monitor.status == "paused" else ""
        return f"The monitor is {monitor.status.replace('_', ' ')}, so it is not checked.{hint}"
    return None


def _answer(request: Request, monitor_id: str, sentence: str, status: int, headers: dict | None = None) -> Response:
    """Check now's answer: JSON for the API, the button's status line for the page (htmx)."""
    headers = {**NO_STORE, **(headers or {})}
    if request.headers.get("hx-request"):
        html = render("partials/_check_now_status.html", monitor_id=monitor_id, sentence=sentence, refused=status >= 400)
        return Response(html, media_type="text/html", status_code=status, headers=headers)
    body = {"monitor_id": monitor_id, "checking": True} if status < 400 else {"detail": sentence, "status_code": status}
    return Response(body, status_code=status, headers=headers)


def _is_tool_call(user, monitor_id: str) -> bool:
    monitor = find_monitor(user, monitor_id)
    return monitor is not None and (monitor.source or {}).get("type") == "tool"


def _decide(request: Request, monitor_id: str, approve: bool) -> Response:
    """Approve or deny an awaiting command: the owner's session with its CSRF token, never a runtime token."""
    user = owner_session(request)
    with connection():
        try:
            if _is_tool_call(user, monitor_id):
                monitor, woke = decide_tool(user, monitor_id, approve, utcnow())
            else:
                monitor, woke = decide_command(user, monitor_id, approve, utcnow())
        except (CommandRefused, ToolRefused) as exc:
            return Response({"detail": str(exc), "status_code": 409}, status_code=409)
        publish_monitor(monitor, woke, status_before=AWAITING)
        if request.headers.get("hx-request"):
            return Response(render("partials/_command_card.html", monitor=monitor), media_type="text/html")
        return Response(monitor_json(monitor))
