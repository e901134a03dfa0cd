"""Runtime tokens: Settings → Tokens and GET/POST/DELETE /api/tokens. The owner's browser session only (CSRF
checked on changes): a runtime token never lists, creates or revokes tokens. A new token is shown once; only its
digest is stored. The same page holds the owner's own sign-in: change the password (the other browser sessions
end), and sign out everywhere (every session ends, this one too)."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, Response, delete, get, post
from litestar.exceptions import NotFoundException, PermissionDeniedException, ValidationException
from litestar.params import Body, FromPath
from litestar.response import Redirect, Template

from app.auth import bearer_token, browser_session, check_csrf, csrf_token, session_user, sign_out
from app.login_limits import LoginLocked, checked_login
from app.once import keep_once, take_once
from app.openapi import FormPost, errors, form_answers
from app.pages import Form
from models import connection
from engine.tokens import verify_password
from models.accounts import AccountError, change_password, issue_token, revoke_token, token_json, user_tokens
from models.conversations import user_conversations
from tasks.events import publish_token, publish_token_revoked

OWNER_ONLY = ("Only the owner, signed in to Vigil in a browser, can list, create or revoke runtime tokens; a "
              "runtime token never can.")
NO_SUCH_TOKEN = "No runtime token with this id on your account."
NO_STORE = {"Cache-Control": "no-store"}
PAGE = "/settings/tokens"


class TokensController(Controller):
    @get("/api/tokens", sync_to_thread=True, responses=errors(401, 403))
    def list_all(self, request: Request) -> Response:
        user = _owner(request)
        with connection():
            return Response({"tokens": [token_json(t) for t in user_tokens(user)]}, headers=NO_STORE)

    @post("/api/tokens", status_code=201, sync_to_thread=True, responses=errors(400, 401, 403, 413))
    def create(self, request: Request, data: Annotated[Any, Body()]) -> Response:
        """A new runtime token {label?}: the answer holds the token, the only time it is shown."""
        user = _owner(request, unsafe=True)
        if data is not None and not isinstance(data, dict):
            raise ValidationException('No token was created: send a JSON object, {"label": "laptop agent"} or {}.')
        label = data.get("label") if data else None
        try:
            with connection():
                row, token = issue_token(user, "" if label is None else label)
        except AccountError as exc:
            raise ValidationException(f"No token was created: {exc}.") from None
        publish_token(row)  # its row appears on the owner's open Settings → Tokens pages
        created = token_json(row)
        return Response({"id": row.id, "label": row.label, "token": token, "created_at": created["created_at"]},
                        status_code=201, headers=NO_STORE)

    @delete("/api/tokens/{token_id:int}", status_code=204, sync_to_thread=True, responses=errors(400, 401, 403, 404))
    def revoke(self, request: Request, token_id: FromPath[int]) -> None:
        """Revoke it: the next call with it is 401."""
        user = _owner(request, unsafe=True)
        with connection():
            if not revoke_token(user, token_id):
                raise NotFoundException(NO_SUCH_TOKEN)
        publish_token_revoked(user.id, token_id)  # its row leaves the owner's open Settings → Tokens pages

    @get("/settings/tokens", sync_to_thread=True)
    def page(self, request: Request) -> Response:
        if bearer_token(request):
            raise PermissionDeniedException(OWNER_ONLY)
        user = session_user(request)
        if user is None:
            return Redirect("/login?next=/settings/tokens")
        new, cookies = take_once(request, PAGE)  # the token just made, shown on this one view after the redirect
        return _page(request, user, new=new, cookies=cookies)

    @post("/settings/tokens", status_code=303, sync_to_thread=True, operation_class=FormPost,
          responses=form_answers(403, 413, pages=(400,)))
    def create_from_form(self, request: Request, data: Annotated[dict[str, str], Form]) -> Response:
        user = _owner(request, unsafe=True, submitted=data.get("_csrf"))
        try:
            with connection():
                row, token = issue_token(user, data.get("label", ""))
        except AccountError as exc:
            return _page(request, user, error=f"No token was created: {exc}.", status=400,
                         label=data.get("label", ""))
        publish_token(row)  # the owner's other open tabs list it too (never its secret)
        # POST-redirect-GET: the page after the redirect shows the token once; a reload makes no second one
        return Redirect(PAGE, status_code=303, cookies=[keep_once(request, PAGE, {"label": row.label,
                                                                                  "token": token})])

    @post("/settings/tokens/{token_id:int}/revoke", status_code=303, sync_to_thread=True,
          responses=form_answers(400, 403, 404, 413))
    def revoke_from_form(self, request: Request, token_id: FromPath[int],
                         data: Annotated[dict[str, str], Form]) -> Response:
        user = _owner(request, unsafe=True, submitted=data.get("_csrf"))
        with connection():
            if not revoke_token(user, token_id):
                raise NotFoundException(NO_SUCH_TOKEN)
        publish_token_revoked(user.id, token_id)  # its row leaves the owner's open Settings → Tokens pages
        return Redirect("/settings/tokens", status_code=303)

    @post("/settings/password", status_code=200, sync_to_thread=True, operation_class=FormPost,
          responses=form_answers(403, 413, pages=(200, 400, 429), redirects=()))
    def change_password(self, request: Request, data: Annotated[dict[str, str], Form]) -> Response:
        """A new password, given the current one (counted as a sign-in: wrong ones lock it the same way); the
        account's other browser sessions end, this one stays."""
        user = _owner(request, unsafe=True, submitted=data.get("_csrf"))
        password = data.get("password", "")
        if password != data.get("password_again", ""):
            return _page(request, user, account_error="The two new passwords differ; type the same one twice.",
                         status=400)
        try:
            right = checked_login(request, user.email,
                                  lambda: verify_password(data.get("current_password", ""), user.password_hash))
        except LoginLocked as locked:
            return _page(request, user, account_error=str(locked), status=429,
                         headers={"Retry-After": str(locked.wait)})
        if not right:
            return _page(request, user, account_error="The current password is wrong; nothing was changed.",
                         status=400)
        try:
            with connection():
                ended = change_password(user, password, keep=browser_session(request))
        except AccountError as exc:
            return _page(request, user, account_error=f"The password was not changed: {exc}.", status=400)
        return _page(request, user, notice=f"Password changed; {ended} other browser session"
                                           f"{'' if ended == 1 else 's'} signed out.")

    @post("/settings/sign-out-everywhere", status_code=303, sync_to_thread=True, responses=form_answers(400, 403, 413))
    def sign_out_everywhere(self, request: Request, data: Annotated[dict[str, str], Form]) -> Redirect:
        """End every browser session of the account at once, this one too (runtime tokens are not touched)."""
        user = _owner(request, unsafe=True, submitted=data.get("_csrf"))
        sign_out(request, everywhere=user)
        return Redirect("/login", status_code=303)


def _owner(request: Request, unsafe: bool = False, submitted: str | None = None):
    """The signed-in owner (CSRF checked when `unsafe`); 403 for a runtime token, or with no session."""
    if bearer_token(request):
        raise PermissionDeniedException(OWNER_ONLY)
    user = session_user(request)
    if user is None:
        raise PermissionDeniedException("Sign in first.")
    if unsafe:
        check_csrf(request, submitted)
    return user


def _page(request: Request, user, new: dict | None = None, error: str | None = None, status: int = 200,
          account_error: str | None = None, notice: str | None = None, headers: dict | None = None,
          label: str = "", cookies: list | None = None) -> Response:
    with connection():
        context = {"user": user, "tokens": user_tokens(user), "conversations": user_conversations(user),
                   "new": new, "error": error, "account_error": account_error, "notice": notice, "label": label}
    return Template("pages/tokens.html", context={**context, "csrf": csrf_token(request)}, status_code=status,
                    headers={**NO_STORE, **(headers or {})}, cookies=cookies)
