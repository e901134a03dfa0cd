"""A device's command denylist: destructive patterns refused at create, on every run and every stream start.

The default list is always in force; an owner adds patterns of their own (Python regular expressions,
searched anywhere in the command). A match names the pattern, so the refusal can say which.
"""

from __future__ import annotations

import functools
import re

#: (what the owner and the model read, the pattern)
DEFAULT_PATTERNS: tuple[tuple[str, str], ...] = (
    ("rm -rf /", r"\brm\s+(?:-[^\s]*\s+)*(?:-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)\s+(?:-[^\s]*\s+)*"
                 r"(?:/|/\*|~/?|\$HOME/?|--no-preserve-root)(?=$|[\s;&|)])"),
    ("rm --no-preserve-root", r"--no-preserve-root"),
    ("mkfs", r"\bmkfs(?:\.\w+)?\b"),
    ("dd of=/dev/…", r"\bdd\b[^;&|\n]*\bof=/dev/"),
    ("> /dev/<disk>", r">\s*/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|disk)\w*"),
    ("shutdown / reboot / halt / poweroff", r"(?:^|[;&|(]\s*|\bsudo\s+|\bexec\s+)"
                                            r"(?:shutdown|reboot|halt|poweroff|init\s+[06])\b"),
    ("curl … | sh", r"\b(?:curl|wget)\b[^;&\n]*\|\s*(?:sudo\s+)?(?:ba|z|da|k|fi)?sh\b"),
    ("fork bomb", r"(\w+|:)\s*\(\s*\)\s*\{[^}]*\1\s*\|\s*\1\s*&[^}]*\}"),
    ("chmod -R … /", r"\bchmod\s+(?:-[^\s]*\s+)*-[a-zA-Z]*R[a-zA-Z]*\s+\S+\s+/(?=$|[\s;&|])"),
)

MAX_OWNER_PATTERNS = 100
MAX_PATTERN_CHARS = 500


class DenylistError(ValueError):
    """An owner's pattern that can't be used; str() says which and why."""


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str) -> re.Pattern:
    return re.compile(pattern)


def refused_by(command: str, owner_patterns: list[str] | tuple[str, ...] = ()) -> str | None:
    """The pattern that refuses `command` (its readable name for a default one), or None."""
    for name, pattern in DEFAULT_PATTERNS:
        if _compiled(pattern).search(command):
            return name
    for pattern in owner_patterns:
        if _compiled(pattern).search(command):
            return pattern
    return None


def checked_patterns(raw: object) -> list[str]:
    """The owner's patterns from a PATCH, each compiled once; raises DenylistError."""
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise DenylistError("denylist must be a list of regular expressions (strings).")
    patterns = [item.strip() for item in raw if item.strip()]
    if len(patterns) > MAX_OWNER_PATTERNS:
        raise DenylistError(f"denylist holds {len(patterns)} patterns; keep it to {MAX_OWNER_PATTERNS}.")
    for pattern in patterns:
        if len(pattern) > MAX_PATTERN_CHARS:
            raise DenylistError(f"The denylist pattern {pattern[:40]!r}… is over {MAX_PATTERN_CHARS} characters.")
        try:
            _compiled(pattern)
        except re.error as exc:
            raise DenylistError(f"The denylist pattern {pattern!r} is not a valid regular expression: {exc}.") from None
    return patterns
