"""threshold: a number crosses a line. Edge-triggered: staying past it does not fire again.

With check.for it fires once the number has been past the line on N checks in a row; with check.rearm, after
firing it fires again only once the number has gone back past the rearm line (engine/checks/hold.py).
"""

from __future__ import annotations

import math
import operator
import re

from engine.checks import hold
from engine.checks.base import CheckSpec, Verdict, as_number, format_number
from engine.content import Content
from engine.errors import ContentError, SpecError
from engine.paths import PathError, parse_path, resolve

FIELDS = frozenset({"type", "op", "value", "value_path", "for", "rearm"})
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
#: the side a rearm line lies on, past the threshold: after firing below 90, re-armed above the rearm line
REARM_SIDE = {"<": "above", "<=": "above", ">": "below", ">=": "below"}

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
    return CheckSpec(type="threshold", op=op, value=value, value_path=path or None,
                     hold_for=hold.parse_for(raw, "threshold"), rearm=parse_rearm(raw.get("rearm"), op, value))


def parse_rearm(raw: object, op: str, value: float) -> float | None:
    """check.rearm: a number on the far side of the threshold (above it for below/at_most, below it for
    above/at_least); refused on == and !=, which have no side."""
    if raw is None:
        return None
    if op not in REARM_SIDE:
        raise SpecError(f"check.rearm needs a direction, so it works with below, above, at_most and at_least, not with "
                        f"{OP_NAMES[op]}; take rearm out.")
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
        raise SpecError(f"check.rearm must be a number such as 92, the line the number must cross back over before "
                        f"it can fire again (got {raw!r}).")
    side, limit = REARM_SIDE[op], format_number(value)
    if (raw <= value) if side == "above" else (raw >= value):
        raise SpecError(f"check.rearm must be {side} check.value for a check that fires {OP_NAMES[op]} {limit}: after "
                        f"firing it re-arms once the number goes {side} rearm (got {format_number(raw)}).")
    return float(raw)


def rearmed(check: CheckSpec, value: float) -> bool:
    """Whether `value` is past the rearm line, so a check that fired may fire again."""
    return value > check.rearm if REARM_SIDE[check.op] == "above" else value < check.rearm


def evaluate(check: CheckSpec, content: Content, previous: dict, now=None) -> Verdict:
    value = read_number(check, content)
    holds = OPS[check.op](value, check.value)
    settled = hold.settle(check, holds, previous, now, was_holding=previous.get("holds", False),
                          rearmed=None if check.rearm is None else rearmed(check, value))
    shown = format_number(value)
    found = ""
    if settled.fired:
        was = f" (was {format_number(previous['value'])})" if previous.get("value", value) != value else ""
        found = f"{shown} is {OP_NAMES[check.op]} {format_number(check.value)}{was}{hold.held_words(check, settled)}"
    return Verdict(fired=settled.fired, summary=f"currently {shown}", found=found, fact=shown,
                   state={"value": value, "holds": holds, **settled.state})


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
