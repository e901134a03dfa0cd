"""Settings → Models: the signed-in account's own judge models. Keys go in, and never come back out."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, Request, Response, get, post
from litestar.exceptions import NotFoundException
from litestar.params import FromPath
from litestar.response import Redirect, Template

from app.auth import check_csrf, csrf_token, session_user
from app.openapi import FormPost, form_answers
from app.pages import Form
from models import connection
from models.catalog import CatalogError, check_base_url, delete_entry, entries, save_entry
from models.conversations import user_conversations
from tasks.runtime import current


class ModelsController(Controller):
    path = "/settings/models"

    @get("/", sync_to_thread=True)
    def page(self, request: Request) -> Response:
        return self._render(request, error=None)

    @post("/", status_code=303, sync_to_thread=True, operation_class=FormPost,
          responses=form_answers(403, 413, pages=(400,), redirects=(302, 303)))
    def save(self, request: Request, data: Annotated[dict[str, str], Form]) -> Response:
        """Save one of the signed-in account's own models; its base URL through the SSRF guard first (DNS, with
        no database connection held)."""
        user = session_user(request)
        if user is None:
            return Redirect("/login")
        check_csrf(request, data.get("_csrf"))
        runtime = current()
        allow_private = runtime.judge_policy.allow_private
        try:
            base_url = check_base_url(data.get("base_url", ""), allow_private)
            with connection():
                save_entry(runtime.keyring, user.id, data.get("name", ""), base_url, data.get("model", ""),
                           data.get("api_key", ""), data.get("api_version", ""), allow_private=allow_private)
        except CatalogError as exc:
            return self._render(request, error=str(exc), status_code=400,  # the form keeps what was typed, not the key
                                typed={key: data.get(key, "") for key in ("name", "base_url", "model", "api_version")})
        return Redirect("/settings/models", status_code=303)

    @post("/{name:str}/delete", status_code=303, sync_to_thread=True,
          responses=form_answers(400, 403, 404, 413, redirects=(302, 303)))
    def delete(self, request: Request, name: FromPath[str], data: Annotated[dict[str, str], Form]) -> Response:
        user = session_user(request)
        if user is None:
            return Redirect("/login")
        check_csrf(request, data.get("_csrf"))
        with connection():
            if not delete_entry(user.id, name):
                raise NotFoundException("No such model.")
        return Redirect("/settings/models", status_code=303)

    def _render(self, request: Request, error: str | None, status_code: int = 200, typed: dict | None = None
                ) -> Response:
        user = session_user(request)
        if user is None:
            return Redirect("/login")
        with connection():
            context = {"user": user, "models": entries(user.id), "conversations": user_conversations(user),
                       "fallback": current().judge_policy.fallback, "error": error, "typed": typed or {}}
        return Template("pages/models.html", context={**context, "csrf": csrf_token(request)},
                        status_code=status_code)
