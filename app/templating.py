"""One Jinja environment for pages, HTMX swaps and the HTML sent over the page event stream."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape

from engine.durations import describe_duration

TEMPLATES = Path(__file__).parent / "templates"


def _when(value: datetime | None) -> str:
    if value is None:
        return "never"
    return value.replace(tzinfo=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _watching(monitor) -> str:
    source = monitor.source or {}
    if source.get("type") == "command":
        return f"$ {source.get('command', '')} — on {source.get('device', '')} ({source.get('mode', 'poll')})"
    if source.get("type") in ("document", "ingest"):
        return f"document {source.get('item_type', '')}/{source.get('item_id', '')}"
    if source.get("type") == "time":
        return f"the clock, until {source.get('fire_at', '')}"
    if source.get("type") == "tool":
        arguments = ", ".join(f"{k}={v!r}" for k, v in (source.get("arguments") or {}).items())
        return f"tool {source.get('agent_id', '')}/{source.get('tool', '')}({arguments})"
    where = source.get("url", "") or source.get("path", "") or ""
    if source.get("selector"):
        where += f" ({source['selector']})"
    return where


def _is_stream(monitor) -> bool:
    source = monitor.source or {}
    return source.get("type") == "command" and source.get("mode") == "stream"


def _check(monitor) -> str:
    check = monitor.check or {}
    if _is_stream(monitor):
        if check.get("type") == "regex":
            return f"lines matching {check.get('pattern')}"
        return f"lines where {check.get('expr')}" if check.get("type") == "cel" else "every line"
    if (monitor.source or {}).get("type") == "time":
        return "fires once at its time"
    if (monitor.source or {}).get("type") == "ingest":
        return "the job ends (done or failed)"
    if check.get("type") == "cel":
        return f"when {check.get('expr')}"
    if check.get("type") == "threshold":
        from engine.checks import OP_NAMES, format_number

        path = f"{check['value_path']} " if check.get("value_path") else ""
        return f"{path}{OP_NAMES.get(check['op'], check['op'])} {format_number(check['value'])}"
    return "any change"


env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"]),
                  trim_blocks=True, lstrip_blocks=True)
env.filters.update(when=_when, every=describe_duration, watching=_watching, check=_check)
env.tests["stream"] = _is_stream


def render(name: str, **context) -> str:
    return env.get_template(name).render(**context)
