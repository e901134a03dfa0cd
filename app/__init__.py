"""The Litestar app: tool endpoint, REST API, pages and event streams."""

from __future__ import annotations

import hashlib
from pathlib import Path

from litestar import Litestar, get
from litestar.middleware.session.client_side import CookieBackendConfig
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.static_files import create_static_files_router
from litestar.template.config import TemplateConfig

from app.approvals import ApprovalsController
from app.conversations_api import ConversationsController
from app.events import EventsController
from app.models_page import ModelsController
from app.monitors_api import MonitorsController
from app.pages import PagesController
from app.templating import env
from app.tool import ToolController
from app.triggers import TriggersController
from vigil.settings import Settings

STATIC = Path(__file__).parent / "static"


@get("/healthz", sync_to_thread=False)
def healthz() -> dict:
    return {"ok": True}


def create_app(settings: Settings) -> Litestar:
    """The web app; the caller has bound the database and configured tasks.runtime."""
    session = CookieBackendConfig(secret=hashlib.sha256(f"session:{settings.SECRET_KEY}".encode()).digest(),
                                  key="vigil_session", httponly=True, samesite="lax",
                                  secure=settings.SESSION_COOKIE_SECURE,
                                  exclude=["^/api/triggers/", "^/api/tool/", "^/healthz"])
    return Litestar(
        route_handlers=[ToolController, ConversationsController, MonitorsController, EventsController,
                        PagesController, ModelsController, TriggersController, ApprovalsController, healthz,
                        create_static_files_router(path="/static", directories=[STATIC])],
        middleware=[session.middleware],
        template_config=TemplateConfig(instance=JinjaTemplateEngine.from_environment(env)),
        logging_config=None,  # vigil.logs set logging up already; Litestar's default would reset LOG_LEVEL
    )
