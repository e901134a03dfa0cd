"""The deterministic checks, one module per kind. Each has FIELDS, parse(raw) -> CheckSpec and
evaluate(spec, content, previous, now) -> Verdict; a check that cannot read what it needs raises
ContentError, never a silent non-match."""

from __future__ import annotations

from datetime import datetime

from engine.checks import cel, change, every_call, hold, new_items, regex, status, threshold
from engine.checks.base import CheckSpec, Verdict, format_number
from engine.checks.change import describe_change
from engine.checks.threshold import OP_NAMES, OPS, normalize_op, read_number
from engine.content import Content
from engine.errors import SpecError

#: check type -> the module that parses and evaluates it
KINDS = {"change": change, "threshold": threshold, "status": status, "new_items": new_items, "regex": regex,
         "cel": cel, "every_call": every_call}
CHECK_TYPES = tuple(KINDS)

__all__ = ["CHECK_TYPES", "KINDS", "OPS", "OP_NAMES", "CheckSpec", "Verdict", "baseline", "describe_change",
           "evaluate", "format_number", "normalize_op", "parse_check", "read_number"]


def parse_check(raw: object) -> CheckSpec:
    """A check from monitor_create's arguments; None means the default, change."""
    if raw is None:
        return CheckSpec()
    if not isinstance(raw, dict):
        raise SpecError('check must be an object like {"type": "change"}.')
    kind = raw.get("type")
    if kind not in KINDS:
        raise SpecError(f"check.type must be one of {', '.join(CHECK_TYPES)} (got {kind!r}).")
    hold.refuse_rearm(raw, kind)
    hold.parse_for(raw, kind)  # on a kind that fires on an event, `for` gets its own sentence
    allowed = KINDS[kind].FIELDS
    extra = sorted(set(raw) - allowed)
    if extra:
        raise SpecError(f"check has an unknown field '{extra[0]}'; a {kind} check takes {', '.join(sorted(allowed))}.")
    return KINDS[kind].parse(raw)


def evaluate(check: CheckSpec, content: Content, previous: dict | None, now: datetime | None = None) -> Verdict:
    """The verdict on content that changed since `previous` was stored."""
    return KINDS[check.type].evaluate(check, content, previous or {}, now)


def baseline(check: CheckSpec, content: Content, now: datetime | None = None) -> Verdict:
    """The first reading: stored as the state to compare against, never a match."""
    verdict = evaluate(check, content, None, now)
    return Verdict(fired=False, summary=verdict.summary, state=hold.at_baseline(verdict.state))
