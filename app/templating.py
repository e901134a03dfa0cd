"""One Jinja environment for pages, HTMX swaps and the HTML sent over the page event stream."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape

from engine.describe import Description, describe
from engine.durations import describe_duration

TEMPLATES = Path(__file__).parent / "templates"


def _when(value: datetime | None) -> str:
    if value is None:
        return "never"
    return value.replace(tzinfo=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _describe(monitor, facts=None) -> Description:
    """The row's words for `monitor` (engine/describe.py); `facts` from models/describe_data.py, if loaded."""
    facts = facts or None  # an undefined template variable reads as none
    return describe(monitor.source, monitor.check, monitor.interval_seconds, condition=monitor.condition or "",
                    hits=getattr(facts, "hits", None), approval=getattr(facts, "approval", None),
                    max_wakes=getattr(monitor, "max_wakes", None))


def _is_stream(monitor) -> bool:
    source = monitor.source or {}
    return source.get("type") == "command" and source.get("mode") == "stream"


env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"]),
                  trim_blocks=True, lstrip_blocks=True)
env.filters.update(when=_when, every=describe_duration)
env.globals["describe"] = _describe
env.tests["stream"] = _is_stream


def render(name: str, **context) -> str:
    return env.get_template(name).render(**context)
