"""threshold: a number crosses a line. Edge-triggered: staying past it does not fire again."""

from __future__ import annotations

import math
import operator
import re

from engine.checks.base import CheckSpec, Verdict, as_number, format_number
from engine.content import Content
from engine.errors import ContentError, SpecError
from engine.paths import PathError, parse_path, resolve

FIELDS = frozenset({"type", "op", "value", "value_path"})
OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
       "==": operator.eq, "!=": operator.ne}
OP_WORDS = {
    "below": "<", "under": "<", "less_than": "<", "lt": "<",
    "above": ">", "over": ">", "greater_than": ">", "gt": ">",
    "at_most": "<=", "lte": "<=", "le": "<=", "at_least": ">=", "gte": ">=", "ge": ">=",
    "equals": "==", "equal": "==", "eq": "==", "=": "==",
    "not_equals": "!=", "not_equal": "!=", "ne": "!=",
}
OP_NAMES = {"<": "below", "<=": "at or below", ">": "above", ">=": "at or above",
            "==": "equal to", "!=": "not equal to"}

_NUMBER = re.compile(r"[-−]?\d{1,3}(?:,\d{3})+(?:\.\d+)?|[-−]?\d+(?:\.\d+)?")


def normalize_op(op: object) -> str | None:
    """'<', 'below', 'Less than' … -> the symbol, or None."""
    if not isinstance(op, str):
        return None
    key = op.strip().lower().replace(" ", "_").replace("-", "_")
    return key if key in OPS else OP_WORDS.get(key)


def parse(raw: dict) -> CheckSpec:
    op = normalize_op(raw.get("op"))
    if op is None:
        raise SpecError(f"check.op must be one of < <= > >= == != or a word like below/above (got {raw.get('op')!r}).")
    value = parse_number(raw.get("value"))
    path = raw.get("value_path")
    if path is not None:
        check_path("check.value_path", path)
    return CheckSpec(type="threshold", op=op, value=value, value_path=path or None)


def evaluate(check: CheckSpec, content: Content, previous: dict, now=None) -> Verdict:
    value = read_number(check, content)
    holds = OPS[check.op](value, check.value)
    fired = holds and not previous.get("holds", False)
    shown = format_number(value)
    found = ""
    if fired:
        was = f" (was {format_number(previous['value'])})" if "value" in previous else ""
        found = f"{shown} is {OP_NAMES[check.op]} {format_number(check.value)}{was}"
    return Verdict(fired=fired, summary=f"currently {shown}", found=found, fact=shown,
                   state={"value": value, "holds": holds})


def read_number(check: CheckSpec, content: Content) -> float:
    """The number a threshold compares: at value_path in JSON, else the first number in the text."""
    if check.value_path:
        if not content.is_json:
            raise ContentError("value_path needs a json source; on a page the first number is read")
        try:
            raw = resolve(content.data, check.value_path)
        except PathError as exc:
            raise ContentError(f"value_path '{check.value_path}' is gone: {exc}") from None
        return as_number(raw, f"the value at '{check.value_path}'")
    match = _NUMBER.search(content.text)
    if not match:
        raise ContentError("there is no number in the content to compare")
    return as_number(match.group(0), "the first number in the content")


def parse_number(raw: object) -> float:
    value = None
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        value = float(raw)
    elif isinstance(raw, str):
        try:
            value = float(raw.strip().replace(",", ""))
        except ValueError:
            value = None
    if value is None or not math.isfinite(value):
        raise SpecError(f"check.value must be a number such as 90 or 95.5 (got {raw!r}).")
    return value


def check_path(name: str, path: object) -> None:
    try:
        parse_path(path)
    except PathError as exc:
        raise SpecError(f"{name} is not usable: {exc}.") from None
