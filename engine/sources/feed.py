"""feed: a list of items, from RSS/Atom or from a list inside a JSON document; each item has a key."""

from __future__ import annotations

import io
import time

import feedparser

from engine.content import Content, cut_text, excerpt, html_to_text, json_content
from engine.errors import ContentError, SpecError
from engine.paths import PathError, parse_path, resolve
from engine.sources.base import SourceIO, SourcePolicy, SourceSpec, fetch_whole, parse_url

FIELDS = frozenset({"type", "url", "items_path", "key_path"})
#: the key_path of a JSON feed that gives none
DEFAULT_KEY_PATH = "id"
#: an items_path naming the JSON document itself, for a body that is a list
ROOT = "$"
EMPTY_TEXT = "(the feed has no items)"
_SUMMARY_CHARS = 500
_TITLE_FIELDS, _LINK_FIELDS = ("title", "name"), ("link", "url", "html_url")
_SUMMARY_FIELDS = ("summary", "description")
_PUBLISHED_FIELDS = ("published", "published_at", "created_at", "date", "updated", "updated_at")


def parse(raw: dict, policy: SourcePolicy) -> SourceSpec:
    url = parse_url("feed", raw)
    items_path, key_path = raw.get("items_path"), raw.get("key_path")
    if items_path is None:
        if key_path is not None:
            raise SpecError("source.key_path picks the key of each item of a JSON feed, so it needs "
                            "source.items_path; RSS and Atom entries are keyed by their id.")
        return SourceSpec(type="feed", url=url)
    _check_path("items_path", items_path,
                "the list of items in the JSON, such as data.items ($ for the document itself)")
    key_path = DEFAULT_KEY_PATH if key_path is None else key_path
    _check_path("key_path", key_path, "the field inside each item that tells it apart, such as id or url")
    return SourceSpec(type="feed", url=url, items_path=items_path.strip(), key_path=key_path.strip())


def read(spec: SourceSpec, io: SourceIO) -> bytes:
    """A JSON list must arrive whole; an XML feed cut at the limit still yields its first entries."""
    if spec.items_path:
        return fetch_whole(io, spec.url, "a JSON document")
    return io.fetcher.get(spec.url).body


def normalize(spec: SourceSpec, body: bytes, max_text_bytes: int) -> Content:
    items = json_items(spec, body) if spec.items_path else xml_items(body)
    lines = [_line(item) for item in items]
    text = "\n".join(lines) if lines else EMPTY_TEXT
    return Content(text=cut_text(text, max_text_bytes), data=list(items), is_json=True, items=tuple(items))


def xml_items(body: bytes) -> list[dict]:
    """The entries of an RSS or Atom feed, keyed by id, else link, else title and date."""
    try:
        parsed = feedparser.parse(io.BytesIO(body))  # a stream: given bytes, feedparser may open them as a path
    except RecursionError:
        raise ContentError("the feed is nested too deeply to read") from None
    if not parsed.entries and not parsed.get("version"):
        raise ContentError(_not_a_feed(body))
    items = []
    for number, entry in enumerate(parsed.entries, 1):
        item = _entry_item(entry)
        if not item["key"]:
            raise ContentError(f"entry {number} of the feed has no id, link or title to tell it apart")
        items.append(item)
    return items


def json_items(spec: SourceSpec, body: bytes) -> list[dict]:
    """The items of the list at items_path, each keyed by the value at key_path."""
    document = json_content(body).data
    found = _resolve_items(document, spec.items_path)
    if not isinstance(found, list):
        raise ContentError(f"the value at items_path '{spec.items_path}' is not a list "
                           f"(it is {_kind(found)}); point source.items_path at the list of items")
    return [_json_item(spec.key_path, number, item) for number, item in enumerate(found, 1)]


def _resolve_items(document: object, items_path: str) -> object:
    if items_path == ROOT:
        return document
    try:
        return resolve(document, _plain(items_path))
    except PathError as exc:
        raise ContentError(f"items_path '{items_path}' is gone: {exc}") from None


def _json_item(key_path: str, number: int, item: object) -> dict:
    try:
        key = resolve(item, _plain(key_path))
    except PathError:
        key = None
    if isinstance(key, bool) or not isinstance(key, (str, int, float)) or not str(key).strip():
        raise ContentError(f"item {number} of the list has no key at key_path '{key_path}'; set "
                           "source.key_path to a field every item has, such as id or url")
    fields = item if isinstance(item, dict) else {}
    return {"key": str(key), "title": _first(fields, _TITLE_FIELDS), "link": _first(fields, _LINK_FIELDS),
            "summary": excerpt(_first(fields, _SUMMARY_FIELDS), _SUMMARY_CHARS),
            "published": _first(fields, _PUBLISHED_FIELDS), "data": item}


def _entry_item(entry: dict) -> dict:
    title, link = _flat(entry.get("title")), _flat(entry.get("link"))
    published = _published(entry)
    key = _flat(entry.get("id")) or link or (f"{title} {published}".strip() if title else "")
    summary = entry.get("summary") or ""
    if "<" in summary:
        summary = html_to_text(summary)
    return {"key": key, "title": title, "link": link, "summary": excerpt(summary, _SUMMARY_CHARS),
            "published": published}


def _published(entry: dict) -> str:
    """ISO 8601 UTC when feedparser could read the date, else the date as the feed wrote it."""
    for name in ("published", "updated"):
        parsed = entry.get(f"{name}_parsed")
        if parsed:
            return time.strftime("%Y-%m-%dT%H:%M:%SZ", parsed)
        if entry.get(name):
            return _flat(entry.get(name))
    return ""


def _line(item: dict) -> str:
    title, link = item["title"] or item["key"], item["link"]
    return f"{title} — {link}" if link and link != title else title


def _first(fields: dict, names: tuple[str, ...]) -> str:
    for name in names:
        value = fields.get(name)
        if isinstance(value, (str, int, float)) and not isinstance(value, bool) and str(value).strip():
            return _flat(str(value))
    return ""


def _flat(value: object) -> str:
    return " ".join(value.split()) if isinstance(value, str) else ""


def _not_a_feed(body: bytes) -> str:
    start = body.lstrip()[:200].lower()
    if start[:1] in (b"{", b"["):
        return ("the response is JSON, not an RSS or Atom feed; give source.items_path, the path to the "
                "list of items in it")
    if b"<html" in start or b"<!doctype html" in start:
        return ("the response is an HTML page, not an RSS or Atom feed; point source.url at the feed "
                "itself (pages often link it as rss.xml, atom.xml or /feed)")
    return "the response is neither an RSS or Atom feed nor JSON, so it has no items to read"


def _check_path(name: str, path: object, purpose: str) -> None:
    if path == ROOT and name == "items_path":
        return
    try:
        parse_path(_plain(path) if isinstance(path, str) else path)
    except PathError as exc:
        raise SpecError(f"source.{name} must be a dotted path to {purpose} ({exc}).") from None


def _plain(path: str) -> str:
    """A path without a leading '$.', which some write for the document itself."""
    return path[2:] if path.startswith(ROOT + ".") else path


def _kind(value: object) -> str:
    return {dict: "an object", str: "text", type(None): "null"}.get(type(value), f"a {type(value).__name__}")
