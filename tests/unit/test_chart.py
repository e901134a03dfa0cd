"""engine/chart: a numeric monitor's readings as the geometry of a small SVG: scaled into the plot, held as a step
to the last check, the threshold's line, fires marked, and the words a screen reader gets."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from engine.chart import (
    BOTTOM, INSET, LEFT, RIGHT, TOP, Reading, build_chart, parse_reading, readings_of, time_labels,
)

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def line_coords(chart) -> list[tuple[float, float]]:
    return [tuple(map(float, pair.split(","))) for pair in chart.line.split()]


def test_build_chart_scales_the_highest_to_the_top_the_lowest_to_the_bottom_the_times_across():
    readings = [Reading(at(0), 95), Reading(at(30), 92), Reading(at(60), 88, fired=True)]
    chart = build_chart(readings, at(60), threshold=90, op="<")
    first, middle, last = chart.points
    assert (first.x, first.y) == (LEFT, TOP + INSET)
    assert (last.x, last.y) == (RIGHT, BOTTOM - INSET)
    assert middle.x == (LEFT + RIGHT) / 2 and TOP + INSET < middle.y < BOTTOM - INSET
    assert (chart.max_label, chart.min_label) == ("95", "88")
    assert (chart.first_label, chart.last_label) == ("2026-03-01 09:00", "10:00 UTC")


def test_build_chart_draws_the_threshold_between_the_values_it_lies_between():
    chart = build_chart([Reading(at(0), 100), Reading(at(10), 80)], at(10), threshold=90, op="<")
    assert chart.threshold_label == "below 90"
    assert chart.threshold_y == (TOP + BOTTOM) / 2


def test_build_chart_range_takes_in_a_threshold_beyond_every_reading():
    chart = build_chart([Reading(at(0), 10), Reading(at(10), 20)], at(10), threshold=1000, op=">=")
    assert chart.threshold_y == TOP + INSET and chart.max_label == "1000"
    assert chart.threshold_label == "at or above 1000"
    assert all(point.y > chart.threshold_y for point in chart.points)


def test_build_chart_holds_each_value_until_the_next_reading_and_the_last_until_the_last_check():
    chart = build_chart([Reading(at(0), 5), Reading(at(10), 7)], at(40), until=at(20))
    coords = line_coords(chart)
    assert coords[1][1] == coords[0][1] and coords[1][0] == coords[2][0], "a step: held, then the new value"
    assert coords[-1][0] == RIGHT and chart.last_label == "09:20 UTC"
    assert chart.points[1].x < RIGHT, "the last reading came before the last check"


def test_time_labels_name_the_date_once_a_day_and_the_seconds_of_a_short_span():
    assert time_labels(at(0), at(3)) == ("2026-03-01 09:00:00", "09:03:00 UTC")
    assert time_labels(at(0), at(24 * 60 + 5)) == ("2026-03-01 09:00", "2026-03-02 09:05 UTC")


def test_build_chart_never_draws_past_now():
    chart = build_chart([Reading(at(0), 5), Reading(at(10), 7)], now=at(10), until=at(99))
    assert chart.last_label == "09:10 UTC"


def test_build_chart_marks_the_points_where_it_fired():
    chart = build_chart([Reading(at(0), 95), Reading(at(5), 88, fired=True), Reading(at(9), 93)], at(9), 90, "<")
    assert [point.fired for point in chart.points] == [False, True, False]
    assert "It fired 1 time, the latest at 2026-03-01 09:05 UTC at 88." in chart.desc


def test_build_chart_without_readings_is_none():
    assert build_chart([], at(0), threshold=90, op="<") is None


def test_build_chart_single_reading_sits_in_the_middle_of_a_range_around_it():
    chart = build_chart([Reading(at(0), 42)], at(0))
    [point] = chart.points
    assert point.x == (LEFT + RIGHT) / 2 and point.y == (TOP + BOTTOM) / 2
    assert float(chart.min_label) < 42 < float(chart.max_label)
    assert chart.desc.startswith("1 reading from 2026-03-01 09:00 UTC")


def test_build_chart_all_zero_readings_still_have_a_range():
    chart = build_chart([Reading(at(0), 0), Reading(at(5), 0)], at(5))
    assert (chart.min_label, chart.max_label) == ("-1", "1")
    assert all(point.y == (TOP + BOTTOM) / 2 for point in chart.points)


def test_build_chart_huge_and_negative_values_stay_inside_the_plot():
    readings = [Reading(at(0), -1.7e308), Reading(at(5), 1.7e308), Reading(at(7), -3.5), Reading(at(8), float("inf"))]
    chart = build_chart(readings, at(8), threshold=-1e300, op="<")
    assert len(chart.points) == 3, "a reading that is not a finite number is left out"
    for x, y in line_coords(chart) + [(p.x, p.y) for p in chart.points]:
        assert LEFT <= x <= RIGHT and TOP <= y <= BOTTOM
    assert (chart.max_label, chart.min_label) == ("1.7e+308", "-1.7e+308")
    assert TOP < chart.threshold_y < BOTTOM


def test_build_chart_text_alternative_names_the_range_the_latest_and_the_threshold():
    chart = build_chart([Reading(at(0), 95.1), Reading(at(30), 91.3)], at(30), 90, "<", what="ACMEB below 90")
    assert chart.title == "Readings of ACMEB below 90"
    assert chart.desc == ("2 readings from 2026-03-01 09:00 UTC to 2026-03-01 09:30 UTC, between 91.3 and 95.1; "
                          "the latest is 91.3. It fires below 90.")


def test_parse_reading_takes_stored_numbers_and_refuses_the_rest():
    assert [parse_reading(text) for text in ("95.10", "1e+20", "-3", "1,234.5", 7)] == [95.1, 1e20, -3, 1234.5, 7]
    assert [parse_reading(text) for text in ("—", None, "inf", "nan", True, "")] == [None] * 6


def test_readings_of_takes_each_change_after_and_the_baseline_from_the_first_change_before():
    events = [{"kind": "baseline", "at": at(0), "data": {"reason": "The first check: currently 95.10."}},
              {"kind": "error", "at": at(3), "data": {"reason": "timed out"}},
              {"kind": "changed", "at": at(5), "data": {"before": "95.10", "after": "91.30"}},
              {"kind": "fired", "at": at(9), "data": {"before": "91.30", "after": "88.20"}}]
    assert readings_of(events, current=88.2) == [Reading(at(0), 95.1), Reading(at(5), 91.3),
                                                 Reading(at(9), 88.2, fired=True)]


def test_readings_of_a_baseline_alone_reads_the_monitors_stored_value():
    events = [{"kind": "baseline", "at": at(0), "data": {}}]
    assert readings_of(events, current=95.1) == [Reading(at(0), 95.1)]
    assert readings_of(events, current=None) == []
