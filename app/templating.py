"""One Jinja environment for pages, HTMX swaps and the HTML sent over the page event stream."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape

from engine.describe import Description, describe
from engine.durations import describe_duration
from engine.glance import badge, reading, relative
from engine.wake import wake_parts, wake_summary

TEMPLATES = Path(__file__).parent / "templates"


def _when(value: datetime | None) -> str:
    if value is None:
        return "never"
    return value.replace(tzinfo=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _ago(value: datetime | None, never: str = "never") -> Markup:
    """A time as relative words ("2 min ago", "in 3 min") from now, server-side, in a <time> whose datetime is the
    ISO time and whose title is the UTC time; /static/vigil.js refreshes the words every 30 s."""
    if value is None:
        return Markup(escape(never))
    at = value.replace(tzinfo=None)
    words = relative(at, datetime.now(timezone.utc).replace(tzinfo=None))
    return Markup('<time datetime="{}Z" title="{}" data-relative>{}</time>').format(
        at.isoformat(timespec="seconds"), _when(at), words)


def _describe(monitor, facts=None) -> Description:
    """The row's words for `monitor` (engine/describe.py); `facts` from models/describe_data.py, if loaded."""
    facts = facts or None  # an undefined template variable reads as none
    return describe(monitor.source, monitor.check, monitor.interval_seconds, condition=monitor.condition or "",
                    hits=getattr(facts, "hits", None), approval=getattr(facts, "approval", None),
                    max_wakes=getattr(monitor, "max_wakes", None))


def _is_stream(monitor) -> bool:
    source = monitor.source or {}
    return source.get("type") == "command" and source.get("mode") == "stream"


#: the nav's entries, (path, label), in order
NAV = (("/settings/monitors", "Monitors"), ("/settings/devices", "Devices"), ("/settings/tools", "Tools"),
       ("/settings/connections", "Connections"), ("/settings/wake-endpoints", "Wake endpoints"),
       ("/settings/tokens", "Tokens"), ("/settings/models", "Models"))
#: pages outside /settings that belong to a nav entry: a monitor's page (a command's too) is under Monitors
_NAV_ALSO = (("/monitors/", "/settings/monitors"), ("/commands/", "/settings/monitors"),
             ("/settings/password", "/settings/tokens"), ("/settings/sign-out-everywhere", "/settings/tokens"))


def _nav_current(request) -> str | None:
    """The path of the nav entry the requested page is under (the nav marks it), or None (a conversation)."""
    path = getattr(getattr(request, "url", None), "path", None) or ""
    for prefix, entry in _NAV_ALSO:
        if path.startswith(prefix):
            return entry
    return next((entry for entry, _ in NAV if path == entry or path.startswith(entry + "/")), None)


env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"]),
                  trim_blocks=True, lstrip_blocks=True)
env.filters.update(when=_when, every=describe_duration, ago=_ago, reading=reading)
env.globals["badge"] = badge
env.globals["describe"] = _describe
env.globals.update(nav=NAV, nav_current=_nav_current, wake_parts=wake_parts, wake_summary=wake_summary)
env.tests["stream"] = _is_stream


def render(name: str, **context) -> str:
    return env.get_template(name).render(**context)
