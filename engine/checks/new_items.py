"""new_items: an item whose key was never seen before appears in a feed or a JSON list.

The state keeps every key seen, the baseline's too, so an item that drops off and comes back never
fires again. At most MAX_KEYS keys are kept: keys of items still listed are kept first, and past the
cap the keys gone longest are dropped (such an item would count as new if it came back).
"""

from __future__ import annotations

import hashlib

from engine.checks.base import CheckSpec, Verdict
from engine.checks.status import canonical, short_fact
from engine.checks.threshold import check_path
from engine.content import Content, excerpt
from engine.errors import ContentError
from engine.paths import PathError, resolve

FIELDS = frozenset({"type", "items_path", "key_path"})
DEFAULT_KEY_PATH = "id"
MAX_KEYS = 5000
MAX_LINES = 20
_TITLES = ("title", "name", "subject")
_LINKS = ("link", "html_url", "url")


def parse(raw: dict) -> CheckSpec:
    for name in ("items_path", "key_path"):
        if raw.get(name) is not None:
            check_path(f"check.{name}", raw[name])
    return CheckSpec(type="new_items", items_path=raw.get("items_path") or None,
                     key_path=raw.get("key_path") or None)


def evaluate(check: CheckSpec, content: Content, previous: dict, now=None) -> Verdict:
    items = dict(read_items(check, content))  # key -> line, in list order
    seen = previous.get("keys")
    known = set(seen or ())
    new = [key for key in items if key not in known]
    fired = bool(new) and seen is not None
    found = describe([items[key] for key in new]) if fired else ""
    fact = hashlib.sha256("\n".join(sorted(new)).encode("utf-8")).hexdigest()[:16] if fired else ""
    first = f"; the first is {next(iter(items.values()))}" if items else ""
    return Verdict(fired=fired, summary=f"{len(items)} items listed{first}", found=found, fact=fact,
                   state={"keys": remember(seen or [], list(items))})


def remember(seen: list, current: list) -> list:
    """Every key seen, those still listed last, the oldest dropped past MAX_KEYS."""
    listed = set(current)
    kept = [key for key in seen if key not in listed] + current
    return kept[-MAX_KEYS:]


def describe(lines: list[str]) -> str:
    shown = lines[:MAX_LINES]
    more = len(lines) - len(shown)
    return "\n".join(shown + ([f"and {more} more"] if more else []))


def read_items(check: CheckSpec, content: Content) -> list[tuple[str, str]]:
    """(key, line) for each item, from a feed's entries or the JSON list at items_path."""
    if content.items is not None:
        pairs = [(feed_key(item), line_for(item, item.get("key"))) for item in content.items]
    else:
        pairs = [(key, line_for(item, key)) for item, key in json_items(check, content)]
    if len({key for key, _ in pairs}) > MAX_KEYS:
        raise ContentError(f"the list has more than {MAX_KEYS} items and a new_items check remembers at most "
                           f"{MAX_KEYS}; point items_path at a shorter list")
    return pairs


def feed_key(item: dict) -> str:
    key = item.get("key")
    if not isinstance(key, str) or not key:
        raise ContentError("a feed entry has no id or link to tell it apart by")
    return short_fact(key)


def json_items(check: CheckSpec, content: Content) -> list[tuple[object, str]]:
    if not content.is_json:
        raise ContentError("a new_items check reads a feed or a list in JSON, and this source is neither")
    if not check.items_path:
        raise ContentError("check.items_path is required on a JSON source: the dotted path to the list, "
                           "e.g. data.items")
    try:
        items = resolve(content.data, check.items_path)
    except PathError as exc:
        raise ContentError(f"items_path '{check.items_path}' is gone: {exc}") from None
    if not isinstance(items, list):
        raise ContentError(f"the value at items_path '{check.items_path}' is not a list")
    return [(item, item_key(check, item)) for item in items]


def item_key(check: CheckSpec, item: object) -> str:
    """The item's key at key_path; a bare string or number is its own key when key_path is not set."""
    path = check.key_path or DEFAULT_KEY_PATH
    if isinstance(item, (str, int, float)) and not isinstance(item, bool) and check.key_path is None:
        return short_fact(canonical(item))
    try:
        key = resolve(item, path) if isinstance(item, (dict, list)) else None
    except PathError:
        key = None
    if key is None or isinstance(key, (dict, list)):
        raise ContentError(f"an item in '{check.items_path}' has no key at key_path '{path}'; "
                           "set check.key_path to a field every item has, such as its id")
    return short_fact(canonical(key))


def line_for(item: object, key: str) -> str:
    """One line naming an item: its title and link when it has them, else its key."""
    if not isinstance(item, dict):
        return excerpt(str(key) if isinstance(item, list) else canonical(item), 200)
    title = next((item[name] for name in _TITLES if isinstance(item.get(name), str) and item[name].strip()), "")
    link = next((item[name] for name in _LINKS if isinstance(item.get(name), str) and item[name].strip()), "")
    line = " — ".join(part for part in (excerpt(title, 150), excerpt(link, 200)) if part)
    return line or excerpt(str(key), 200)
