"""The deterministic checks. Each reads the normalized content and what was stored last time,
and returns a verdict; a check that cannot read what it needs raises ContentError."""

from __future__ import annotations

import difflib
import math
import operator
import re
from dataclasses import dataclass, field

from engine.content import Content, ContentError, excerpt
from engine.paths import PathError, resolve

CHECK_TYPES = ("change", "threshold")

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
_STATE_TEXT_BYTES = 32 * 1024


@dataclass(frozen=True)
class CheckSpec:
    type: str = "change"
    op: str | None = None
    value: float | None = None
    value_path: str | None = None


@dataclass(frozen=True)
class Verdict:
    fired: bool
    summary: str
    found: str = ""
    fact: str = ""
    state: dict = field(default_factory=dict)


def normalize_op(op: object) -> str | None:
    """'<', 'below', 'Less than' … -> the symbol, or None."""
    if not isinstance(op, str):
        return None
    key = op.strip().lower().replace(" ", "_").replace("-", "_")
    return key if key in OPS else OP_WORDS.get(key)


def evaluate(check: CheckSpec, content: Content, previous: dict | None) -> Verdict:
    """The verdict on content that changed since `previous` was stored."""
    if check.type == "threshold":
        return _threshold(check, content, previous or {})
    return _change(content, previous or {})


def baseline(check: CheckSpec, content: Content) -> Verdict:
    """The first reading: stored as the state to compare against, never a match."""
    verdict = evaluate(check, content, None)
    return Verdict(fired=False, summary=verdict.summary, state=verdict.state)


def read_number(check: CheckSpec, content: Content) -> float:
    """The number a threshold compares: at value_path in JSON, else the first number in the text."""
    if check.value_path:
        if not content.is_json:
            raise ContentError("value_path needs a json source; on a page the first number is read")
        try:
            raw = resolve(content.data, check.value_path)
        except PathError as exc:
            raise ContentError(f"value_path '{check.value_path}' is gone: {exc}") from None
        return _as_number(raw, f"the value at '{check.value_path}'")
    match = _NUMBER.search(content.text)
    if not match:
        raise ContentError("there is no number in the content to compare")
    return _as_number(match.group(0), "the first number in the content")


def _threshold(check: CheckSpec, content: Content, previous: dict) -> Verdict:
    value = read_number(check, content)
    holds = OPS[check.op](value, check.value)
    fired = holds and not previous.get("holds", False)
    shown = format_number(value)
    summary = f"currently {shown}"
    found = ""
    if fired:
        was = f" (was {format_number(previous['value'])})" if "value" in previous else ""
        found = f"{shown} is {OP_NAMES[check.op]} {format_number(check.value)}{was}"
    return Verdict(fired=fired, summary=summary, found=found, fact=shown,
                   state={"value": value, "holds": holds})


def _change(content: Content, previous: dict) -> Verdict:
    before = previous.get("text")
    state = {"text": content.text[:_STATE_TEXT_BYTES]}
    summary = f"currently: {excerpt(content.text, 200)}"
    if before is None:
        return Verdict(fired=False, summary=summary, state=state)
    found = describe_change(before, content.text)
    return Verdict(fired=True, summary=summary, found=found, fact=content.digest[:16], state=state)


def describe_change(before: str, after: str, limit: int = 2000) -> str:
    """The lines that appeared and disappeared, most useful first."""
    added, removed = [], []
    for line in difflib.ndiff(before.splitlines(), after.splitlines()):
        if line.startswith("+ "):
            added.append(line[2:])
        elif line.startswith("- "):
            removed.append(line[2:])
    parts = [f"+ {line}" for line in added] + [f"- {line}" for line in removed]
    text = "\n".join(parts) or "the content changed (whitespace or order only)"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def format_number(value: float) -> str:
    """95.1 -> "95.10", 90.0 -> "90", 0.000123 -> "0.000123"."""
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    if round(value, 2) == value:
        return f"{value:.2f}"
    return f"{value:.10g}"


def _as_number(raw: object, what: str) -> float:
    if isinstance(raw, bool) or raw is None:
        raise ContentError(f"{what} is not a number ({raw!r})")
    if isinstance(raw, (int, float)):
        number = float(raw)
    elif isinstance(raw, str):
        try:
            number = float(raw.replace(",", "").replace("−", "-").strip())
        except ValueError:
            raise ContentError(f"{what} is not a number ({excerpt(raw, 40)!r})") from None
    else:
        raise ContentError(f"{what} is not a number (it is a {type(raw).__name__})")
    if not math.isfinite(number):
        raise ContentError(f"{what} is not a finite number")
    return number
