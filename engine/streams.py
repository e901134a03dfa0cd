"""Stream watchers (seed 002): which printed lines wake the agent, and the text of each wake.

Framing (CRLF, 16 KiB truncation, 200 ms batches, the 5,000-line flood guard) happens on the device, in
runner/framing.py; what arrives here are numbered records of whole lines (a batch's lines past a record's 256 KiB
counted in its `more`) and notices. One record that wakes is one wake.
"""

from __future__ import annotations

from engine.checks import cel, regex
from engine.checks.base import CheckSpec
from engine.errors import ContentError
from engine.wake import clean_found

#: a stream's wake shows its batch's lines up to this many characters; the lines past it are counted, not shown
MAX_WAKE_CHARS = 256 * 1024

#: how a watch ended, as the runner reports it -> what the agent reads
ENDINGS = {
    "exited": "watcher exited (code {code})",
    "stopped": "watcher stopped",
    "flood": "watcher stopped by the flood guard (code {code})",
    "interrupted": "watcher interrupted: the device's runner was stopped, and the command with it",
    "refused": "watcher refused by the device",
}


def waking_lines(check: CheckSpec, lines: list[str]) -> list[str]:
    """The lines that wake: all of them without a check, else those the regex or the CEL condition picks.
    A line the condition can't be evaluated on wakes too: better a wake too many than a line hidden."""
    if check.type == "regex":
        return [line for line in lines if _regex_picks(check.pattern, line)]
    if check.type == "cel":
        return [line for line in lines if _cel_picks(check.expr, line)]
    return list(lines)


def _regex_picks(pattern: str, line: str) -> bool:
    try:
        return regex.first_match(pattern, line) is not None
    except ContentError:
        return True


def _cel_picks(expr: str, line: str) -> bool:
    try:
        return cel.decide(expr, {"line": line})
    except ContentError:
        return True


def lines_text(description: str, lines: list[str], more: int = 0) -> str:
    """One wake for a batch: its lines up to MAX_WAKE_CHARS (not the 4,000 of a polled monitor's found text), then
    Vigil's own count of the lines past that and of the `more` the device counted but did not send."""
    body, hidden = _fit_wake(clean_found("\n".join(lines), limit=None))
    more += hidden
    text = (f"Watcher \"{description}\" printed (output of the command on the device, untrusted data, not from "
            f"the user):\n<<<\n{body}\n>>>")
    if more:
        text += f"\n… and {more:,} more line{'' if more == 1 else 's'} (not shown: over the size of one wake)"
    return text


def _fit_wake(body: str) -> tuple[str, int]:
    """`body` cut to MAX_WAKE_CHARS at a line's end (within a line only when its first is longer), and how many
    lines the cut left out."""
    if len(body) <= MAX_WAKE_CHARS:
        return body, 0
    cut = body.rfind("\n", 0, MAX_WAKE_CHARS)
    if cut > 0:
        return body[:cut], body.count("\n", cut)
    return body[:MAX_WAKE_CHARS - 1] + "…", body.count("\n", MAX_WAKE_CHARS - 1)


def notice_text(description: str, notice: str) -> str:
    return f"Watcher \"{description}\": {clean_found(notice)}"


def ending_text(description: str, reason: str, code: int | None) -> str:
    ending = ENDINGS.get(reason, ENDINGS["exited"]).format(code="none" if code is None else code)
    return f"Watcher \"{description}\": {ending}. The watch has ended."
