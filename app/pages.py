"""The owner's pages: login, Settings → Monitors, conversations."""

from __future__ import annotations

import secrets
from typing import Annotated

from litestar import Controller, Request, Response, get, post
from litestar.enums import RequestEncodingType
from litestar.exceptions import NotFoundException
from litestar.params import Body, FromPath
from litestar.response import Redirect, Template

from app.auth import SESSION_CSRF, SESSION_USER, check_csrf, csrf_token, session_user
from engine.links import public_base
from engine.signatures import example_body, example_curl
from engine.spec import check_from_record
from models import connection, utcnow
from models.triggers import link_cards
from tasks.runtime import current
from models.accounts import authenticate
from models.conversations import user_conversations
from models.monitors import user_monitors
from models.tables import Conversation, Message

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


class PagesController(Controller):
    @get("/", sync_to_thread=True)
    def home(self, request: Request) -> Redirect:
        return Redirect("/settings/monitors" if session_user(request) else "/login")

    @get("/login", sync_to_thread=True)
    def login_form(self, request: Request) -> Template:
        return Template("pages/login.html", context={"csrf": csrf_token(request), "error": None})

    @post("/login", sync_to_thread=True)
    def login(self, request: Request, data: Annotated[dict[str, str], Form]) -> Response:
        check_csrf(request, data.get("_csrf"))
        with connection():
            user = authenticate(data.get("email", ""), data.get("password", ""))
        if user is None:
            return Template("pages/login.html", status_code=400,
                            context={"csrf": csrf_token(request), "error": "Wrong email or password."})
        request.set_session({SESSION_USER: user.id, SESSION_CSRF: secrets.token_urlsafe(32)})
        return Redirect("/settings/monitors", status_code=303)

    @post("/logout", sync_to_thread=True)
    def logout(self, request: Request, data: Annotated[dict[str, str], Form]) -> Redirect:
        check_csrf(request, data.get("_csrf"))
        request.clear_session()
        return Redirect("/login", status_code=303)

    @get("/settings/monitors", sync_to_thread=True)
    def monitors_page(self, request: Request) -> Response:
        user = session_user(request)
        if user is None:
            return Redirect("/login")
        with connection():
            context = {"user": user, "monitors": user_monitors(user), "conversations": user_conversations(user)}
        return Template("pages/monitors.html", context={**context, "csrf": csrf_token(request)})

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
                       "conversations": user_conversations(user)}
        return Template("pages/conversation.html", context={**context, "csrf": csrf_token(request)})

