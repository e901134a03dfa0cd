"""Debounce and re-arm (issue 18): when a condition that holds may fire.

`check.for` (stored as hold_for): fire only once the condition has held on N checks in a row (default 1, the
plain edge). `check.rearm` (threshold only): after firing, fire again only once the number has gone back past
the rearm line, so a value wobbling around the threshold wakes once.

What "held" means per kind: threshold, regex and cel hold while their condition is true; status holds while the
value stays in one state that matters (a move to another state that matters starts a new count). change,
new_items and every_call fire on an event (a change, a new key, a delivery), not on a condition that stays true,
so `for` is refused on them.

A check with neither option keeps its state as before (no extra keys: the latch is `holds` itself). With either,
the state carries held (checks in a row, capped at N), since (when the count began, ISO 8601), armed (whether it
may fire) and pending (held but not yet N times, and armed): while pending, the pipeline evaluates even unchanged
content, so a value that holds and stays the same still counts (engine/pipeline.check_body).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from engine.errors import SpecError

#: the kinds whose verdict is a condition that holds, so `for` applies
HOLDING_KINDS = ("threshold", "status", "regex", "cel")
MAX_FOR = 100
#: why `for` does not apply to each event kind, for the model
_NOT_HOLDING = {
    "change": "a change check fires on the change itself, and the next check sees no change, so nothing holds",
    "new_items": "a new_items check fires once per new item, and an item is new only once",
    "every_call": "an every_call check fires on each event",
}


def parse_for(raw: dict, kind: str) -> int:
    """check.for: a whole number of checks in a row, 1 to MAX_FOR; 1 when absent."""
    if "for" not in raw:
        return 1
    if kind not in HOLDING_KINDS:
        why = _NOT_HOLDING.get(kind, f"a {kind} check fires on an event")
        raise SpecError(f"check.for counts checks in a row on which a condition holds, but {why}; take for out, "
                        f"or use a threshold, status, regex or cel check.")
    value = raw["for"]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_FOR:
        raise SpecError(f"check.for must be a whole number of checks in a row from 1 to {MAX_FOR}, e.g. 3 "
                        f"(got {value!r}).")
    return value


def refuse_rearm(raw: dict, kind: str) -> None:
    if "rearm" in raw and kind != "threshold":
        raise SpecError(f"check.rearm is the line a threshold's number must cross back over, so it works on threshold "
                        f"checks only; take rearm out of this {kind} check.")


@dataclass(frozen=True)
class Held:
    fired: bool
    held: int
    since: str | None
    #: the keys added to the check's state (empty for a check with neither option)
    state: dict


def settle(check, holds: bool, previous: dict, now: datetime | None, *, was_holding: bool,
           same: bool | None = None, rearmed: bool | None = None) -> Held:
    """Whether this reading fires, and the count. `was_holding`: the condition held on the previous reading (used
    for states stored before these options); `same`: this reading continues the previous one's count (default:
    it held); `rearmed`: this reading re-arms a check that fired (default: the condition does not hold)."""
    need = getattr(check, "hold_for", 1) or 1
    prev_held = previous.get("held", need if was_holding else 0)
    armed = previous.get("armed", not was_holding)
    same = prev_held > 0 if same is None else same
    armed = armed or (not holds if rearmed is None else rearmed)
    held = min(prev_held + 1, need) if holds and same else 1 if holds else 0
    since = (previous.get("since") if holds and same else None) or (stamp(now) if holds else None)
    fired = holds and armed and held >= need
    armed = armed and not fired
    extra = {}
    if need > 1 or getattr(check, "rearm", None) is not None:
        extra = {"holds": holds, "held": held, "since": since, "armed": armed,
                 "pending": holds and armed and held < need}
    return Held(fired, held, since, extra)


def at_baseline(state: dict) -> dict:
    """The first reading never fires, and a condition already holding then does not start a count that would:
    like the plain edge, it must stop holding (or re-arm) first."""
    if state.get("holds") and "armed" in state:
        return {**state, "armed": False, "pending": False}
    return state


def pending(check, state: dict | None) -> bool:
    """Whether a `for` count is under way, so unchanged content must still be evaluated."""
    return (getattr(check, "hold_for", 1) or 1) > 1 and bool((state or {}).get("pending"))


def held_words(check, held: Held | dict) -> str:
    """", held for 3 checks (since 09:12 UTC)" for a fire with `for` above 1, else ""."""
    need = getattr(check, "hold_for", 1) or 1
    if need <= 1:
        return ""
    since = held.since if isinstance(held, Held) else held.get("since")
    return f", held for {need} checks{since_words(since)}"


def since_words(since: str | None) -> str:
    """' (since 09:12 UTC)', or '' without a time."""
    if not since:
        return ""
    try:
        moment = datetime.fromisoformat(since.replace("Z", "+00:00"))
    except ValueError:
        return ""
    return f" (since {moment:%H:%M} UTC)"


def stamp(now: datetime | None) -> str | None:
    if now is None:
        return None
    moment = now.replace(tzinfo=timezone.utc) if now.tzinfo is None else now.astimezone(timezone.utc)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")
