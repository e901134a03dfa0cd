"""every_call: each event fires. A webhook without a check wakes on every delivery, progress calls too."""

from __future__ import annotations

from engine.checks.base import CheckSpec, Verdict
from engine.content import Content, excerpt

FIELDS = frozenset({"type"})


def parse(raw: dict) -> CheckSpec:
    return CheckSpec(type="every_call")


def evaluate(check: CheckSpec, content: Content, previous: dict, now=None) -> Verdict:
    return Verdict(fired=True, summary=excerpt(content.text, 200), found=content.text[:4000],
                   fact=content.digest[:16], state={})
