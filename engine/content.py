"""Normalize a fetched body into content a check can read: readable text, and parsed JSON."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass

from bs4 import BeautifulSoup, NavigableString, Tag
from bs4.builder import LXMLTreeBuilder
from bs4.element import CData, PreformattedString

from engine.errors import ContentError  # noqa: F401  (raised here, imported from here by callers)

_HIDDEN_TAGS = ("script", "style", "noscript", "template", "svg", "head")
#: Elements that start a new line of readable text; everything else flows inline.
_BLOCKS = frozenset({
    "address", "article", "aside", "blockquote", "br", "dd", "details", "dialog", "div", "dl", "dt",
    "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header",
    "hr", "li", "main", "nav", "ol", "p", "pre", "section", "summary", "table", "tbody", "td", "tfoot",
    "th", "thead", "title", "tr", "ul", "body", "html"})
#: Elements deeper than this are read as their parent's text, as Chromium's parser stops nesting at 512: a page
#: nested 100,000 deep is read in a fraction of a second instead of building 100,000 nested tags.
MAX_HTML_DEPTH = 512
_ANY_SPACE = re.compile(r"\s+")
_BLANK_RUNS = re.compile(r"\n{3,}")
_SPACES = re.compile(r"[ \t\r\f\v]+")


@dataclass(frozen=True)
class Content:
    """Normalized content: its text (what is hashed and shown), parsed data, and feed items."""
    text: str
    data: object = None
    is_json: bool = False
    #: for a feed: one dict per entry, each with a string "key" (plus title, link, summary, published)
    items: tuple[dict, ...] | None = None
    #: what the digest covers when the text alone doesn't say everything (a command's exit code)
    fingerprint: str = ""
    #: more variables a cel check reads (a tool's output, outputText and steps)
    variables: dict | None = None

    @property
    def digest(self) -> str:
        return sha256_hex((self.fingerprint or self.text).encode("utf-8"))


def sha256_hex(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


#: the last raw body a thread hashed, and its digest: monitors that share a fetch (engine/shared_fetch.py) are
#: handed the very same bytes object, so each after the first reads its digest instead of hashing the page again
_last_raw = threading.local()
#: smaller bodies are hashed again, as cheaply as they are looked up
_REMEMBERED_BYTES = 4096


def raw_digest(body: bytes) -> str:
    """sha256_hex of a fetched body, remembered for the next check of this thread handed the same object (bytes
    are immutable, so the same object is the same content)."""
    last = getattr(_last_raw, "pair", None)
    if last is not None and last[0] is body:
        return last[1]
    digest = hashlib.sha256(body).hexdigest()
    if type(body) is bytes and len(body) >= _REMEMBERED_BYTES:
        _last_raw.pair = (body, digest)
    return digest


def html_to_text(body: bytes | str, selector: str | None = None, max_bytes: int = 256 * 1024) -> str:
    """The readable text of an HTML page, or of the parts `selector` picks."""
    soup = BeautifulSoup(body, builder=_NestingCapped())
    for tag in soup(_HIDDEN_TAGS):
        tag.decompose()
    if selector:
        parts = outermost(soup.select(selector))
        if not parts:
            raise ContentError(f"the selector '{selector}' matches nothing on the page")
        text = "\n\n".join(tidy(readable(part)) for part in parts)
    else:
        text = readable(soup)
    return cut_text(tidy(text), max_bytes)


class _NestingCapped(LXMLTreeBuilder):
    """bs4's lxml builder, dropping the tags (not the text) of elements nested deeper than MAX_HTML_DEPTH; a block
    among them still parts the words around it."""

    def feed(self, markup) -> None:
        self._depth = 0
        super().feed(markup)

    def start(self, tag, attrib, nsmap={}) -> None:  # noqa: B006  (lxml's own signature)
        self._depth += 1
        if self._depth <= MAX_HTML_DEPTH:
            super().start(tag, attrib, nsmap)
        elif tag in _BLOCKS:
            self.soup.handle_data(" ")

    def end(self, tag) -> None:
        self._depth -= 1
        if self._depth < MAX_HTML_DEPTH:
            super().end(tag)
        elif tag in _BLOCKS:
            self.soup.handle_data(" ")


def readable(root: Tag) -> str:
    """Text as a reader sees it: source line breaks are spaces, block elements start lines, <pre> kept."""
    has_pre = root.find("pre") is not None
    out: list[str] = []
    for node in root.descendants:
        if isinstance(node, Tag):
            if node.name in _BLOCKS:
                out.append("\n")
        elif isinstance(node, NavigableString) and (not isinstance(node, PreformattedString)
                                                    or isinstance(node, CData)):
            keep = has_pre and node.find_parent("pre") is not None
            out.append(str(node) if keep else _ANY_SPACE.sub(" ", str(node)))
    return "".join(out)


def outermost(parts: list[Tag]) -> list[Tag]:
    """Matches that are not inside another match, so nested matches are read once."""
    chosen = {id(part) for part in parts}
    return [part for part in parts if not any(id(parent) in chosen for parent in part.parents)]


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
