"""cel: a CEL condition over the content becomes true. Edge-triggered like threshold.

Variables: data (parsed JSON or null), doc (the same data, under seed 001's name for a watched document),
text (the normalized text), value (the number at value_path, else the first number in the text, else null),
previous (data as of the last reading; on the first reading, the current data) and now (a timestamp).
One function beyond standard CEL: maps.get(map, 'a.b', default), seed 001's safe read of a nested field
(standard CEL has only has(); cel-python and the Rust library have no optional values). JSON numbers reach CEL as doubles, so a field
keeps its type whether it reads 95 or 95.5; comparisons mix int and double freely, arithmetic does
not (write data.count + 1.0).
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import json
import re
from datetime import datetime, timezone
from pathlib import Path

from engine.checks import hold
from engine.checks.base import CheckSpec, Verdict
from engine.checks.cel_runner import Runner
from engine.checks.threshold import check_path, read_number
from engine.content import Content, excerpt
from engine.errors import ContentError, SpecError

FIELDS = frozenset({"type", "expr", "value_path", "for"})
MAX_EXPR_CHARS = 2000
#: stored data over this much JSON is stored as null, so `previous` is null on the next reading
MAX_STATE_DATA_BYTES = 64 * 1024
MAX_DEPTH = 100
_SYNTAX = re.compile(r"ERROR: <input>:(\d+):(\d+): (.*)")
_TYPE_ERRORS = ("No such overload", "Unsupported operation", "Cannot mix")
_EXPECTING = re.compile(r" expecting \{.*\}$")


def _load_cel():
    """The common-expression-language package's compiled core (cel.cel), without the package's __init__.

    That __init__ also imports the package's REPL (prompt_toolkit, typer, rich, pygments): ~11 MiB of memory
    and ~0.2 s of start-up in every web, worker and scheduler process, for nothing Vigil calls.
    """
    spec = importlib.util.find_spec("cel")
    folder = Path(spec.submodule_search_locations[0]) if spec and spec.submodule_search_locations else None
    for suffix in importlib.machinery.EXTENSION_SUFFIXES if folder else ():
        if (folder / f"cel{suffix}").exists():
            loader = importlib.machinery.ExtensionFileLoader("cel.cel", str(folder / f"cel{suffix}"))
            module = importlib.util.module_from_spec(importlib.util.spec_from_loader("cel.cel", loader))
            loader.exec_module(module)
            return module
    import cel  # another layout: the whole package, REPL and all

    return cel


cel = _load_cel()
#: evaluations run in a child process with a deadline (engine/checks/cel_runner.py)
_runner = Runner()


def stop_helper() -> None:
    """Stop the evaluating child process, when this process shuts down."""
    _runner.close()


def parse(raw: dict) -> CheckSpec:
    expr = raw.get("expr")
    if not isinstance(expr, str) or not expr.strip():
        raise SpecError("check.expr is required for a cel check: a condition such as "
                        "has(data.status) && data.status == 'done'.")
    if len(expr) > MAX_EXPR_CHARS:
        raise SpecError(f"check.expr is {len(expr)} characters long; keep it under {MAX_EXPR_CHARS}.")
    try:
        cel.compile(expr)
    except Exception as exc:  # the library raises ValueError for a syntax error
        raise SpecError(f"check.expr is not valid CEL: {syntax_message(str(exc))}.") from None
    path = raw.get("value_path")
    if path is not None:
        check_path("check.value_path", path)
    return CheckSpec(type="cel", expr=expr, value_path=path or None, hold_for=hold.parse_for(raw, "cel"))


def syntax_message(message: str) -> str:
    """'Failed to parse … ERROR: <input>:1:4: Syntax error: …' -> 'at column 4: Syntax error: …'."""
    for line in message.splitlines():
        found = _SYNTAX.search(line)
        if found:
            where = f"line {found[1]}, column {found[2]}" if found[1] != "1" else f"column {found[2]}"
            return f"at {where}: {excerpt(_EXPECTING.sub('', found[3]), 160)}"
    return excerpt(message, 160)


def evaluate(check: CheckSpec, content: Content, previous: dict, now=None) -> Verdict:
    data = content.data if content.is_json else None
    earlier = previous["data"] if "data" in previous else data
    converted = to_cel(data)
    variables = {"data": converted, "doc": converted, "text": content.text, "value": read_value(check, content),
                 "previous": to_cel(earlier), "now": timestamp(now)}
    if content.variables:
        variables.update(to_cel(content.variables))
    result = _runner.decide(check.expr, variables)
    settled = hold.settle(check, result, previous, now, was_holding=previous.get("holds", False))
    found = ""
    if settled.fired:
        found = f"the condition is now true: {excerpt(check.expr, 300)}{hold.held_words(check, settled)}"
    return Verdict(fired=settled.fired, summary=f"the condition is {'true' if result else 'false'} now", found=found,
                   fact=content.digest[:16], state={"holds": result, "data": stored_data(data), **settled.state})


def decide(expr: str, variables: dict) -> bool:
    """The condition's value over `variables`, in the helper process under its deadline; raises ContentError."""
    return _runner.decide(expr, variables)


def value(expr: str, variables: dict) -> object:
    """Any expression's value as plain data (maps, lists, text, numbers, times as ISO text), in the helper process
    under its deadline; raises ContentError."""
    return _runner.decide(expr, variables, want="value")


def value_here(expr: str, variables: dict) -> object:
    return plain(run(expr, variables))


def plain(result: object, depth: int = 0) -> object:
    """A CEL result the parent can take back: JSON's types, times as ISO 8601 text."""
    if depth > MAX_DEPTH:
        raise ContentError(f"the value is nested more than {MAX_DEPTH} levels deep")
    if isinstance(result, dict):
        return {str(key): plain(item, depth + 1) for key, item in result.items()}
    if isinstance(result, (list, tuple)):
        return [plain(item, depth + 1) for item in result]
    if isinstance(result, datetime):
        return result.isoformat()
    if result is None or isinstance(result, (str, int, float, bool)):
        return result
    return str(result)


def decide_here(expr: str, variables: dict) -> bool:
    """The condition's value, in this process: what the runner's child process calls."""
    result = run(expr, variables)
    if not isinstance(result, bool):
        raise ContentError(f"the condition must be true or false; it gave {excerpt(repr(result), 80)}")
    return result


@functools.lru_cache(maxsize=4096)
def reads_now(expr: str) -> bool:
    """Whether the condition reads `now`, so its value can change while the data does not (asked on every
    document and tool check: parsed once per expression)."""
    try:
        return "now" in cel.compile(expr).variables()
    except Exception:
        return False


def maps_get(container: object, path: object, default: object = None) -> object:
    """maps.get(doc, 'a.b.0', default): the value at a dotted path (a number indexes a list), else default."""
    if not isinstance(path, str):
        raise ValueError("maps.get takes a dotted path as text, such as maps.get(doc, 'outputs.txt', '')")
    current = container
    for part in path.split(".") if path else ():
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.isascii() and part.isdigit() \
                and int(part) < len(current):
            current = current[int(part)]
        else:
            return default
    return current


_FIELD_PATH = re.compile(r"\b(doc|data)((?:\.[A-Za-z_]\w*)+)")


def missing_field_message(expr: str, field: str) -> str:
    """What to write instead of reading a field the data lacks, naming the whole path where the expression
    shows it (the library names only the last key it looked for)."""
    for root, dotted in _FIELD_PATH.findall(expr):
        parts = dotted[1:].split(".")
        if field in parts:
            whole = ".".join(parts)
            guards = " && ".join(f"has({root}.{'.'.join(parts[:n])})" for n in range(1, len(parts) + 1))
            return (f"the condition reads a field the data does not have ({field!r}); guard it with {guards} && …, "
                    f"or read it with maps.get({root}, '{whole}', default)")
    root = "doc" if re.search(r"\bdoc\b", expr) else "data"
    return (f"the condition reads a field the data does not have ({field!r}); guard it with has({root}.…) && …, "
            f"or read it with maps.get({root}, 'a.b', default)")


def run(expr: str, variables: dict) -> object:
    """The expression's value; an evaluation error becomes ContentError with the library's message."""
    context = cel.Context()
    context.update(variables)
    context.add_function("maps.get", maps_get)
    try:
        return cel.compile(expr).execute(context)
    except KeyError as exc:
        raise ContentError(missing_field_message(expr, str(exc.args[0]) if exc.args else "")) from None
    except Exception as exc:
        raise ContentError(f"the condition could not be evaluated: {first_sentence(str(exc))}") from None
    except BaseException as exc:  # a panic inside the Rust library; let real interrupts through
        if type(exc).__name__ != "PanicException":
            raise
        raise ContentError(f"the condition could not be evaluated: {first_sentence(str(exc))}") from None


def first_sentence(message: str) -> str:
    """The library's first sentence, with a hint for mixed types (JSON numbers here are doubles)."""
    flat = " ".join(message.split())
    head = excerpt(flat.split(". ")[0].rstrip(".") or "unknown error", 200)
    if head.startswith(_TYPE_ERRORS):
        head += (" (CEL compares int and double, but does not mix types in arithmetic or with text: JSON numbers "
                 "are doubles, so write 1.0, or convert with double(), int() or string())")
    return head


def to_cel(value: object, depth: int = 0) -> object:
    """JSON as CEL reads it: objects as maps, arrays as lists, every number a double."""
    if depth > MAX_DEPTH:
        raise ContentError(f"the JSON is nested more than {MAX_DEPTH} levels deep, too deep for a cel condition")
    if isinstance(value, dict):
        return {str(key): to_cel(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list):
        return [to_cel(item, depth + 1) for item in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            raise ContentError("the JSON has a number too large for a cel condition") from None
    return value


def read_value(check: CheckSpec, content: Content) -> float | None:
    """The threshold's number, or None when there is none to read."""
    try:
        return read_number(check, content)
    except ContentError:
        return None


def timestamp(now: datetime | None) -> datetime:
    """`now` as an aware UTC time; a naive one is taken as UTC."""
    if now is None:
        return datetime.now(timezone.utc)
    return now.replace(tzinfo=timezone.utc) if now.tzinfo is None else now.astimezone(timezone.utc)


def stored_data(data: object) -> object:
    """The data to hand back as `previous`, or None when its JSON is over MAX_STATE_DATA_BYTES."""
    if data is None:
        return None
    encoded = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return data if len(encoded.encode("utf-8")) <= MAX_STATE_DATA_BYTES else None
