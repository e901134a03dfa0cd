"""Devices for their owner: Settings → Devices, GET/PATCH /api/devices, revoke; and the approval page of a
command (/commands/<monitor id>). A device's approval mode and denylist, and a command's approval, are changed
only by the owner's browser session (CSRF), never by a runtime token: an agent can't lift its own approval."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, Response, get, patch, post
from litestar.exceptions import NotFoundException, PermissionDeniedException
from litestar.params import FromPath, JSONBody
from litestar.response import Redirect, Template

from app.auth import api_user, bearer_token, check_csrf, csrf_token, session_user
from app.openapi import FormPost, errors, form_answers
from app.pages import Form
from engine.denylist import DEFAULT_PATTERNS
from engine.links import public_base
from models import connection, utcnow
from models.commands import pause_device_monitors
from models.conversations import user_conversations
from models.devices import (
    DeviceError, create_pairing_code, device_json, owned_device, revoke_device, update_device, user_devices,
)
from models.monitors import load_for_check
from models.tables import Monitor
from tasks.events import publish_device, publish_monitor
from tasks.runtime import current

OWNER_ONLY = ("Only the owner, signed in to Vigil in a browser, can change a device or approve a command; a "
              "runtime token never can.")


#: what the owner arms on the approval card: commands on devices, and tool calls
APPROVED_KINDS = ("command", "tool")


def owner_session(request: Request, submitted: str | None = None):
    """The signed-in owner of an unsafe request (CSRF checked); 403 for a runtime token."""
    if bearer_token(request):
        raise PermissionDeniedException(OWNER_ONLY)
    user = session_user(request)
    if user is None:
        raise PermissionDeniedException("Sign in first.")
    check_csrf(request, submitted)
    return user


class DevicesController(Controller):
    @get("/api/devices", sync_to_thread=True, responses=errors(401, 429))
    def list_devices(self, request: Request) -> dict:
        user, _ = api_user(request)
        with connection():
            presence, now = current().presence, utcnow()
            return {"devices": [device_json(d, now, presence) for d in user_devices(user)]}

    @patch("/api/devices/{device_id:int}", sync_to_thread=True, responses=errors(400, 401, 403, 404))
    def change(self, request: Request, device_id: FromPath[int], data: JSONBody[Any]) -> Response:
        user = owner_session(request)
        with connection():
            device = _owned(user, device_id)
            try:
                device = update_device(device, data)
            except DeviceError as exc:
                return Response({"detail": str(exc)}, status_code=400)
            publish_device(device)
            return Response(device_json(device, utcnow(), current().presence))

    @post("/api/devices/{device_id:int}/revoke", status_code=200, sync_to_thread=True,
          responses=errors(400, 401, 403, 404))
    def revoke(self, request: Request, device_id: FromPath[int]) -> Response:
        user = owner_session(request)
        with connection():
            device = revoke_device(_owned(user, device_id), utcnow())
            for monitor, woke in pause_device_monitors(device, f"Its device {device.name!r} was revoked by the "
                                                       "owner, so its command can't run any more.", utcnow()):
                publish_monitor(monitor, woke)
            publish_device(device, listing=True)
        if request.headers.get("hx-request"):
            return Response("", media_type="text/html")
        return Response({"revoked": True, "id": device.id})

    @get("/settings/devices", sync_to_thread=True)
    def page(self, request: Request) -> Response:
        return _devices_page(request, session_user(request))

    @post("/settings/devices/pair-code", status_code=200, sync_to_thread=True, operation_class=FormPost,
          responses=form_answers(403, 413, pages=(200, 400), redirects=()))
    def pair_code(self, request: Request, data: Annotated[dict[str, str], Form]) -> Response:
        user = owner_session(request, data.get("_csrf"))
        with connection():
            code = create_pairing_code(user, data.get("name", ""), utcnow())
        return _devices_page(request, user, code=code)

    @post("/settings/devices/{device_id:int}", status_code=303, sync_to_thread=True, operation_class=FormPost,
          responses=form_answers(403, 404, 413, pages=(400,)))
    def save(self, request: Request, device_id: FromPath[int], data: Annotated[dict[str, str], Form]) -> Response:
        user = owner_session(request, data.get("_csrf"))
        changes = {"approval_mode": data.get("approval_mode", ""),
                   "denylist": [line for line in data.get("denylist", "").splitlines() if line.strip()]}
        with connection():
            try:
                publish_device(update_device(_owned(user, device_id), changes))
            except DeviceError as exc:
                return _devices_page(request, user, error=str(exc), status=400)
        return Redirect("/settings/devices", status_code=303)

    @get("/commands/{monitor_id:str}", sync_to_thread=True)
    def command_page(self, request: Request, monitor_id: FromPath[str]) -> Response:
        """The approval card on a page of its own: the link the agent hands the user."""
        user = session_user(request)
        if user is None:
            return Redirect(f"/login?next=/commands/{monitor_id}")
        with connection():
            monitor = load_for_check(monitor_id)
            if monitor is None or monitor.user_id != user.id or (monitor.source or {}).get("type") not in APPROVED_KINDS:
                raise NotFoundException("No such command.")
            context = {"user": user, "monitor": monitor, "conversations": user_conversations(user)}
        return Template("pages/command.html", context={**context, "csrf": csrf_token(request)})


def _owned(user, device_id: int):
    device = owned_device(user, device_id)
    if device is None:
        raise NotFoundException("No such device.")
    return device


def _devices_page(request: Request, user, code: str | None = None, error: str | None = None,
                  status: int = 200) -> Response:
    if user is None:
        return Redirect("/login?next=/settings/devices")
    settings = current().settings
    with connection():
        presence, now = current().presence, utcnow()
        devices = [(d, device_json(d, now, presence)) for d in user_devices(user)]
        context = {"user": user, "devices": devices, "code": code, "error": error,
                   "server": public_base(settings.PUBLIC_API_BASE_URL, settings.API_URL),
                   "default_denylist": [name for name, _ in DEFAULT_PATTERNS],
                   "conversations": user_conversations(user)}
    return Template("pages/devices.html", status_code=status, context={**context, "csrf": csrf_token(request)})


def command_monitors(monitors: list[Monitor]) -> list[Monitor]:
    """The command monitors among these, for their cards."""
    return [m for m in monitors if (m.source or {}).get("type") == "command"]
