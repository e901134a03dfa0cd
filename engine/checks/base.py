"""What every check shares: its spec, its verdict, and the number helpers."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from engine.content import excerpt
from engine.errors import ContentError


@dataclass(frozen=True)
class CheckSpec:
    """A check as stored; each kind reads the fields it owns and leaves the rest None."""
    type: str = "change"
    op: str | None = None
    value: float | None = None
    value_path: str | None = None
    values: tuple | None = None
    items_path: str | None = None
    key_path: str | None = None
    pattern: str | None = None
    when: str | None = None
    expr: str | None = None
    #: check.for: fire only once the condition has held on this many checks in a row (engine/checks/hold.py)
    hold_for: int = 1
    #: check.rearm (threshold): after firing, the number must go back past this line before it can fire again
    rearm: float | None = None


@dataclass(frozen=True)
class Verdict:
    fired: bool
    summary: str
    found: str = ""
    fact: str = ""
    state: dict = field(default_factory=dict)


def format_number(value: float) -> str:
    """95.1 -> "95.10", 90.0 -> "90", 0.000123 -> "0.000123"."""
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    if round(value, 2) == value:
        return f"{value:.2f}"
    return f"{value:.10g}"


def as_number(raw: object, what: str) -> float:
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
