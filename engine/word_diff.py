"""A text change, word by word: what the monitor page shows of a page monitor's latest change
(app/templates/partials/_monitor_diff.html marks it with <ins>/<del>; Jinja escapes the words).

Pure. The input is what the change's event kept: the lines that came and went (engine/checks/change.
describe_change, "+ line" / "- line", cut at engine/explain.MAX_SIDE_CHARS), so the diff shows the changed lines
only, not the page around them.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

#: the most characters of each side compared; beyond it the diff says it was cut
MAX_CHARS = 4000
SAME, ADDED, REMOVED = "same", "added", "removed"
#: the units compared: runs of space, numbers whole ("4.1", "1,234.50", "18:40"), words, each punctuation mark
_TOKENS = re.compile(r"\s+|\d+(?:[.,:]\d+)*|\w+|[^\w\s]")


@dataclass(frozen=True)
class WordDiff:
    #: (SAME | ADDED | REMOVED, text), in reading order; a replacement is its removed words, then its added ones
    parts: tuple[tuple[str, str], ...]
    #: whether either side was longer than the cap (or was cut when it was stored)
    cut: bool = False

    @property
    def changed(self) -> bool:
        return any(kind != SAME for kind, _ in self.parts)


def word_diff(before: str, after: str, limit: int = MAX_CHARS, cut: bool = False) -> WordDiff:
    """The words of `after` against `before`, each side cut at `limit` characters."""
    cut = cut or len(before) > limit or len(after) > limit
    old, new = _TOKENS.findall(before[:limit]), _TOKENS.findall(after[:limit])
    parts: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if op == "equal":
            _add(parts, SAME, "".join(old[i1:i2]))
            continue
        _add(parts, REMOVED, "".join(old[i1:i2]))
        _add(parts, ADDED, "".join(new[j1:j2]))
    return WordDiff(tuple(parts), cut)


def _add(parts: list[tuple[str, str]], kind: str, text: str) -> None:
    """Append, joining a part to the one before it of the same kind."""
    if not text:
        return
    if parts and parts[-1][0] == kind:
        parts[-1] = (kind, parts[-1][1] + text)
    else:
        parts.append((kind, text))


def sides_of(line_diff: str, stored_limit: int | None = None) -> tuple[str, str, bool]:
    """The removed lines and the added lines of a stored line diff ("+ added" lines, then "- removed" lines), and
    whether it was cut when stored (it then ends in "…" at `stored_limit` characters)."""
    added, removed = [], []
    for line in line_diff.splitlines():
        if line.startswith("+ "):
            added.append(line[2:])
        elif line.startswith("- "):
            removed.append(line[2:])
    cut = stored_limit is not None and len(line_diff) >= stored_limit and line_diff.endswith("…")
    return "\n".join(removed), "\n".join(added), cut


def diff_of_change(line_diff: str, stored_limit: int | None = None, limit: int = MAX_CHARS) -> WordDiff | None:
    """The word diff of a change event's stored line diff; None when it names no lines (whitespace or order only)."""
    before, after, cut = sides_of(line_diff, stored_limit)
    if not before and not after:
        return None
    return word_diff(before, after, limit, cut)
