"""change: any change of the normalized content fires, with the lines that came and went."""

from __future__ import annotations

import difflib

from engine.checks.base import CheckSpec, Verdict
from engine.content import Content, excerpt

FIELDS = frozenset({"type"})
_STATE_TEXT_BYTES = 32 * 1024


def parse(raw: dict) -> CheckSpec:
    return CheckSpec()


def evaluate(check: CheckSpec, content: Content, previous: dict, now=None) -> Verdict:
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
