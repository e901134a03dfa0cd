"""/monitors/{id}, the monitor's evidence: what it watches, its counters, and a timeline of what its checks found
(quiet checks folded into counted spans), with the answer to "why didn't it fire?"; and the same as JSON,
GET /api/monitors/{id}/events?before=&limit=. The owner's session, or a runtime token for the JSON."""

from __future__ import annotations

from litestar import Controller, Request, Response, get
from litestar.exceptions import NotFoundException, ValidationException
from litestar.params import FromPath, FromQuery
from litestar.response import Redirect, Template

from app.auth import api_user, csrf_token, session_user
from app.openapi import errors
from app.templating import render
from engine.describe import expecting
from models import connection, utcnow
from models.conversations import user_conversations
from models.events import history, item_json
from models.monitors import find_monitor, monitor_json
from models.screenshots import screenshot_image, screenshots_of
from models.readings import is_numeric, is_text_change, latest_change, monitor_chart
from models.tables import ACTIVE, Message

MAX_LIMIT = 200
NO_STORE = {"Cache-Control": "no-store"}


class MonitorPageController(Controller):
    @get("/api/monitors/{monitor_id:str}/events", sync_to_thread=True, responses=errors(400, 401, 404))
    def events(self, request: Request, monitor_id: FromPath[str], before: FromQuery[str | None] = None,
               limit: FromQuery[int] = 50) -> Response:
        """The timeline, newest first, a page at a time: pass `next_before` as `before` for the next."""
        if not 1 <= limit <= MAX_LIMIT:
            raise ValidationException(f"limit must be between 1 and {MAX_LIMIT}.")
        if before is not None and not (before.isascii() and before.isdigit() and len(before) <= 18):
            raise ValidationException("before must be a next_before this endpoint returned.")
        user, _ = api_user(request)
        with connection():
            monitor = find_monitor(user, monitor_id)
            if monitor is None:
                raise NotFoundException("No such monitor.")
            page = history(monitor, int(before) if before else None, limit)
        return Response({"monitor_id": monitor_id, "items": [item_json(i) for i in page["items"]],
                         "why_not": page["why_not"], "next_before": page["next_before"]}, headers=NO_STORE)

    @get("/monitors/{monitor_id:str}", sync_to_thread=True)
    def page(self, request: Request, monitor_id: FromPath[str]) -> Response:
        user = session_user(request)
        if user is None:
            return Redirect(f"/login?next=/monitors/{monitor_id}")
        with connection():
            monitor = find_monitor(user, monitor_id)
            if monitor is None:
                raise NotFoundException("No such monitor on your account.")
            context = {"user": user, "conversations": user_conversations(user), **evidence(monitor),
                       **pictures(monitor)}
        return Template("pages/monitor.html", context={**context, "csrf": csrf_token(request)}, headers=NO_STORE)


    @get("/monitors/{monitor_id:str}/pictures/{which:str}", sync_to_thread=True)
    def pictures_partial(self, request: Request, monitor_id: FromPath[str], which: FromPath[str]) -> Response:
        """The chart or the diff alone (pictures, below)."""
        return picture_partial(request, monitor_id, which)

    @get("/monitors/{monitor_id:str}/screenshots/{shot_id:int}", sync_to_thread=True)
    def screenshot(self, request: Request, monitor_id: FromPath[str], shot_id: FromPath[int]) -> Response:
        """A rendered page's screenshot (JPEG), for its owner's session only: anyone else gets 404."""
        user = session_user(request)
        if user is None:
            raise NotFoundException("Sign in first.")
        with connection():
            image = screenshot_image(user.id, monitor_id, shot_id)
        if image is None:
            raise NotFoundException("No such screenshot on your account.")
        return Response(image, media_type="image/jpeg", headers={"Cache-Control": "private, max-age=86400"})

    @get("/monitors/{monitor_id:str}/evidence", sync_to_thread=True)
    def evidence_partial(self, request: Request, monitor_id: FromPath[str]) -> Response:
        """The evidence section alone: the page fetches it when the monitor's event arrives on its stream."""
        user = session_user(request)
        if user is None:
            raise NotFoundException("Sign in first.")
        with connection():
            monitor = find_monitor(user, monitor_id)
            if monitor is None:
                raise NotFoundException("No such monitor on your account.")
            html = render("partials/_monitor_evidence.html", **evidence(monitor))
        return Response(html, media_type="text/html", headers=NO_STORE)


PICTURES = {"chart": "partials/_monitor_chart.html", "diff": "partials/_monitor_diff.html",
            "screenshots": "partials/_monitor_screenshots.html"}


def pictures(monitor) -> dict:
    """What the chart and diff partials render, from the stored events only: a numeric monitor's readings
    (models/readings.monitor_chart), a page monitor's latest change word by word (latest_change)."""
    rendered = bool((monitor.source or {}).get("render"))
    return {"monitor": monitor, "chart_shown": is_numeric(monitor), "chart": monitor_chart(monitor, utcnow()),
            "diff_shown": is_text_change(monitor), "change": latest_change(monitor),
            "screenshots_shown": rendered, "screenshots": screenshots_of(monitor.id) if rendered else []}


def picture_partial(request: Request, monitor_id: str, which: str) -> Response:
    """GET /monitors/{id}/pictures/{chart|diff}: the partial alone, fetched when the monitor's event arrives."""
    user = session_user(request)
    if user is None or which not in PICTURES:
        raise NotFoundException("Sign in first." if user is None else "No such picture: chart or diff.")
    with connection():
        monitor = find_monitor(user, monitor_id)
        if monitor is None:
            raise NotFoundException("No such monitor on your account.")
        html = render(PICTURES[which], **pictures(monitor))
    return Response(html, media_type="text/html", headers=NO_STORE)


def evidence(monitor) -> dict:
    """What the evidence partial renders: the monitor, its JSON, the timeline's first page, and a trigger link's
    expected deliveries."""
    timeline = history(monitor, None, 100)
    last_event_at = next((item["at"] for item in timeline["items"]
                          if item["kind"] not in ("quiet", "baseline", "armed")), None)
    due_at = monitor.expect_due_at if monitor.status == ACTIVE else None
    wanted = [item["message_id"] for item in timeline["items"] if item["kind"] == "wake"]
    return {"monitor": monitor, "info": monitor_json(monitor), "timeline": timeline, "last_event_at": last_event_at,
            "expecting": expecting(monitor.source, due_at, monitor.expect_missed_since, utcnow()),
            "wake_numbers": wake_numbers(monitor.conversation_id, [*wanted, monitor.parent_message_id]),
            "watched_url": watched_url(monitor.source)}


def wake_numbers(conversation_id: int, message_ids: list[int | None]) -> dict[int, int]:
    """Each wake message's number in its conversation (its first wake is #1), by message id."""
    wanted = {message_id for message_id in message_ids if message_id}
    if not wanted:
        return {}
    ids = (Message.select(Message.id).where((Message.conversation == conversation_id) & (Message.role == "wake")
                                            & (Message.id <= max(wanted))).order_by(Message.id).tuples())
    return {message_id: number for number, (message_id,) in enumerate(ids, start=1) if message_id in wanted}


def watched_url(source: dict | None) -> str | None:
    """The source's web address, when it has an http(s) one to link to."""
    url = (source or {}).get("url")
    return url if isinstance(url, str) and url.lower().startswith(("http://", "https://")) else None
