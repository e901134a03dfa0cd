"""Wake endpoints: /api/wake-endpoints (a runtime token, or the owner's session) and Settings → Wake endpoints.

A runtime registers the URL its wakes are pushed to and gets the signing secret once. Registering an endpoint
lifts no permission: it only chooses where this account's own wakes go, so a runtime token may do it.
"""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, Response, delete, get, post
from litestar.exceptions import NotAuthorizedException, NotFoundException, ValidationException
from litestar.params import Body, FromPath
from litestar.response import Redirect, Template

from app.auth import api_user, check_csrf, csrf_token, session_user
from app.openapi import errors, form_answers
from app.pages import Form
from models import connection, utcnow
from models.conversations import user_conversations
from models.wake_endpoints import (
    EndpointRefused, add_endpoint, check_endpoint, delete_endpoint, enable_endpoint, endpoint_json, owned_endpoint,
    recent_attempts, rotate_secret, user_endpoints,
)
from tasks.pushes import push_due
from tasks.runtime import current, own_endpoints

NO_STORE = {"Cache-Control": "no-store"}


class WakeEndpointsController(Controller):
    @post("/api/wake-endpoints", status_code=201, sync_to_thread=True, responses=errors(400, 401, 403, 409, 429))
    def add(self, request: Request, data: Annotated[Any, Body()]) -> Response:
        """Register {url, description?}; the answer holds the signing secret, shown this once."""
        user = _caller(request)
        body = data if isinstance(data, dict) else {}
        try:
            settings = current().settings
            url, description = check_endpoint(body.get("url"), body.get("description"),
                                              settings.FETCH_ALLOW_LOOPBACK, own_endpoints(settings))
            with connection():
                endpoint, secret = add_endpoint(user, url, description, current().keyring, utcnow())
        except EndpointRefused as exc:
            return Response({"detail": exc.message, "status_code": exc.status}, status_code=exc.status)
        return Response({**endpoint_json(endpoint), "secret": secret}, status_code=201, headers=NO_STORE)

    @get("/api/wake-endpoints", sync_to_thread=True, responses=errors(401, 429))
    def list_all(self, request: Request) -> Response:
        user = _caller(request)
        with connection():
            return Response({"endpoints": [endpoint_json(e) for e in user_endpoints(user)]}, headers=NO_STORE)

    @get("/api/wake-endpoints/{endpoint_id:int}/attempts", sync_to_thread=True, responses=errors(400, 401, 404, 429))
    def attempts(self, request: Request, endpoint_id: FromPath[int]) -> Response:
        """The latest attempts, newest first: status, latency, the answer's first line, the next retry."""
        user = _caller(request)
        with connection():
            endpoint = _owned(user, endpoint_id)
            return Response({"attempts": recent_attempts(endpoint, 50)}, headers=NO_STORE)

    @delete("/api/wake-endpoints/{endpoint_id:int}", status_code=204, sync_to_thread=True,
             responses=errors(400, 401, 403, 404, 429))
    def remove(self, request: Request, endpoint_id: FromPath[int]) -> None:
        user = _caller(request)
        with connection():
            if not delete_endpoint(user, endpoint_id):
                raise NotFoundException("No wake endpoint with this id on your account.")

    @post("/api/wake-endpoints/{endpoint_id:int}/rotate", status_code=200, sync_to_thread=True,
           responses=errors(400, 401, 403, 404, 429))
    def rotate(self, request: Request, endpoint_id: FromPath[int]) -> Response:
        """A new secret; the old one keeps signing beside it for 24 hours."""
        user = _caller(request)
        with connection():
            endpoint = _owned(user, endpoint_id)
            secret = rotate_secret(endpoint, current().keyring, utcnow())
            return Response({**endpoint_json(endpoint), "secret": secret}, headers=NO_STORE)

    @post("/api/wake-endpoints/{endpoint_id:int}/enable", status_code=200, sync_to_thread=True,
           responses=errors(400, 401, 403, 404, 429))
    def enable(self, request: Request, endpoint_id: FromPath[int],
               data: Annotated[Any, Body(description='{"resend": true} to push again what it gave up on')] = None
               ) -> Response:
        """Back on after a 410 or days of failures; later wakes are pushed again. With {"resend": true}, so are
        the wakes it gave up on since its last delivery (`resent` counts them)."""
        resend = data.get("resend", False) if isinstance(data, dict) else False
        if not isinstance(resend, bool):
            raise ValidationException("resend must be true (push again the wakes it gave up on) or false.")
        user = _caller(request)
        with connection():
            resent = enable_endpoint(_owned(user, endpoint_id), utcnow(), resend)
            answer = {**endpoint_json(_owned(user, endpoint_id)), "resent": len(resent)}
        send_pushes(resent)
        return Response(answer, headers=NO_STORE)

    @get("/settings/wake-endpoints", sync_to_thread=True)
    def page(self, request: Request) -> Response:
        user = session_user(request)
        if user is None:
            return Redirect("/login?next=/settings/wake-endpoints")
        with connection():
            endpoints = [(endpoint_json(e), recent_attempts(e, 10)) for e in user_endpoints(user)]
            context = {"user": user, "endpoints": endpoints, "conversations": user_conversations(user)}
        return Template("pages/wake_endpoints.html", context={**context, "csrf": csrf_token(request)},
                        headers=NO_STORE)

    @post("/settings/wake-endpoints/{endpoint_id:int}/enable", status_code=303, sync_to_thread=True,
          responses=form_answers(400, 403, 404, 413, redirects=(302, 303)))
    def enable_from_form(self, request: Request, endpoint_id: FromPath[int],
                         data: Annotated[dict[str, str], Form]) -> Response:
        user = session_user(request)
        if user is None:
            return Redirect("/login?next=/settings/wake-endpoints")
        check_csrf(request, data.get("_csrf"))
        with connection():
            resent = enable_endpoint(_owned(user, endpoint_id), utcnow(), data.get("resend") == "true")
        send_pushes(resent)
        return Redirect("/settings/wake-endpoints", status_code=303)


def send_pushes(push_ids: list[int]) -> None:
    """Pushes due again, sent by the workers now (the scheduler's sweep would send them too, later)."""
    for start in range(0, len(push_ids), 20):
        push_due.send(push_ids[start:start + 20])


def _caller(request: Request):
    """A runtime token's user, or the signed-in owner (CSRF checked on unsafe requests)."""
    try:
        user, from_session = api_user(request)
    except NotAuthorizedException:
        raise NotAuthorizedException("Send Authorization: Bearer <runtime token>, or sign in.") from None
    if from_session and request.method != "GET":
        check_csrf(request, None)
    return user


def _owned(user, endpoint_id: int):
    endpoint = owned_endpoint(user, endpoint_id)
    if endpoint is None:
        raise NotFoundException("No wake endpoint with this id on your account.")
    return endpoint
