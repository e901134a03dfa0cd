"""Shared fetches through the real scheduler claim and check actor (engine/shared_fetch.py): monitors whose request
is the same url read one GET per interval window, each still checking its own part and recording its own check.
The page server counts the GETs. Tests reach 127.0.0.1 with FETCH_ALLOW_LOOPBACK on, where every url is kept per
account (any host may be this machine), so a private url's body never reaches another account."""

from __future__ import annotations

from datetime import datetime, timedelta

from models import utcnow
from models.claims import claim_due
from models.tables import Monitor
from tasks.scheduler import tick
from tests.integration.helpers import db, monitor_row, wakes
from tests.integration.test_check_actor import make_monitor, quote, runs
from tests.integration.test_tool_sources import api, order_tool, registered, watched  # noqa: F401 (api: a fixture)

TWO_PARTS = "<html><body><p id='a'>Price: ${a}</p><p id='b'>Price: ${b}</p></body></html>"
INTERVAL = 300  # make_monitor's "5m"


def monitors_on(client, token: str, url: str, count: int, **arguments) -> list[str]:
    return [make_monitor(client, token, url, **arguments) for _ in range(count)]


def gets(pages, path: str) -> int:
    return pages.hits.get(path, 0)


def window_start(ahead: int = 20) -> datetime:
    """The start of an interval window `ahead` windows from now (on the tables' naive UTC clock)."""
    epoch = datetime(1970, 1, 1)
    return epoch + timedelta(seconds=((utcnow() - epoch).total_seconds() // INTERVAL + ahead) * INTERVAL)


def tick_at(when: datetime, drain) -> int:
    with db():
        claimed = tick(when, 500)
    drain()
    return claimed


def due_at(monitor_id: str, when: datetime) -> None:
    with db():
        Monitor.update(next_check_at=when).where(Monitor.id == monitor_id).execute()


def test_twenty_monitors_of_two_accounts_on_one_url_make_one_get_per_account_per_window(
        client, owner, stranger, pages, run_due_checks):
    url = pages.set("/shared", quote("95.10"))
    ids = monitors_on(client, owner[1], url, 10) + monitors_on(client, stranger[1], url, 10)
    created = gets(pages, "/shared")  # each create reads the page itself, for its baseline
    assert created == 20
    for window in (1, 2):
        assert run_due_checks() == 20
        assert gets(pages, "/shared") == created + 2 * window, "one GET per account per window"
    for monitor_id in ids:
        row = monitor_row(monitor_id)
        assert (row.check_count, row.last_error, row.failure_count) == (3, "", 0)
        assert runs(monitor_id) == 0 and wakes(monitor_id) == []


def test_different_selectors_on_one_url_share_the_fetch_and_each_fires_on_its_own_part(
        client, owner, pages, run_due_checks):
    url = pages.set("/two", TWO_PARTS.replace("{a}", "95.10").replace("{b}", "96.00"))
    first = make_monitor(client, owner[1], url, source={"type": "page", "url": url, "selector": "#a"}, max_wakes=3)
    second = make_monitor(client, owner[1], url, source={"type": "page", "url": url, "selector": "#b"}, max_wakes=3)
    before = gets(pages, "/two")
    pages.set("/two", TWO_PARTS.replace("{a}", "80.00").replace("{b}", "96.00"))
    assert run_due_checks() == 2
    assert gets(pages, "/two") == before + 1
    [wake] = wakes(first)
    assert "80 is below 90 (was 95.10)" in wake.content
    assert wakes(second) == [] and runs(second) == 0, "#b did not change: quiet"
    pages.set("/two", TWO_PARTS.replace("{a}", "80.00").replace("{b}", "70.00"))
    run_due_checks()
    assert gets(pages, "/two") == before + 2
    [wake] = wakes(second)
    assert len(wakes(first)) == 1 and "70 is below 90 (was 96)" in wake.content


def test_an_error_is_shared_by_every_monitor_of_the_url(client, owner, pages, run_due_checks):
    url = pages.set("/down", quote("95.10"))
    ids = monitors_on(client, owner[1], url, 5)
    before = gets(pages, "/down")
    pages.set("/down", "busy", status=503)
    assert run_due_checks() == 5
    assert gets(pages, "/down") == before + 1
    for monitor_id in ids:
        row = monitor_row(monitor_id)
        assert "503 Service Unavailable" in row.last_error and row.unreachable_since is not None
        assert row.status == "active" and wakes(monitor_id) == []


def test_monitors_due_at_different_seconds_of_one_window_share_its_first_fetch(client, owner, pages, drain):
    url = pages.set("/later", quote("95.10"))
    early, late = monitors_on(client, owner[1], url, 2)
    start, before = window_start(), gets(pages, "/later")
    due_at(early, start + timedelta(seconds=9))
    due_at(late, start + timedelta(seconds=49))
    assert tick_at(start + timedelta(seconds=10), drain) == 1
    assert tick_at(start + timedelta(seconds=50), drain) == 1
    assert gets(pages, "/later") == before + 1, "the second claim of the window read the first one's fetch"
    assert monitor_row(late).check_count == 2 and monitor_row(late).last_error == ""
    assert tick_at(start + timedelta(seconds=2 * INTERVAL + 10), drain) == 2
    assert gets(pages, "/later") == before + 2, "a new window: one new GET"


def test_a_304_is_shared_only_with_monitors_holding_the_same_validators(client, owner, pages, run_due_checks):
    pages.validate("/etag", etag='"v1"')
    url = pages.set("/etag", quote("95.10"))
    ids = monitors_on(client, owner[1], url, 3)
    before = gets(pages, "/etag")
    run_due_checks()
    assert gets(pages, "/etag") == before + 1
    assert pages.headers_of("/etag")[-1].get("if-none-match") == '"v1"'
    odd = ids[0]
    with db():
        Monitor.update(etag='"v0"').where(Monitor.id == odd).execute()
    run_due_checks()
    asked = [headers.get("if-none-match") for headers in pages.headers_of("/etag")[before + 1:]]
    assert '"v0"' in asked, "the monitor with other validators was not given the others' 304: it asked with its own"
    assert len(asked) <= 2
    assert monitor_row(odd).etag == '"v0"', "same bytes: its validators are kept until the bytes change"
    for monitor_id in ids:
        assert runs(monitor_id) == 0 and wakes(monitor_id) == [] and monitor_row(monitor_id).last_error == ""


def test_tool_watches_with_a_credential_never_share_their_requests(client, owner, api, run_due_checks):  # noqa: F811
    api.orders["A-1"] = {"status": "in transit"}
    registered(client, owner[1], order_tool(api.base))
    watched(client, owner[1], conversation="conv-1")
    watched(client, owner[1], conversation="conv-2")
    assert run_due_checks(1) == 2
    assert len(api.credentials) == 2, "each watch sent its own request with the credential"


def test_monitors_of_one_url_are_claimed_next_to_each_other(client, owner, pages):
    x, y = pages.set("/x", quote("95.10")), pages.set("/y", quote("95.10"))
    ids = [make_monitor(client, owner[1], url) for url in (x, y, x, y, x)]
    with db():
        claimed = [monitor_id for monitor_id, _ in claim_due(utcnow() + timedelta(hours=1), 500)]
    urls = [monitor_row(monitor_id).source["url"] for monitor_id in claimed]
    assert sorted(claimed) == sorted(ids) and urls == sorted(urls)


def test_a_tick_limit_does_not_split_the_monitors_of_a_url_due_together(client, owner, pages):
    x, y = pages.set("/x", quote("95.10")), pages.set("/y", quote("95.10"))
    ids = [make_monitor(client, owner[1], url) for url in (x, y, x, y, x, y)]
    due = utcnow() + timedelta(hours=1)
    with db():
        Monitor.update(next_check_at=due - timedelta(seconds=1)).where(Monitor.id.in_(ids)).execute()
        first = claim_due(due, 3)
        second = claim_due(due, 3)
    urls = [{monitor_row(monitor_id).source["url"] for monitor_id, _ in claimed} for claimed in (first, second)]
    assert sorted(urls, key=sorted) == [{x}, {y}], "each tick took one url's three monitors: one fetch each"


def test_sharing_turned_off_fetches_for_every_monitor(client, owner, pages, run_due_checks, reconfigure):
    reconfigure(FETCH_SHARED_CACHE_BYTES=0)
    url = pages.set("/alone", quote("95.10"))
    monitors_on(client, owner[1], url, 3)
    before = gets(pages, "/alone")
    run_due_checks()
    assert gets(pages, "/alone") == before + 3


def test_identical_monitors_of_one_url_run_the_pipeline_once_a_batch_and_each_records_its_check(
        client, owner, pages, run_due_checks, monkeypatch):
    import tasks.checks as checks

    url = pages.set("/same", quote("95.10"))
    ids = monitors_on(client, owner[1], url, 6)
    run_due_checks()  # their first claims: from here on they are claimed together, after the same previous claim
    with db():
        Monitor.update(last_error="HTTP 503", failure_count=1).where(Monitor.id == ids[-1]).execute()
    ran = []
    real = checks.run_check
    monkeypatch.setattr(checks, "run_check", lambda *args, **kwargs: ran.append(1) or real(*args, **kwargs))
    before = gets(pages, "/same")
    assert run_due_checks() == 6
    assert len(ran) == 1, "the other five had the same inputs as the first, so its quiet outcome"
    assert gets(pages, "/same") == before + 1
    for monitor_id in ids:
        row = monitor_row(monitor_id)
        assert (row.check_count, row.last_error, row.failure_count) == (3, "", 0), "each recorded its own check"
        assert runs(monitor_id) == 0 and wakes(monitor_id) == []
    pages.set("/same", quote("80"))
    run_due_checks()
    assert len(ran) == 1 + 6, "a fire is no quiet outcome: each monitor runs its own, and wakes its own"
    for monitor_id in ids:
        [wake] = wakes(monitor_id)
        assert "80 is below 90 (was 95.10)" in wake.content


def test_a_count_under_way_is_not_given_an_identical_neighbours_quiet_outcome(client, owner, pages, run_due_checks):
    check = {"type": "threshold", "op": "<", "value": 90, "for": 3}
    url = pages.set("/count", quote("95.10"))
    counting = make_monitor(client, owner[1], url, check=check, max_wakes=3)
    pages.set("/count", quote("89.50"))
    run_due_checks()  # holding 1 of 3
    settled = make_monitor(client, owner[1], url, check=check, max_wakes=3)  # held at its baseline: not counting
    run_due_checks()  # holding 2 of 3; both claimed together from here on
    assert wakes(counting) == [] and wakes(settled) == []
    start = run_due_checks.now()
    with db():  # the quiet one first in the batch, so a wrongly shared outcome would reach the counting one
        Monitor.update(next_check_at=start).where(Monitor.id == settled).execute()
        Monitor.update(next_check_at=start + timedelta(seconds=1)).where(Monitor.id == counting).execute()
    assert run_due_checks() == 2
    [wake] = wakes(counting)
    assert "89.50 is below 90, held for 3 checks (since " in wake.content
    assert wakes(settled) == []


def test_a_quiet_outcome_serves_the_checks_of_its_window_whichever_was_claimed_first(
        client, owner, pages, drain, monkeypatch):
    """An answer may serve a check only when it was fetched after that check's previous claim (read_after), so the
    batch runs the monitor with the latest previous claim first (latest_first): its outcome then serves the rest,
    in whatever order the scheduler claimed them."""
    import tasks.checks as checks

    url = pages.set("/ticks", quote("95.10"))
    a, b, c, d = monitors_on(client, owner[1], url, 4)
    ran = []
    real = checks.run_check
    monkeypatch.setattr(checks, "run_check", lambda *args, **kwargs: ran.append(1) or real(*args, **kwargs))

    def split_then_together(window: datetime, first: list[str], then: list[str]) -> int:
        """Claim a, b and c, d in two ticks of one window, then all four in one tick of the next, `first` first
        in its claim; how many of those four ran the pipeline."""
        for ids, second in (([a, b], 9), ([c, d], 49)):
            for monitor_id in ids:
                due_at(monitor_id, window + timedelta(seconds=second))
        for second in (9, 49):
            assert tick_at(window + timedelta(seconds=second + 1), drain) == 2
        later = window + timedelta(seconds=INTERVAL)
        for order, monitor_id in enumerate(first + then):
            due_at(monitor_id, later + timedelta(seconds=5 + order))
        before, gets_before = len(ran), gets(pages, "/ticks")
        assert tick_at(later + timedelta(seconds=10), drain) == 4
        assert gets(pages, "/ticks") == gets_before + 1
        return len(ran) - before

    start = window_start()
    assert split_then_together(start, [c, d], [a, b]) == 1
    assert split_then_together(start + timedelta(seconds=4 * INTERVAL), [a, b], [c, d]) == 1
    for monitor_id in (a, b, c, d):
        row = monitor_row(monitor_id)
        assert row.check_count == 5 and row.last_error == "" and wakes(monitor_id) == []
