"""Settings → Models: the judge model catalog. Keys go in, and never come back out."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, Request, Response, get, post
from litestar.exceptions import NotFoundException
from litestar.params import FromPath
from litestar.response import Redirect, Template

from app.auth import check_csrf, csrf_token, session_user
from app.pages import Form
from models import connection
from models.catalog import CatalogError, delete_entry, entries, save_entry
from models.conversations import user_conversations
from tasks.runtime import current


class ModelsController(Controller):
    path = "/settings/models"

    @get("/", sync_to_thread=True)
    def page(self, request: Request) -> Response:
        return self._render(request, error=None)

    @post("/", sync_to_thread=True)
    def save(self, request: Request, data: Annotated[dict[str, str], Form]) -> Response:
        user = session_user(request)
        if user is None:
            return Redirect("/login")
        check_csrf(request, data.get("_csrf"))
        with connection():
            try:
                save_entry(current().keyring, data.get("name", ""), data.get("base_url", ""),
                           data.get("model", ""), data.get("api_key", ""), data.get("api_version", ""))
            except CatalogError as exc:
                return self._render(request, error=str(exc), status_code=400)
        return Redirect("/settings/models", status_code=303)

    @post("/{name:str}/delete", sync_to_thread=True)
    def delete(self, request: Request, name: FromPath[str], data: Annotated[dict[str, str], Form]) -> Response:
        if session_user(request) is None:
            return Redirect("/login")
        check_csrf(request, data.get("_csrf"))
        with connection():
            if not delete_entry(name):
                raise NotFoundException("No such model.")
        return Redirect("/settings/models", status_code=303)

    def _render(self, request: Request, error: str | None, status_code: int = 200) -> Response:
        user = session_user(request)
        if user is None:
            return Redirect("/login")
        with connection():
            context = {"user": user, "models": entries(), "conversations": user_conversations(user),
                       "fallback": current().judge_policy.fallback, "error": error}
        return Template("pages/models.html", context={**context, "csrf": csrf_token(request)},
                        status_code=status_code)
