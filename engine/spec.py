"""monitor_create's arguments, checked and clamped. Every refusal is one sentence for the model."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from engine.checks import CheckSpec, parse_check
from engine.durations import describe_duration, parse_duration
from engine.errors import SpecError
from engine.sources import SOURCE_TYPES, SourcePolicy, SourceSpec, parse_source
from engine.sources.ingest import CONDITION as INGEST_CONDITION

__all__ = ["SOURCE_TYPES", "SourcePolicy", "SourceSpec", "SpecError", "parse_check", "parse_source"]

ARGUMENTS = ("description", "source", "check", "condition", "judge_model", "on_match", "interval", "expires_in",
             "max_wakes", "note", "dry_run")

#: Channels whose conversations a wake cannot resume, and why (seed 000, "Where it works").
UNREACHABLE_CHANNELS = {
    "v1_api": "conversations through the OpenAI-compatible /v1 API",
    "api_key": "conversations through an agent API key",
    "widget": "conversations in the embedded widget",
    "shared_link": "a shared agent's public link",
    "workflow": "workflow nodes",
    "scheduled": "scheduled runs",
    "continuation": "continuation runs",
}


@dataclass(frozen=True)
class Limits:
    default_interval: int = 900
    min_interval: int = 300
    default_ttl: int = 7 * 86400
    max_ttl: int = 30 * 86400
    max_wakes: int = 20
    max_hits: int = 10_000
    #: seed 001's armed-monitor limits
    max_armed_per_conversation: int = 10
    max_armed_per_account: int = 50
    #: how often a document watch is read again without a write (DOCUMENT_SWEEP_SECONDS)
    document_sweep: int = 300
    #: seed 001's armed agent_tool watches per account (each one is a recurring poll)
    max_armed_tool_watches: int = 10
    #: the shortest interval a tool watch polls at (TOOL_MIN_INTERVAL_SECONDS); shorter ones are raised to it
    tool_min_interval: int = 300


@dataclass(frozen=True)
class MonitorSpec:
    description: str
    source: SourceSpec
    check: CheckSpec
    on_match: str
    interval_seconds: int
    ttl_seconds: int
    max_wakes: int
    condition: str = ""
    judge_model: str = ""
    #: seed 001's note: replayed verbatim in every wake
    note: str = ""
    #: depth-1 chaining: the wake message whose run armed this monitor, and how deep the chain is (0: not woken)
    parent_message_id: int | None = None
    depth: int = 0


def channel_refusal(channel: str) -> str | None:
    """Why a monitor cannot report back in this channel, or None when it can."""
    where = UNREACHABLE_CHANNELS.get(channel)
    if where is None:
        return None
    return (f"Monitors can't be created in {where}: a wake can only resume a chat conversation, "
            "so tell the user you can't watch this for them here.")


def dry_run_of(arguments: object) -> bool:
    """monitor_create's dry_run (issue 18): true checks and forecasts the monitor and stores nothing."""
    value = arguments.get("dry_run", False) if isinstance(arguments, dict) else False
    if not isinstance(value, bool):
        raise SpecError("dry_run must be true or false.")
    return value


def parse_create(arguments: object, limits: Limits,
                 policy: SourcePolicy = SourcePolicy()) -> tuple[MonitorSpec, list[str]]:
    """The spec and the notes about limits applied; raises SpecError."""
    if not isinstance(arguments, dict):
        raise SpecError("arguments must be an object with description and source.")
    unknown = sorted(set(arguments) - set(ARGUMENTS))
    if unknown:
        raise SpecError(f"Unknown argument '{unknown[0]}'; the arguments are {', '.join(ARGUMENTS)}.")
    refuse_non_finite(arguments, "arguments")
    notes: list[str] = []
    description = _text(arguments, "description", required=True, limit=500)
    source = parse_source(arguments.get("source"), policy)
    # a watch whose event is a moment or a write polls on its own cadence: its rule says interval is ignored
    interval = (limits.default_interval if source.type in OWN_CADENCE
                else _tool_interval(arguments.get("interval"), limits, notes) if source.type == "tool"
                else _interval(arguments.get("interval"), limits, notes))
    spec = MonitorSpec(
        description=description,
        source=source,
        check=parse_check(arguments.get("check")),
        on_match=_text(arguments, "on_match", required=False, limit=2000),
        interval_seconds=interval,
        ttl_seconds=_ttl(arguments.get("expires_in"), limits, notes),
        max_wakes=_max_wakes(arguments.get("max_wakes"), limits, notes),
        condition=_text(arguments, "condition", required=False, limit=2000),
        judge_model=_text(arguments, "judge_model", required=False, limit=100),
        note=_note(arguments.get("note")),
    )
    if spec.source.type == "webhook":
        spec = _webhook_spec(spec, arguments, limits, notes)
    if spec.source.type == "approval":
        spec = _approval_spec(spec, arguments, notes)
    if spec.source.type == "command" and spec.source.mode == "stream":
        spec = _stream_spec(spec, arguments)
    if spec.source.type == "time":
        spec = _time_spec(spec, arguments, notes)
    if spec.source.type == "document":
        spec = _document_spec(spec, arguments, limits, notes)
    if spec.source.type == "ingest":
        spec = _ingest_spec(spec, arguments, limits, notes)
    if spec.check.value_path and spec.source.type == "page":
        raise SpecError("check.value_path reads JSON; on a page source leave it out and the first number in the text is read.")
    _refuse_for(spec)
    return spec, notes


#: sources where check.for (checks in a row) cannot count, and why
_FOR_REFUSED = {
    "document": "a document watch is checked on each write and on sweeps, not on a count of checks",
    "tool": "a tool watch's unchanged answer is not evaluated again, so a count could not go on",
    "stream": "each line of a stream is its own event",
}


def _refuse_for(spec: MonitorSpec) -> None:
    kind = "stream" if spec.source.type == "command" and spec.source.mode == "stream" else spec.source.type
    if spec.check.hold_for > 1 and kind in _FOR_REFUSED:
        raise SpecError(f"check.for does not work here: {_FOR_REFUSED[kind]}; take for out.")


#: sources that ignore `interval`: the time is the event, or every write of the document is checked
OWN_CADENCE = ("time", "document", "ingest")


#: check fields left out of the stored record at their defaults (issue 18's options), so a check without them is
#: stored as before
_CHECK_DEFAULTS = {"hold_for": 1, "rearm": None}
#: source fields left out of the stored record when unset (issue 31's render), so other sources are stored as before
_SOURCE_OPTIONAL = ("render", "wait_for")


def refuse_non_finite(value: object, where: str) -> None:
    """A number past a double's range (1e400 arrives as infinity) names no threshold or limit: refuse it by name."""
    if isinstance(value, float) and not math.isfinite(value):
        raise SpecError(f"{where} is not a finite number; give a number between -1.7e308 and 1.7e308.")
    if isinstance(value, dict):
        for key, item in value.items():
            refuse_non_finite(item, f"{where}.{key}" if where != "arguments" else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            refuse_non_finite(item, f"{where}[{index}]")


def spec_to_record(spec: MonitorSpec) -> dict:
    check = {key: value for key, value in asdict(spec.check).items()
             if key not in _CHECK_DEFAULTS or value != _CHECK_DEFAULTS[key]}
    source = {key: value for key, value in asdict(spec.source).items()
              if key not in _SOURCE_OPTIONAL or value is not None}
    return {"source": source, "check": check}


def source_from_record(data: dict) -> SourceSpec:
    options = data.get("options")
    return SourceSpec(**{**data, "options": tuple(options) if options is not None else None})


def check_from_record(data: dict) -> CheckSpec:
    values = data.get("values")
    return CheckSpec(**{**data, "values": tuple(values) if values is not None else None})


def _webhook_spec(spec: MonitorSpec, arguments: dict, limits: Limits, notes: list[str]) -> MonitorSpec:
    """Without a check every delivery wakes; max_hits is capped like max_wakes."""
    if arguments.get("check") is None:
        spec = replace(spec, check=CheckSpec(type="every_call"))
    if spec.source.max_hits > limits.max_hits:
        notes.append(f"source.max_hits was capped from {spec.source.max_hits} to the maximum of {limits.max_hits}.")
        spec = replace(spec, source=replace(spec.source, max_hits=limits.max_hits))
    return spec


def _approval_spec(spec: MonitorSpec, arguments: dict, notes: list[str]) -> MonitorSpec:
    """The decision is the event: a check or condition given anyway is ignored, and notes say so."""
    ignored = [name for name in ("check", "condition", "judge_model") if arguments.get(name) is not None]
    if ignored:
        notes.append(f"An approval monitor takes no {' or '.join(ignored)}: the decision is the event, so "
                     f"{'it was' if len(ignored) == 1 else 'they were'} ignored.")
    return replace(spec, check=CheckSpec(type="every_call"), condition="", judge_model="", max_wakes=1)


MAX_NOTE_CHARS = 4000


def _note(value: object) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise SpecError("note must be text: what you want to read when the monitor wakes you.")
    if len(value) > MAX_NOTE_CHARS:
        raise SpecError(f"note is too long ({len(value)} characters); keep it under {MAX_NOTE_CHARS}.")
    return value  # verbatim: it is replayed as written


def _time_spec(spec: MonitorSpec, arguments: dict, notes: list[str]) -> MonitorSpec:
    """The time is the event: it fires once; a check or condition given anyway is ignored, and notes say so."""
    ignored = [name for name in ("check", "condition", "judge_model", "interval") if arguments.get(name) is not None]
    if ignored:
        notes.append(f"A time watch takes no {' or '.join(ignored)}: it fires once at its time, so "
                     f"{'it was' if len(ignored) == 1 else 'they were'} ignored.")
    return replace(spec, check=CheckSpec(type="every_call"), condition="", judge_model="", max_wakes=1,
                   interval_seconds=TIME_RETRY_SECONDS)


#: a time watch whose check message was lost (a worker killed mid-fire) is claimed again this soon
TIME_RETRY_SECONDS = 30


def _document_spec(spec: MonitorSpec, arguments: dict, limits: Limits, notes: list[str]) -> MonitorSpec:
    """A document watch waits for a CEL condition over `doc`: checked on every write of the document, and read
    again every document_sweep (for conditions that read `now`, and in case a write's check was lost)."""
    if spec.check.type != "cel" or arguments.get("check") is None:
        raise SpecError("A document watch needs check {\"type\": \"cel\", \"expr\": …} over doc, e.g. "
                        "has(doc.status) && doc.status == 'done'.")
    if spec.condition or spec.judge_model:
        raise SpecError("A document watch decides with its CEL check alone; take condition and judge_model out.")
    return replace(spec, interval_seconds=_document_interval(arguments, limits, notes))


def _ingest_spec(spec: MonitorSpec, arguments: dict, limits: Limits, notes: list[str]) -> MonitorSpec:
    """The job's ending (status done or failed) is the event: a check or condition given anyway is ignored."""
    ignored = [name for name in ("check", "condition", "judge_model") if arguments.get(name) is not None]
    if ignored:
        notes.append(f"An ingest watch takes no {' or '.join(ignored)}: the job ending (status done or failed) is "
                     f"the event, so {'it was' if len(ignored) == 1 else 'they were'} ignored.")
    return replace(spec, check=CheckSpec(type="cel", expr=INGEST_CONDITION), condition="", judge_model="", max_wakes=1,
                   interval_seconds=_document_interval(arguments, limits, notes))


#: seed 001: a watched tool is polled every 5 to 1440 minutes (the floor is Limits.tool_min_interval, an operator
#: setting); its jitter only ever delays a poll (engine/schedule.py), so it never polls sooner than its interval
TOOL_MAX_INTERVAL = 86400


def _tool_interval(raw: object, limits: Limits, notes: list[str]) -> int:
    """A tool watch's interval clamped to tool_min_interval–24 hours, with a note; 0 (or less than a second) asks
    for the fastest allowed, as seed 001's intervalMinutes 0 does. The general MONITOR_MIN_INTERVAL_SECONDS does
    not apply: the tool floor is its own setting."""
    if raw is None:
        seconds = limits.default_interval
    elif isinstance(raw, (int, float)) and not isinstance(raw, bool) and 0 <= raw < 1:
        seconds = 0
    else:
        seconds = parse_duration(raw)
        if seconds is None:
            raise SpecError(f"interval must look like '15m', '2h' or a number of seconds (got {raw!r}).")
    floor = min(limits.tool_min_interval, TOOL_MAX_INTERVAL)
    clamped = min(max(seconds, floor), TOOL_MAX_INTERVAL)
    if clamped != seconds:
        direction = "raised" if clamped > seconds else "lowered"
        notes.append(f"A watched tool is polled every {describe_duration(floor)} at the soonest and once a day at "
                     f"the latest, so the interval was {direction} from {describe_duration(seconds)} to "
                     f"{describe_duration(clamped)}.")
    return clamped


def _document_interval(arguments: dict, limits: Limits, notes: list[str]) -> int:
    if arguments.get("interval") is not None:
        notes.append(f"A document is checked each time it is written (and read again every "
                     f"{describe_duration(limits.document_sweep)}), so interval was ignored.")
    return limits.document_sweep


#: what may filter a stream's lines: a regex, or CEL over `line`
STREAM_CHECKS = ("regex", "cel")


def _stream_spec(spec: MonitorSpec, arguments: dict) -> MonitorSpec:
    """Every printed line wakes unless a regex or a CEL condition over `line` filters them; no judge."""
    if arguments.get("check") is None:
        return replace(spec, check=CheckSpec(type="every_call"))
    if spec.check.type not in STREAM_CHECKS:
        raise SpecError("A stream's check filters its lines: use {\"type\": \"regex\", \"pattern\": …} or "
                        "{\"type\": \"cel\", \"expr\": …} over line, or leave check out to wake on every line.")
    if spec.check.type == "regex" and spec.check.when == "no_match":
        raise SpecError("A stream's regex picks the lines that wake you, so when must be 'match'.")
    if spec.condition or spec.judge_model:
        raise SpecError("A stream's lines wake you without a judge model; filter them with a regex or CEL check "
                        "instead of a condition.")
    return spec


_TEXT_PURPOSE = {"description": "a short sentence saying what this monitor waits for",
                 "on_match": "what you should do when the monitor wakes you",
                 "condition": "in plain words, what must hold for a change to be worth waking you",
                 "judge_model": "the name of a model in Settings → Models, or leave it out for the default"}


def _text(arguments: dict, name: str, *, required: bool, limit: int) -> str:
    value = arguments.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        need = "is required" if required else "must be text"
        raise SpecError(f"{name} {need}: {_TEXT_PURPOSE[name]}.")
    if len(value) > limit:
        raise SpecError(f"{name} is too long ({len(value)} characters); keep it under {limit}.")
    return value.strip()


def _interval(raw: object, limits: Limits, notes: list[str]) -> int:
    if raw is None:
        return max(limits.default_interval, limits.min_interval)
    seconds = parse_duration(raw)
    if seconds is None:
        raise SpecError(f"interval must look like '15m', '2h' or a number of seconds (got {raw!r}).")
    if seconds < limits.min_interval:
        notes.append(f"The interval was raised from {describe_duration(seconds)} to the minimum of "
                     f"{describe_duration(limits.min_interval)}.")
        return limits.min_interval
    if seconds > limits.max_ttl:
        notes.append(f"The interval was lowered from {describe_duration(seconds)} to "
                     f"{describe_duration(limits.max_ttl)}, the longest a monitor may live.")
        return limits.max_ttl
    return seconds


def _ttl(raw: object, limits: Limits, notes: list[str]) -> int:
    if raw is None:
        return min(limits.default_ttl, limits.max_ttl)
    seconds = parse_duration(raw)
    if seconds is None:
        raise SpecError(f"expires_in must look like '7d', '12h' or a number of seconds (got {raw!r}).")
    if seconds > limits.max_ttl:
        notes.append(f"expires_in was capped from {describe_duration(seconds)} to the maximum of "
                     f"{describe_duration(limits.max_ttl)}.")
        return limits.max_ttl
    return seconds


def _max_wakes(raw: object, limits: Limits, notes: list[str]) -> int:
    if raw is None:
        return 1
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise SpecError(f"max_wakes must be a whole number of at least 1 (got {raw!r}).")
    if raw > limits.max_wakes:
        notes.append(f"max_wakes was capped from {raw} to the maximum of {limits.max_wakes}.")
        return limits.max_wakes
    return raw
