"""The Litestar app: tool endpoint, REST API, pages and event streams."""

from __future__ import annotations

from pathlib import Path

from litestar import Litestar, Request, Response, asgi, get
from litestar.exceptions import HTTPException
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.static_files import create_static_files_router
from litestar.template.config import TemplateConfig
from litestar.types import Receive, Scope, Send

from app import unavailable
from app.error_pages import http_error
from app.actions import ActionsController
from app.approvals import ApprovalsController
from app.auth import session_cookies
from app.capacity import install_lanes, lanes_middleware
from app.gate import credential_gate
from app.headers import security_headers
from app.json_depth import json_depth
from app.local_events import local_event
from app.connections import ConnectionsController
from app.conversations_api import ConversationsController, WakesController
from app import mcp_server
from app.devices import DevicesController
from app.documents import DocumentsController
from app.runner import RunnerController
from app.events import EventsController
from app.models_page import ModelsController
from app.monitor_page import MonitorPageController
from app.monitors_api import MonitorsController
from app.operations import healthz, metrics, readyz
from app.pages import PagesController
from app.first_run import FirstRunController
from app.tokens import TokensController
from app.templating import env
from engine.checks.cel import stop_helper
from app.tool import ToolController
from app.tools import ToolsController
from app.triggers import TriggersController
from app.wake_endpoints import WakeEndpointsController
from tasks.deliveries import relay
from adapters.settings import Settings

STATIC = Path(__file__).parent / "static"
#: the icon every page links; browsers also ask for /favicon.ico on their own, and get the same file there
FAVICON = (STATIC / "favicon.svg").read_bytes()


@get("/favicon.ico", include_in_schema=False)
async def favicon() -> Response:
    """Vigil's icon where browsers look for it unasked, instead of a 404 (and a console error) on every page."""
    return Response(FAVICON, media_type="image/svg+xml", headers={"Cache-Control": "public, max-age=86400"})


def _hand_over_deliveries() -> None:
    """On shutdown, queue what the relay still holds (whatever it can't, the sweep queues later), and stop the
    CEL helper child (monitor_create parse-checks only, but a first check may have evaluated)."""
    relay.wait_idle(timeout=5)
    stop_helper()


def _too_large(cap: int):
    def answer(request: Request, exc: Exception) -> Response:
        return Response({"detail": f"The request body is over {cap} bytes (API_MAX_BODY_BYTES); send less."},
                        status_code=413, headers={"Cache-Control": "no-store", "Connection": "close"})
    return answer


def create_app(settings: Settings) -> Litestar:
    """The web app; the caller has bound the database and configured tasks.runtime."""
    install_lanes(settings.WEB_THREADS, settings.WEB_PUBLIC_THREADS)
    mcp_app, mcp_lifespan = mcp_server.build(settings)

    @asgi("/mcp", is_mount=True, copy_scope=True)
    async def mcp(scope: Scope, receive: Receive, send: Send) -> None:
        """The MCP server (app/mcp_server.py), its own authentication and host allowlist."""
        await mcp_app(scope, receive, send)

    return Litestar(
        route_handlers=[ToolController, ConversationsController, MonitorsController, MonitorPageController, EventsController,
                        PagesController, ModelsController, TriggersController, ApprovalsController, healthz, readyz, metrics,
                        DevicesController, RunnerController, DocumentsController, ActionsController, ToolsController,
                        ConnectionsController, WakeEndpointsController, WakesController, FirstRunController,
                        TokensController, mcp, favicon, local_event,
                        create_static_files_router(path="/static", directories=[STATIC])],
        middleware=[lanes_middleware, credential_gate, json_depth(settings.API_MAX_BODY_BYTES), session_cookies],
        before_send=[security_headers],
        exception_handlers={**unavailable.HANDLERS, RequestEntityTooLarge: _too_large(settings.API_MAX_BODY_BYTES),
                            HTTPException: http_error},
        request_max_body_size=settings.API_MAX_BODY_BYTES,
        on_shutdown=[_hand_over_deliveries],
        lifespan=[mcp_lifespan],
        template_config=TemplateConfig(instance=JinjaTemplateEngine.from_environment(env)),
        logging_config=None,  # adapters.logs set logging up already; Litestar's default would reset LOG_LEVEL
    )
