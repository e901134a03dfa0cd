"""Expected deliveries (engine/expect.py): parsing and its refusals, the next deadline for every and cron (in the
link's zone, across DST changes), missed windows and their words; `now` passed in."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from engine.describe import describe, expecting
from engine.errors import SpecError
from engine.expect import (
    Expect, back_text, deadline, missed, missed_text, next_expected, parse_expect, shortest_gap,
)
from engine.spec import Limits, parse_create

PARIS = {"cron": "30 2 * * *", "grace": "30m", "tz": "Europe/Paris"}


def nightly() -> Expect:
    return parse_expect(PARIS)


def test_expect_parses_every_and_cron_with_their_defaults():
    assert parse_expect({"every": "24h"}) == Expect(every=86400, cron=None, grace=3600, tz="UTC")
    assert parse_expect({"every": "1m"}).grace == 60  # a tenth is under a minute: the least default, within it
    assert parse_expect({"every": "2h"}).grace == 720  # a tenth of the period
    assert nightly() == Expect(every=None, cron="30 2 * * *", grace=1800, tz="Europe/Paris")
    assert parse_expect({"cron": "*/5 * * * *"}).grace == 60
    assert parse_expect({"every": "1h", "grace": "0"}).grace == 0
    assert parse_expect({"every": "1h", "grace": 0}).grace == 0
    assert parse_expect({"cron": "@daily"}).cron == "@daily"


@pytest.mark.parametrize("raw, fix", [
    ("24h", "source.expect must be an object"),
    ({}, "exactly one of every and cron"),
    ({"every": "1h", "cron": "0 * * * *"}, "exactly one of every and cron"),
    ({"every": "1h", "window": "2h"}, "unknown field 'window'"),
    ({"every": "soon"}, "source.expect.every must be a duration of at least 1m"),
    ({"every": "30s"}, "source.expect.every must be a duration of at least 1m"),
    ({"cron": "61 * * * *"}, "5-field cron expression"),
    ({"cron": "0 0 * * * *"}, "5-field cron expression"),  # seconds field: not a 5-field schedule
    ({"cron": 5}, "5-field cron expression"),
    ({"cron": "0 0 30 2 *"}, "never comes round"),
    ({"every": "1h", "grace": "2h"}, "grace (2h) is longer than the time between two expected deliveries (1h)"),
    ({"cron": "*/5 * * * *", "grace": "6m"}, "grace (6m) is longer than the time between two expected deliveries (5m)"),
    ({"cron": "0 9,10 * * *", "grace": "2h"}, "(1h)"),  # the shortest gap of the schedule, not a day
    ({"every": "1h", "grace": "a while"}, "source.expect.grace must look like"),
    ({"every": "1h", "tz": "Mars/Olympus_Mons"}, "source.expect.tz 'Mars/Olympus_Mons' is not a known IANA time zone"),
    ({"every": "1h", "tz": ""}, "is not a known IANA time zone; give a name like 'Europe/Paris'"),
    ({"every": "1h", "tz": 2}, "is not a known IANA time zone"),
])
def test_expect_bad_input_is_one_sentence(raw, fix):
    with pytest.raises(SpecError) as refused:
        parse_expect(raw)
    assert fix in str(refused.value)
    assert str(refused.value).count(". ") == 0 or "e.g." in str(refused.value)  # one sentence


def test_expect_is_kept_as_given_in_the_webhook_source():
    given = {"cron": " 30 2 * * * ", "tz": "Europe/Paris"}
    spec, _ = parse_create({"description": "backup", "source": {"type": "webhook", "expect": given}}, Limits())
    assert spec.source.expect == given
    plain, _ = parse_create({"description": "deploy", "source": {"type": "webhook"}}, Limits())
    assert plain.source.expect is None


def test_expect_is_refused_through_monitor_create():
    with pytest.raises(SpecError, match="not a known IANA time zone"):
        parse_create({"description": "x", "source": {"type": "webhook", "expect": {"every": "1h", "tz": "Nowhere"}}},
                     Limits())


def test_every_deadline_is_the_last_arrival_plus_every_plus_grace():
    expect = parse_expect({"every": "6h", "grace": "15m"})
    last = datetime(2026, 5, 4, 10, 7, 30)
    assert next_expected(expect, last) == datetime(2026, 5, 4, 16, 7, 30)
    assert deadline(expect, last) == datetime(2026, 5, 4, 16, 22, 30)


def test_cron_deadline_is_the_next_time_in_the_links_zone_plus_grace():
    # 2026-06-10 is summer time in Paris (UTC+2): 02:30 there is 00:30 UTC
    assert next_expected(nightly(), datetime(2026, 6, 9, 23, 0)) == datetime(2026, 6, 10, 0, 30)
    assert deadline(nightly(), datetime(2026, 6, 9, 23, 0)) == datetime(2026, 6, 10, 1, 0)
    # in winter (UTC+1) the same 02:30 is 01:30 UTC
    assert next_expected(nightly(), datetime(2026, 12, 9, 23, 0)) == datetime(2026, 12, 10, 1, 30)


def test_cron_time_is_strictly_after_the_last_arrival():
    at_the_time = datetime(2026, 6, 10, 0, 30)  # a delivery exactly at 02:30 Paris covers that window
    assert next_expected(nightly(), at_the_time) == datetime(2026, 6, 11, 0, 30)
    just_before = datetime(2026, 6, 10, 0, 29)  # an early one still expects the 02:30 delivery
    assert next_expected(nightly(), just_before) == datetime(2026, 6, 10, 0, 30)


def test_cron_weekdays_skip_the_weekend():
    expect = parse_expect({"cron": "0 9 * * 1-5", "tz": "America/New_York"})
    friday_after = datetime(2026, 6, 12, 14, 0)  # Friday 10:00 in New York (UTC-4)
    assert next_expected(expect, friday_after) == datetime(2026, 6, 15, 13, 0)  # Monday 09:00 there


def test_cron_across_spring_forward_a_skipped_time_is_due_as_far_after_the_jump():
    # 2026-03-29 in Paris the clocks jump from 02:00 to 03:00: 02:30 does not exist that night
    before = datetime(2026, 3, 28, 3, 0)  # 04:00 on the 28th, Paris
    assert next_expected(nightly(), before) == datetime(2026, 3, 29, 1, 30)  # 03:30 CEST, 30 min after the jump
    after = datetime(2026, 3, 29, 1, 40)
    assert next_expected(nightly(), after) == datetime(2026, 3, 30, 0, 30)  # back to 02:30, now UTC+2


def test_cron_across_fall_back_a_repeated_time_counts_once():
    # 2026-10-25 in Paris the clocks go back from 03:00 to 02:00: 02:30 happens twice, at 00:30 and 01:30 UTC
    assert next_expected(nightly(), datetime(2026, 10, 24, 23, 0)) == datetime(2026, 10, 25, 0, 30)
    first_pass = datetime(2026, 10, 25, 0, 40)  # 02:40 CEST, after the first 02:30
    assert next_expected(nightly(), first_pass) == datetime(2026, 10, 26, 1, 30)  # not the second 02:30 that night
    second_pass = datetime(2026, 10, 25, 1, 10)  # 02:10 CET, in the repeated hour
    assert next_expected(nightly(), second_pass) == datetime(2026, 10, 26, 1, 30)


def test_cron_every_half_hour_through_fall_back_never_goes_back_in_time():
    expect = parse_expect({"cron": "*/30 * * * *", "tz": "Europe/Paris"})
    at, seen = datetime(2026, 10, 24, 23, 50), []
    for _ in range(8):
        at = next_expected(expect, at)
        seen.append(at)
    assert seen == sorted(set(seen)) and all(b - a >= timedelta(minutes=30) for a, b in zip(seen, seen[1:]))


def test_shortest_gap_reads_the_schedule():
    assert shortest_gap("30 2 * * *") == 86400
    assert shortest_gap("0 9 * * 1-5") == 86400
    assert shortest_gap("0 9,17 * * *") == 8 * 3600


def test_missed_window_and_the_next_one():
    expect = parse_expect({"every": "1h", "grace": "10m"})
    due = datetime(2026, 5, 4, 11, 10)  # expected 11:00
    miss = missed(expect, due, now=datetime(2026, 5, 4, 11, 10, 1))
    assert (miss.expected, miss.windows, miss.next_due) == (datetime(2026, 5, 4, 11, 0), 1,
                                                            datetime(2026, 5, 4, 12, 10))


def test_missed_windows_while_the_scheduler_was_down_are_counted_not_replayed():
    expect = parse_expect({"every": "1h", "grace": "10m"})
    miss = missed(expect, datetime(2026, 5, 4, 11, 10), now=datetime(2026, 5, 4, 14, 30))
    assert miss.expected == datetime(2026, 5, 4, 11, 0) and miss.windows == 4  # 11:00, 12:00, 13:00, 14:00
    assert miss.next_due == datetime(2026, 5, 4, 15, 10)  # still ahead


def test_missed_cron_window_moves_to_the_next_fire_time():
    due = datetime(2026, 6, 10, 1, 0)  # 02:30 Paris + 30m
    miss = missed(nightly(), due, now=due)
    assert miss.expected == datetime(2026, 6, 10, 0, 30) and miss.next_due == datetime(2026, 6, 11, 1, 0)


def test_missed_text_says_when_in_the_links_zone_and_the_terms():
    miss = missed(nightly(), datetime(2026, 6, 10, 1, 0), now=datetime(2026, 6, 10, 1, 0, 5))
    text = missed_text("the nightly backup", nightly(), miss, datetime(2026, 6, 10, 1, 0, 5), last=False)
    assert "'the nightly backup' had no delivery by 02:30 (Europe/Paris)" in text
    assert "expected every day at 02:30, grace 30m" in text and "next delivery will say it is back" in text
    last = missed_text("the nightly backup", nightly(), miss, datetime(2026, 6, 10, 1, 0, 5), last=True)
    assert "last wake; it has ended" in last


def test_back_text_says_when_it_came_and_what_it_missed():
    text = back_text("the nightly backup", nightly(), datetime(2026, 6, 12, 0, 47), datetime(2026, 6, 10, 0, 30), 2)
    assert "is back: a delivery arrived at 2026-06-12 02:47 (Europe/Paris) after missing 2 windows since " \
           "2026-06-10 02:30" in text


def test_monitor_page_words_for_the_next_expected_delivery():
    source = {"type": "webhook", "signature": "none", "max_hits": 1000, "expect": PARIS}
    now = datetime(2026, 6, 9, 20, 0)  # 22:00 the day before, in Paris
    words = expecting(source, datetime(2026, 6, 10, 1, 0), None, now)
    assert words.startswith("Next delivery expected by 2026-06-10 02:30 (Europe/Paris), grace 30m")
    same_day = expecting(source, datetime(2026, 6, 10, 1, 0), datetime(2026, 6, 9, 0, 30), datetime(2026, 6, 10, 0, 0))
    assert "expected by 02:30 (Europe/Paris)" in same_day and "missed since 2026-06-09 02:30" in same_day
    assert "not waiting now" in expecting(source, None, None, now)
    assert expecting({"type": "webhook"}, None, None, now) is None


def test_settings_row_names_the_expectation():
    source = {"type": "webhook", "signature": "none", "max_hits": 1000, "expect": PARIS}
    words = describe(source, {"type": "every_call"}, 900, hits=3)
    assert words.watches == ("trigger link (unsigned) · 3 of 1000 hits · expected every day at 02:30, grace 30m "
                             "(Europe/Paris)")
