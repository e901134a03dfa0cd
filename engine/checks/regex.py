"""regex: a pattern starts to match the text (or stops matching it). Edge-triggered like threshold.

Patterns run under the `regex` module's time limit, so a catastrophic pattern cannot hang a worker.
"""

from __future__ import annotations

import functools

import regex

from engine.checks import hold
from engine.checks.base import CheckSpec, Verdict
from engine.checks.status import short_fact
from engine.content import Content, excerpt
from engine.errors import ContentError, SpecError

FIELDS = frozenset({"type", "pattern", "when", "for"})
WHENS = ("match", "no_match")
MAX_PATTERN_CHARS = 1000
TIMEOUT_SECONDS = 1.0
_SHOWN_CHARS = 200


def parse(raw: dict) -> CheckSpec:
    pattern = raw.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        raise SpecError(f"check.pattern is required for a regex check: a regular expression such as "
                        f"'In stock' or '(?i)sold out' (got {pattern!r}).")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise SpecError(f"check.pattern is {len(pattern)} characters long; keep it under {MAX_PATTERN_CHARS}.")
    try:
        compiled(pattern)
    except (regex.error, OverflowError, RecursionError) as exc:
        raise SpecError(f"check.pattern is not a valid regular expression: {excerpt(str(exc), 120)}.") from None
    when = raw.get("when", "match")
    if when not in WHENS:
        raise SpecError(f"check.when must be 'match' (fire when the pattern starts matching) or 'no_match' "
                        f"(fire when it stops matching) (got {when!r}).")
    return CheckSpec(type="regex", pattern=pattern, when=when, hold_for=hold.parse_for(raw, "regex"))


@functools.lru_cache(maxsize=256)
def compiled(pattern: str) -> regex.Pattern:
    return regex.compile(pattern)


def evaluate(check: CheckSpec, content: Content, previous: dict, now=None) -> Verdict:
    matched = first_match(check.pattern, content.text)
    holds = (matched is not None) == (check.when != "no_match")
    settled = hold.settle(check, holds, previous, now, was_holding=previous.get("holds", False))
    shown = None if matched is None else excerpt(matched, _SHOWN_CHARS)
    summary = f"the pattern matches {shown!r}" if matched is not None else "the pattern does not match"
    found = ""
    if settled.fired:
        found = f"the pattern matches {shown!r}" if matched is not None else "the pattern no longer matches"
        found += hold.held_words(check, settled)
    fact = short_fact(matched) if matched is not None else "no match"
    return Verdict(fired=settled.fired, summary=summary, found=found, fact=fact,
                   state={"holds": holds, "match": shown, **settled.state})


def first_match(pattern: str, text: str) -> str | None:
    """The text of the first match, or None; a pattern over the time limit raises ContentError."""
    try:
        found = compiled(pattern).search(text, timeout=TIMEOUT_SECONDS)
    except TimeoutError:
        raise ContentError(f"the pattern took too long on this content (over {TIMEOUT_SECONDS:g} s); "
                           "simplify it, e.g. avoid nested repeats like (a+)+") from None
    return None if found is None else found.group(0)
