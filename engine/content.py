"""Normalize a fetched body into content a check can read: readable text, and parsed JSON."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from bs4 import BeautifulSoup

_HIDDEN_TAGS = ("script", "style", "noscript", "template", "svg", "head")
_BLANK_RUNS = re.compile(r"\n{3,}")
_SPACES = re.compile(r"[ \t\r\f\v]+")


class ContentError(ValueError):
    """The body does not hold what the monitor reads (no JSON, selector gone, …)."""


@dataclass(frozen=True)
class Content:
    text: str
    data: object = None
    is_json: bool = False

    @property
    def digest(self) -> str:
        return sha256_hex(self.text.encode("utf-8"))


def sha256_hex(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def html_to_text(body: bytes | str, selector: str | None = None, max_bytes: int = 256 * 1024) -> str:
    """The readable text of an HTML page, or of the parts `selector` picks."""
    soup = BeautifulSoup(body, "lxml")
    for tag in soup(_HIDDEN_TAGS):
        tag.decompose()
    if selector:
        parts = soup.select(selector)
        if not parts:
            raise ContentError(f"the selector '{selector}' matches nothing on the page")
        text = "\n\n".join(p.get_text("\n", strip=True) for p in parts)
    else:
        text = soup.get_text("\n", strip=True)
    return cut_text(tidy(text), max_bytes)


def json_content(body: bytes | str, max_bytes: int = 256 * 1024) -> Content:
    """Parsed JSON; its text is the document with sorted keys, so key order never reads as a change."""
    try:
        data = json.loads(body, parse_constant=_refuse_constant)
    except RecursionError:
        raise ContentError("the JSON is nested too deeply to read") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ContentError(f"the response is not valid JSON ({_short(exc)})") from None
    try:
        text = json.dumps(data, sort_keys=True, ensure_ascii=False, indent=1)
    except RecursionError:
        raise ContentError("the JSON is nested too deeply to read") from None
    return Content(text=cut_text(text, max_bytes), data=data, is_json=True)


def page_content(body: bytes, selector: str | None, max_bytes: int) -> Content:
    try:
        return Content(text=html_to_text(body, selector, max_bytes))
    except RecursionError:
        raise ContentError("the page is nested too deeply to read") from None


def tidy(text: str) -> str:
    lines = (_SPACES.sub(" ", line).strip() for line in text.splitlines())
    return _BLANK_RUNS.sub("\n\n", "\n".join(lines)).strip()


def cut_text(text: str, max_bytes: int) -> str:
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text
    return raw[:max_bytes].decode("utf-8", errors="ignore")


def excerpt(text: str, limit: int = 300) -> str:
    """A one-line excerpt for people and models."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def _short(exc: Exception) -> str:
    return str(exc).split("\n")[0][:120]
