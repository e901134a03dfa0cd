"""The owner's pages: login, Settings → Monitors, conversations."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, Request, Response, get, post
from litestar.enums import RequestEncodingType
from litestar.exceptions import NotFoundException
from litestar.params import Body, FromPath, FromQuery
from litestar.response import Redirect, Template

from app.auth import browser_session, check_csrf, csrf_token, session_user, sign_in, sign_out
from app.login_limits import LoginLocked, checked_login
from app.openapi import form_answers
from engine.links import app_base, public_base
from engine.signatures import example_body, example_curl
from engine.spec import check_from_record
from models import connection, utcnow
from models.approvals import approval_cards as load_approval_cards
from models.describe_data import monitor_facts
from models.triggers import link_cards
from tasks.runtime import current
from models.accounts import authenticate, has_users
from models.conversations import user_conversations
from models.monitors import user_monitors
from models.monitor_search import KINDS, STATUSES, FilterRefused, Filters, parse_filters, search_monitors
from models.tables import AWAITING, Conversation, Message

Form = Body(media_type=RequestEncodingType.URL_ENCODED)


def trigger_cards(monitors) -> dict[str, dict]:
    """Link cards of the webhook monitors among `monitors`, with a working example curl each."""
    runtime = current()
    settings = runtime.settings
    webhooks = {m.id: m for m in monitors if (m.source or {}).get("type") == "webhook"}
    if not webhooks:
        return {}
    cards = link_cards(list(webhooks), runtime.keyring, public_base(settings.PUBLIC_API_BASE_URL, settings.API_URL),
                       utcnow())
    for monitor_id, card in cards.items():
        check = check_from_record(webhooks[monitor_id].check)
        card["curl"] = example_curl(card["url"], card["signature"], example_body(check))
    return cards


def approval_cards(monitors) -> dict[str, dict]:
    """Cards of the approval monitors among `monitors`: the page link to forward, the state, the decision."""
    settings = current().settings
    api = public_base(settings.PUBLIC_API_BASE_URL, settings.API_URL)
    return load_approval_cards(monitors, current().keyring, app_base(settings.PUBLIC_APP_URL, settings.SERVE_UI, api),
                               utcnow())


def _local_path(value: str | None) -> str | None:
    """Where to go after signing in: a path on this site only (never //host or a scheme)."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value or len(value) > 300:
        return None
    return value


def _authenticate(email: str, password: str):
    with connection():
        return authenticate(email, password)


def _login_page(request: Request, error: str | None, after: str | None, status: int = 200,
                headers: dict | None = None) -> Template:
    return Template("pages/login.html", status_code=status, headers=headers,
                    context={"csrf": csrf_token(request), "error": error, "next": after})


class PagesController(Controller):
    @get("/", sync_to_thread=True)
    def home(self, request: Request) -> Redirect:
        if session_user(request):
            return Redirect("/settings/monitors")
        with connection():
            return Redirect("/login" if has_users() else "/setup")

    @get("/login", sync_to_thread=True)
    def login_form(self, request: Request) -> Response:
        with connection():
            if not has_users():
                return Redirect("/setup")  # first run: there is no one to sign in yet
        return _login_page(request, None, _local_path(request.query_params.get("next")))

    @post("/login", sync_to_thread=True)
    def login(self, request: Request, data: Annotated[dict[str, str], Form]) -> Response:
        """Sign in; refused (429, Retry-After) after too many wrong passwords for the email or from the address."""
        check_csrf(request, data.get("_csrf"))
        email, password, after = data.get("email", ""), data.get("password", ""), _local_path(data.get("next"))
        try:
            user = checked_login(request, email, lambda: _authenticate(email, password))
        except LoginLocked as locked:
            return _login_page(request, str(locked), after, 429, {"Retry-After": str(locked.wait)})
        if user is None:
            return _login_page(request, "Wrong email or password.", after, 400)
        sign_in(request, user)
        return Redirect(after or "/settings/monitors", status_code=303)

    @post("/logout", status_code=303, sync_to_thread=True, responses=form_answers(400, 403, 413))
    def logout(self, request: Request, data: Annotated[dict[str, str], Form]) -> Redirect:
        """End this browser's session at once: its cookie, replayed, is signed out."""
        if browser_session(request) is not None:
            check_csrf(request, data.get("_csrf"))
        sign_out(request)
        return Redirect("/login", status_code=303)

    @get("/settings/monitors", sync_to_thread=True)
    def monitors_page(self, request: Request, status: FromQuery[str | None] = None,
                      conversation: FromQuery[str | None] = None, kind: FromQuery[str | None] = None,
                      q: FromQuery[str | None] = None) -> Response:
        """The account's monitors; filtered by status, conversation, kind and a search (GET parameters)."""
        user = session_user(request)
        if user is None:
            return Redirect("/login")
        try:
            filters, refused = parse_filters(status, conversation, kind, q), None
        except FilterRefused as exc:
            filters, refused = Filters(), str(exc)
        with connection():
            everything = user_monitors(user)
            monitors = search_monitors(user, filters) if filters.any else everything
            context = {"user": user, "monitors": monitors, "conversations": user_conversations(user),
                       "awaiting": [m for m in everything if m.status == AWAITING],
                       "monitor_facts": monitor_facts(monitors, utcnow()), "filters": filters,
                       "filter_error": refused, "any_monitors": bool(everything),
                       "filter_statuses": STATUSES, "filter_kinds": KINDS}
        return Template("pages/monitors.html", context={**context, "csrf": csrf_token(request)},
                        status_code=400 if refused else 200)

    @get("/conversations/{conversation_id:int}", sync_to_thread=True)
    def conversation_page(self, request: Request, conversation_id: FromPath[int]) -> Response:
        user = session_user(request)
        if user is None:
            return Redirect("/login")
        with connection():
            conversation = Conversation.get_or_none((Conversation.id == conversation_id) & (Conversation.user == user))
            if conversation is None:
                raise NotFoundException("No such conversation.")
            monitors = user_monitors(user, conversation)
            context = {"user": user, "conversation": conversation,
                       "messages": list(Message.select().where(Message.conversation == conversation)
                                        .order_by(Message.id)),
                       "monitors": monitors, "cards": trigger_cards(monitors),
                       "approvals": approval_cards(monitors), "monitor_facts": monitor_facts(monitors, utcnow()),
                       "commands": [m for m in monitors if (m.source or {}).get("type") in ("command", "tool")],
                       "conversations": user_conversations(user)}
        return Template("pages/conversation.html", context={**context, "csrf": csrf_token(request)})

