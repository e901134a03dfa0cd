"""A monitor in words, for the owner's pages: what it watches, what it waits for, and when it looks.

Pure: it reads the stored `source` and `check` dicts; what lives in other tables (a trigger link's hits, an
approval's state) is passed in. A polled source is read at its interval; an event source is checked when its
event arrives (a delivery, a decision, a write, its time, a printed line), so its last time is its "last event".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from engine.checks.base import format_number
from engine.checks.threshold import OP_NAMES
from engine.durations import describe_duration
from engine.expect import expecting_words, parse_expect, terms
from engine.sources.ingest import CONDITION as INGEST_CONDITION

#: event sources -> when they are checked, in the row's "Every" cell
EVENT_CADENCE = {"webhook": "on delivery", "approval": "on decision", "document": "on write", "ingest": "on write",
                 "time": "at its time"}
STREAM_CADENCE = "on each line"
#: an approval's decision label -> its state in words; other labels read "decided: <label>"
DECISION_WORDS = {"approve": "approved", "reject": "rejected", "deny": "denied", "accept": "accepted",
                  "decline": "declined", "yes": "approved", "no": "rejected"}


@dataclass(frozen=True)
class Description:
    watches: str
    check: str
    #: "every 15m" for a polled source, else when its events are checked ("on delivery" …)
    cadence: str
    polled: bool

    @property
    def last_label(self) -> str:
        return "last checked" if self.polled else "last event"


def describe(source: dict, check: dict, interval_seconds: int, *, condition: str = "", hits: int | None = None,
             approval: str | None = None, max_wakes: int | None = None) -> Description:
    """The row's words for one monitor; `hits` is its trigger link's count, `approval` its request's state, and
    a trigger link's `max_wakes` says when it ends."""
    source, check = source or {}, check or {}
    words = check_words(source, check, condition) + link_end(source, max_wakes)
    return Description(watches=watches(source, hits=hits, approval=approval), check=words,
                       cadence=cadence(source, interval_seconds), polled=is_polled(source))


def link_end(source: dict, max_wakes: int | None) -> str:
    """" · ends after 1 wake": a trigger link answers 404 once its monitor has used its wakes."""
    if source.get("type") != "webhook" or not max_wakes:
        return ""
    return f" · ends after {max_wakes} wake{'s' if max_wakes != 1 else ''}"


def is_polled(source: dict) -> bool:
    return source.get("type") not in EVENT_CADENCE and not _is_stream(source)


def cadence(source: dict, interval_seconds: int) -> str:
    if _is_stream(source):
        return STREAM_CADENCE
    return EVENT_CADENCE.get(source.get("type"), f"every {describe_duration(interval_seconds)}")


def approval_word(state: str, decision: str | None = None) -> str:
    """open, expired, ended, or the decision as a state: "approved", "rejected", "decided: Ship it"."""
    if state != "decided" or not decision:
        return state
    return DECISION_WORDS.get(decision.strip().lower(), f"decided: {decision}")


def watches(source: dict, *, hits: int | None = None, approval: str | None = None) -> str:
    """What the source watches: "page https://… (#price)", "trigger link (github) · 3 of 1000 hits" …"""
    kind = source.get("type")
    if kind == "webhook":
        return _webhook(source, hits)
    if kind == "approval":
        return f"approval: {source.get('question') or ''}" + (f" · {approval}" if approval else "")
    describe_kind = _WATCHES.get(kind)
    return describe_kind(source) if describe_kind else str(kind or "unknown source")


def _webhook(source: dict, hits: int | None) -> str:
    scheme = source.get("signature") or "none"
    signed = "unsigned" if scheme == "none" else scheme
    limit = source.get("max_hits")
    expected = f" · {_expected(source['expect'])}" if source.get("expect") else ""
    if limit is None:
        return f"trigger link ({signed}){expected}"
    count = f"{hits} of {limit}" if hits is not None else f"up to {limit}"
    return f"trigger link ({signed}) · {count} hits{expected}"


def _expected(raw: dict) -> str:
    """ "expected every day at 02:30 (Europe/Paris), grace 30m"."""
    expect = parse_expect(raw)
    return f"{terms(expect)} ({expect.tz})"


def expecting(source: dict, due_at: datetime | None, missed_since: datetime | None, now: datetime) -> str | None:
    """A trigger link's expected deliveries on the monitor page: when the next one is due (`due_at` None while
    the monitor is not active), and since when they have been missing; None without an expect."""
    raw = (source or {}).get("expect")
    if not raw:
        return None
    return expecting_words(parse_expect(raw), due_at, missed_since, now)


def _page(source: dict) -> str:
    return f"page {source.get('url') or ''}" + (f" ({source['selector']})" if source.get("selector") else "")


def _feed(source: dict) -> str:
    parts = [f"items at {source['items_path']}"] if source.get("items_path") else []
    parts += [f"keyed by {source['key_path']}"] if source.get("key_path") else []
    return f"feed {source.get('url') or ''}" + (f" ({', '.join(parts)})" if parts else "")


def _metric(source: dict) -> str:
    labels = source.get("labels") or {}
    selector = "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else ""
    return f"metric {source.get('metric') or ''}{selector} at {source.get('url') or ''}"


def _command(source: dict) -> str:
    where = f" in {source['cwd']}" if source.get("cwd") else ""
    how = "streamed" if _is_stream(source) else "polled"
    return f"$ {source.get('command') or ''} on {source.get('device') or 'a device'}{where} · {how}"


def _time(source: dict) -> str:
    fire_at = source.get("fire_at")
    if fire_at:
        return f"time: {fire_at.replace('T', ' ').replace('Z', ' UTC')}"
    return f"time: {describe_duration(int(source.get('delay') or 0))} after it was made"


def _tool(source: dict) -> str:
    arguments = ", ".join(f"{k}={_scalar(v)}" for k, v in (source.get("arguments") or {}).items())
    call = f"tool {source.get('tool') or ''}({arguments})"
    if source.get("connection"):
        return f"{call} on connection {source['connection']}"
    return f"{call} of agent {source['agent_id']}" if source.get("agent_id") else call


_WATCHES = {
    "page": _page,
    "json": lambda s: f"JSON {s.get('url') or ''}",
    "feed": _feed,
    "file": lambda s: f"file {s.get('path') or ''}",
    "metric": _metric,
    "command": _command,
    "time": _time,
    "document": lambda s: f"document {s.get('item_type') or ''}/{s.get('item_id') or ''}",
    "ingest": lambda s: f"ingest job {s.get('item_id') or ''}",
    "tool": _tool,
}


def check_words(source: dict, check: dict, condition: str = "") -> str:
    """What the check waits for: "any change", "data.price below 90", "every delivery" …; a judge's condition
    is added after it."""
    words = _check(source, check) + _debounce(check)
    return f"{words}, then judged: {condition}" if condition else words


def _debounce(check: dict) -> str:
    """" for 3 checks in a row", " (re-arms above 92)": check.for and check.rearm in words."""
    words = f" for {check['hold_for']} checks in a row" if (check.get("hold_for") or 1) > 1 else ""
    if check.get("rearm") is not None:
        side = "above" if check.get("op") in ("<", "<=") else "below"
        words += f" (re-arms {side} {format_number(check['rearm'])})"
    return words


def _check(source: dict, check: dict) -> str:
    kind, source_type = check.get("type") or "change", source.get("type")
    if _is_stream(source):
        return _stream_check(check)
    if source_type == "ingest" or (kind == "cel" and check.get("expr") == INGEST_CONDITION):
        return "the job ends (done or failed)"
    if kind == "every_call":
        return _EVERY_CALL.get(source_type, "every check")
    if kind == "threshold":
        return f"{_number_at(source, check)} {OP_NAMES.get(check.get('op'), check.get('op'))} " \
               f"{format_number(check['value']) if check.get('value') is not None else '?'}"
    if kind == "status":
        values = " or ".join(_scalar(v, quote_text=False) for v in check.get("values") or ())
        return f"{check.get('value_path') or 'the value'} becomes {values}"
    if kind == "new_items":
        return _new_items(source_type, check)
    if kind == "regex":
        verb = "stops matching" if check.get("when") == "no_match" else "matches"
        return f"text {verb} /{check.get('pattern') or ''}/"
    if kind == "cel":
        return f"when {check.get('expr') or ''}"
    return "any change" if kind == "change" else str(kind)


_EVERY_CALL = {"webhook": "every delivery", "approval": "the decision", "time": "fires once at its time"}


def _stream_check(check: dict) -> str:
    if check.get("type") == "regex":
        return f"lines matching /{check.get('pattern') or ''}/"
    if check.get("type") == "cel":
        return f"lines where {check.get('expr') or ''}"
    return "every line"


def _number_at(source: dict, check: dict) -> str:
    """Where a threshold reads its number: the value_path, a metric's value, else the text's first number."""
    if check.get("value_path"):
        return check["value_path"]
    return "the value" if source.get("type") == "metric" else "the first number"


def _new_items(source_type: str | None, check: dict) -> str:
    items = "new entries" if source_type == "feed" and not check.get("items_path") else "new items"
    where = f" at {check['items_path']}" if check.get("items_path") else ""
    keyed = f" (keyed by {check['key_path']})" if check.get("key_path") else ""
    return f"{items}{where}{keyed}"


def _is_stream(source: dict) -> bool:
    return source.get("type") == "command" and source.get("mode") == "stream"


def _scalar(value: object, quote_text: bool = True) -> str:
    if isinstance(value, str) and not quote_text:
        return value
    return json.dumps(value, ensure_ascii=False)
