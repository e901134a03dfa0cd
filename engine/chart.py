"""A numeric monitor's readings as a small chart: the geometry of a server-rendered SVG
(app/templates/partials/_monitor_chart.html draws it), from (time, value) pairs and the threshold.

Pure: the readings come from the stored events (a quiet check leaves no row, but it read the same value, so the
value is held from one reading to the next, up to the last check), and `now` is passed in.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from datetime import datetime

from engine.checks.threshold import OP_NAMES

#: the chart's coordinate system (its viewBox); the SVG scales to the width of its container
WIDTH, HEIGHT = 360, 190
#: the plot area inside it: a gutter on the left for the min/max labels, a line at the bottom for the times
LEFT, RIGHT, TOP, BOTTOM = 62, 352, 18, 158
#: the highest value is drawn this far below the top of the plot, the lowest this far above its bottom
INSET = 8
#: the event kinds whose data carries a reading (engine/explain.change_data's before → after)
READING_KINDS = ("baseline", "changed", "fired")


@dataclass(frozen=True)
class Reading:
    at: datetime
    value: float
    fired: bool = False


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    fired: bool
    #: "42 at 2026-12-03 18:20 UTC", the point's tooltip
    label: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    #: the SVG polyline's points: the value held (a step) from each reading to the next, and to the last check
    line: str
    points: tuple[Point, ...]
    #: the threshold's y and its label ("below 90"); None when the check has none
    threshold_y: float | None
    threshold_label: str
    #: the axis labels: the highest and lowest value shown, the first and last time
    max_label: str
    min_label: str
    first_label: str
    last_label: str
    #: the text alternative, for screen readers
    title: str
    desc: str

    #: the plot area, for the template's axes and labels
    left, right, top, bottom = LEFT, RIGHT, TOP, BOTTOM
    #: the heights of the highest and the lowest value, where their labels go
    max_y, min_y = TOP + INSET, BOTTOM - INSET


def number(value: float) -> str:
    """A short label: 4 significant digits ("1.235e+20", "-3.5", "90")."""
    return f"{value:.4g}"


def when(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M UTC")


def time_labels(first: datetime, last: datetime) -> tuple[str, str]:
    """The axis's first and last time, short enough to sit side by side: the date once when both fall on the
    same day, the seconds when the span is under ten minutes."""
    clock = "%H:%M:%S" if (last - first).total_seconds() < 600 else "%H:%M"
    if first.date() == last.date():
        return first.strftime(f"%Y-%m-%d {clock}"), last.strftime(f"{clock} UTC")
    return first.strftime(f"%Y-%m-%d {clock}"), last.strftime(f"%Y-%m-%d {clock} UTC")


def parse_reading(text: object) -> float | None:
    """A number as change_data stored it ("95.10", "1e+20"), or None ("—", missing, not finite)."""
    if isinstance(text, bool):
        return None
    if isinstance(text, (int, float)):
        value = float(text)
    elif isinstance(text, str):
        try:
            value = float(text.replace(",", ""))
        except ValueError:
            return None
    else:
        return None
    return value if math.isfinite(value) else None


def readings_of(events: list[dict], current: object = None) -> list[Reading]:
    """The readings in `events` (oldest first; each with kind, at, data): a change's or fire's `after`; a
    baseline's value is the `before` of the reading after it (nothing changed between them without an event),
    or `current` (the monitor's stored value) when no change came since."""
    readings: list[Reading] = []
    baseline_at = None
    for event in events:
        data = event.get("data") or {}
        if event["kind"] == "baseline":
            baseline_at = event["at"]
            continue
        if event["kind"] not in READING_KINDS or (value := parse_reading(data.get("after"))) is None:
            continue
        if baseline_at is not None and not readings and (before := parse_reading(data.get("before"))) is not None:
            readings.append(Reading(baseline_at, before))
        readings.append(Reading(event["at"], value, event["kind"] == "fired"))
    if not readings and baseline_at is not None and (value := parse_reading(current)) is not None:
        readings.append(Reading(baseline_at, value))
    return readings


def build_chart(readings: list[Reading], now: datetime, threshold: float | None = None, op: str = "",
                until: datetime | None = None, what: str = "the value") -> Chart | None:
    """The chart of `readings` (oldest first), the value held to `until` (the last check; never past `now`), with
    the threshold line. None when there is nothing to draw."""
    readings = [r for r in readings if math.isfinite(r.value)]
    if not readings:
        return None
    end = min(max(until or readings[-1].at, readings[-1].at), max(now, readings[-1].at))
    lo, hi = _value_range([r.value for r in readings] + ([threshold] if threshold is not None else []))
    x_of, y_of = _time_scale(readings[0].at, end), _value_scale(lo, hi)
    points = tuple(Point(x_of(r.at), y_of(r.value), r.fired, f"{number(r.value)} at {when(r.at)}") for r in readings)
    line = _step_line(points, x_of(end))
    limit = threshold if threshold is not None and math.isfinite(threshold) else None
    label = f"{OP_NAMES.get(op, op)} {number(limit)}".strip() if limit is not None else ""
    return Chart(WIDTH, HEIGHT, line, points, y_of(limit) if limit is not None else None, label,
                 number(hi), number(lo), *time_labels(readings[0].at, end), f"Readings of {what}",
                 _describe(readings, end, label))


def _value_range(values: list[float]) -> tuple[float, float]:
    """The lowest and highest value shown: the values' own, a little apart when all are equal."""
    lo, hi = min(values), max(values)
    if lo == hi:
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    return max(lo, -sys.float_info.max), min(hi, sys.float_info.max)


def _value_scale(lo: float, hi: float):
    """value -> y: hi at the top of the plot, lo at the bottom (halves, so that huge ranges don't overflow)."""
    span = hi / 2 - lo / 2
    return lambda value: round(TOP + INSET + (hi / 2 - value / 2) / span * (BOTTOM - TOP - 2 * INSET), 2)


def _time_scale(first: datetime, last: datetime):
    """time -> x: the first reading at the left, the last check at the right; a single moment in the middle."""
    seconds = (last - first).total_seconds()
    if seconds <= 0:
        return lambda at: round((LEFT + RIGHT) / 2, 2)
    return lambda at: round(LEFT + (at - first).total_seconds() / seconds * (RIGHT - LEFT), 2)


def _step_line(points: tuple[Point, ...], end_x: float) -> str:
    """Each value held until the next reading, the last one until `end_x`."""
    coords = []
    for point, after in zip(points, points[1:] + (None,)):
        coords.append((point.x, point.y))
        coords.append((after.x if after else max(end_x, point.x), point.y))
    return " ".join(f"{x:g},{y:g}" for x, y in coords)


def _describe(readings: list[Reading], end: datetime, threshold_label: str) -> str:
    """The chart in one paragraph, for a screen reader."""
    values = [r.value for r in readings]
    fired = [r for r in readings if r.fired]
    text = (f"{len(readings)} reading{'' if len(readings) == 1 else 's'} from {when(readings[0].at)} to {when(end)}, "
            f"between {number(min(values))} and {number(max(values))}; the latest is {number(values[-1])}.")
    if threshold_label:
        text += f" It fires {threshold_label}."
    if fired:
        text += (f" It fired {len(fired)} time{'' if len(fired) == 1 else 's'}, the latest at {when(fired[-1].at)} "
                 f"at {number(fired[-1].value)}.")
    return text
