"""status: a JSON field enters one of the states that matter. Edge-triggered: once per entry."""

from __future__ import annotations

import hashlib
import math

from engine.checks import hold
from engine.checks.base import CheckSpec, Verdict, format_number
from engine.checks.threshold import check_path
from engine.content import Content, excerpt
from engine.errors import ContentError, SpecError
from engine.paths import PathError, resolve

FIELDS = frozenset({"type", "value_path", "values", "for"})
MAX_VALUES = 50
MAX_VALUE_CHARS = 200
#: a fact longer than this goes into the wake's dedupe key as a digest (the key column holds 200)
MAX_FACT_CHARS = 100


def parse(raw: dict) -> CheckSpec:
    path = raw.get("value_path")
    if path is None:
        raise SpecError("check.value_path is required for a status check: the dotted path to the state, "
                        "e.g. data.status.")
    check_path("check.value_path", path)
    return CheckSpec(type="status", value_path=path, values=parse_values(raw.get("values")),
                     hold_for=hold.parse_for(raw, "status"))


def parse_values(raw: object) -> tuple:
    shape = 'check.values must be a non-empty list of the states that matter, e.g. ["success", "failure"]'
    if not isinstance(raw, list) or not raw:
        raise SpecError(f"{shape} (got {excerpt(repr(raw), 60)}).")
    if len(raw) > MAX_VALUES:
        raise SpecError(f"check.values has {len(raw)} states; list at most {MAX_VALUES}.")
    for item in raw:
        if isinstance(item, float) and not math.isfinite(item):
            raise SpecError(f"{shape}; {item!r} is not a state.")
        if not isinstance(item, (str, int, float, bool)) or (isinstance(item, str) and not item):
            raise SpecError(f"{shape}; each one a string, number or true/false (got {excerpt(repr(item), 60)}).")
        if isinstance(item, str) and len(item) > MAX_VALUE_CHARS:
            raise SpecError(f"check.values has a state longer than {MAX_VALUE_CHARS} characters; shorten it.")
    return tuple(raw)


def evaluate(check: CheckSpec, content: Content, previous: dict, now=None) -> Verdict:
    state = canonical(read_state(check, content))
    key = short_fact(state)
    before = previous.get("state")
    wanted = {canonical(value) for value in check.values}
    matters = state in wanted
    was_holding = before is not None and before in {short_fact(value) for value in wanted}
    # held: the value stays in one state that matters; a move to another state that matters counts afresh
    settled = hold.settle(check, matters, previous, now, was_holding=was_holding,
                          same=was_holding and key == before, rearmed=not matters or key != before)
    shown = excerpt(state, MAX_FACT_CHARS)
    found = ""
    if settled.fired:
        was = f" (was {before!r})" if isinstance(before, str) and before != key else ""
        found = f"status is now {shown!r}{was}{hold.held_words(check, settled)}"
    return Verdict(fired=settled.fired, summary=f"status is {shown!r}", found=found, fact=key,
                   state={"state": key, **settled.state})


def read_state(check: CheckSpec, content: Content) -> object:
    """The raw value at value_path; a list or an object is not a state."""
    if not content.is_json:
        raise ContentError("a status check reads value_path in JSON, and this source is not JSON")
    try:
        raw = resolve(content.data, check.value_path)
    except PathError as exc:
        raise ContentError(f"value_path '{check.value_path}' is gone: {exc}") from None
    if isinstance(raw, (dict, list)):
        kind = "an object" if isinstance(raw, dict) else "a list"
        raise ContentError(f"the value at '{check.value_path}' is {kind}, not a single state")
    return raw


def canonical(value: object) -> str:
    """The string a state is compared as: "success", "true", "200" (for 200 and 200.0), "null"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return format_number(value)
    return str(value)


def short_fact(text: str) -> str:
    """The text itself when short, else a digest of it, so the wake's dedupe key stays short."""
    if len(text) <= MAX_FACT_CHARS:
        return text
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]
