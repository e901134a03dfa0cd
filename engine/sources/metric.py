"""metric: one series of a Prometheus text exposition endpoint (…/metrics), picked by name and labels."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal

from engine.content import Content
from engine.errors import ContentError, SpecError
from engine.sources.base import SourceIO, SourcePolicy, SourceSpec, fetch_whole, parse_url

FIELDS = frozenset({"type", "url", "metric", "labels"})
METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}
_SPACE = " \t"
_SHOWN_VALUES = 5


class MetricSyntaxError(ContentError):
    """A line of the exposition that is not a sample."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def parse(raw: dict, policy: SourcePolicy) -> SourceSpec:
    url = parse_url("metric", raw)
    name = raw.get("metric")
    if not isinstance(name, str) or not METRIC_NAME.fullmatch(name.strip()):
        raise SpecError("source.metric must be the name of a Prometheus series, such as "
                        f"http_requests_total or node_load1 (got {name!r}).")
    return SourceSpec(type="metric", url=url, metric=name.strip(), labels=_parse_labels(raw.get("labels")))


def _parse_labels(labels: object) -> dict[str, str] | None:
    if labels is None:
        return None
    if not isinstance(labels, dict):
        raise SpecError('source.labels must be an object of label names to values, such as {"job": "api"}.')
    for key, value in labels.items():
        if not LABEL_NAME.fullmatch(key) or key.startswith("__"):
            raise SpecError(f"source.labels has {key!r}, which is not a Prometheus label name.")
        if not isinstance(value, str):
            raise SpecError(f"source.labels.{key} must be text, as label values always are (got {value!r}).")
    return dict(labels) or None


def read(spec: SourceSpec, io: SourceIO) -> bytes:
    return fetch_whole(io, spec.url, "a metrics page")


def normalize(spec: SourceSpec, body: bytes, max_text_bytes: int) -> Content:
    """The one series named spec.metric whose labels include spec.labels, as a number."""
    wanted = spec.labels or {}
    text = body.decode("utf-8", errors="replace")
    named = list(samples(text, spec.metric))
    matches = [s for s in named if all(s.labels.get(k) == v for k, v in wanted.items())]
    if not matches:
        raise ContentError(_no_match(spec.metric, wanted, named))
    if len(matches) > 1:
        raise ContentError(_several(spec.metric, matches))
    found = matches[0]
    if not math.isfinite(found.value):
        raise ContentError(f"the series {describe(found.name, found.labels)} is {found.value}, "
                           "not a number that can be compared")
    return Content(text=plain_number(found.value), data={"value": found.value, "labels": found.labels},
                   is_json=True)


def samples(text: str, name: str | None = None) -> Iterator[Sample]:
    """Every sample of the exposition, or only those named `name` (other lines are not parsed)."""
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if name is not None and not (line.startswith(name) and line[len(name):len(name) + 1] in ("{", " ", "\t")):
            continue
        yield parse_line(line, number)


def parse_line(line: str, number: int = 1) -> Sample:
    """`name{label="value",…} value [timestamp]` -> Sample; raises MetricSyntaxError."""
    found = METRIC_NAME.match(line)
    if not found:
        raise MetricSyntaxError(f"line {number} of the metrics does not start with a metric name")
    labels, end = {}, found.end()
    if line[end:end + 1] == "{":
        labels, end = _labels(line, end + 1, number)
    rest = line[end:].split(" # ", 1)[0].split()  # an OpenMetrics exemplar follows ' # '
    if not rest or len(rest) > 2 or (not labels and line[end] not in _SPACE):
        raise MetricSyntaxError(f"line {number} of the metrics should end in a value and an optional timestamp")
    return Sample(found.group(0), labels, _value(rest, number))


def _labels(line: str, at: int, number: int) -> tuple[dict[str, str], int]:
    """The labels after '{' at `at`, and where the text after '}' starts."""
    labels: dict[str, str] = {}
    while True:
        at = _skip(line, at)
        if line[at:at + 1] == "}":
            return labels, at + 1
        name = LABEL_NAME.match(line, at)
        at = _skip(line, name.end()) if name else at
        if not name or line[at:at + 1] != "=" or line[_skip(line, at + 1):][:1] != '"':
            raise MetricSyntaxError(f"line {number} of the metrics has a malformed label at column {at + 1}")
        if name.group(0) in labels:
            raise MetricSyntaxError(f"line {number} of the metrics repeats the label {name.group(0)}")
        labels[name.group(0)], at = _quoted(line, _skip(line, at + 1) + 1, number)
        at = _skip(line, at)
        if line[at:at + 1] == ",":
            at += 1
        elif line[at:at + 1] != "}":
            raise MetricSyntaxError(f"line {number} of the metrics has a malformed label list at column {at + 1}")


def _quoted(line: str, at: int, number: int) -> tuple[str, int]:
    """A label value from just after its opening quote: its text, and where the closing quote ends."""
    out = []
    while at < len(line):
        char = line[at]
        if char == '"':
            return "".join(out), at + 1
        if char == "\\" and at + 1 < len(line):
            out.append(_ESCAPES.get(line[at + 1], "\\" + line[at + 1]))
            at += 2
            continue
        out.append(char)
        at += 1
    raise MetricSyntaxError(f"line {number} of the metrics has a label value without its closing quote")


def _value(tokens: list[str], number: int) -> float:
    try:
        value = float(tokens[0])
        if len(tokens) == 2:
            float(tokens[1])  # milliseconds here, seconds with a fraction in OpenMetrics
    except ValueError:
        raise MetricSyntaxError(f"line {number} of the metrics has {' '.join(tokens)!r} where a value "
                                "and an optional timestamp belong") from None
    return value


def _skip(line: str, at: int) -> int:
    while at < len(line) and line[at] in _SPACE:
        at += 1
    return at


def plain_number(value: float) -> str:
    """A decimal without an exponent (1e-05 -> 0.00001), so the first number of the text is the value."""
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return format(Decimal(repr(value)), "f")


def describe(name: str, labels: dict[str, str]) -> str:
    """name{a="b",c="d"}, as Prometheus writes a series."""
    if not labels:
        return name
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _no_match(name: str, wanted: dict[str, str], named: list[Sample]) -> str:
    if not named:
        return f"there is no series named {name} in the metrics"
    shown = "; ".join(describe(s.name, s.labels) for s in named[:_SHOWN_VALUES])
    more = f" and {len(named) - _SHOWN_VALUES} more" if len(named) > _SHOWN_VALUES else ""
    return f"there is no series named {name} with labels {_labels_json(wanted)}; its series are {shown}{more}"


def _several(name: str, matches: list[Sample]) -> str:
    """Which labels tell the matching series apart, so the model can narrow source.labels."""
    keys = sorted({k for s in matches for k in s.labels})
    differing = []
    for key in keys:
        values = list(dict.fromkeys(s.labels.get(key, "") for s in matches))
        if len(values) > 1:
            shown = ", ".join(repr(v) for v in values[:_SHOWN_VALUES])
            differing.append(f"{key} ({shown}{', …' if len(values) > _SHOWN_VALUES else ''})")
    return (f"{len(matches)} series named {name} match; add source.labels to pick one, using "
            f"{' or '.join(differing[:3]) or 'their labels'}")


def _labels_json(labels: dict[str, str]) -> str:
    return "{" + ", ".join(f'"{k}": "{v}"' for k, v in labels.items()) + "}" if labels else "{}"
