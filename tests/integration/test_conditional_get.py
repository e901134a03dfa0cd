"""Conditional GET through the real scheduler claim and check actor: a source that sends ETag or Last-Modified is
asked with If-None-Match / If-Modified-Since, and its 304 is a quiet check that writes nothing but the claim."""

from __future__ import annotations

from tests.integration.helpers import monitor_row, wakes
from tests.integration.test_check_actor import make_monitor, quote, runs

#: the monitors columns the scheduler's claim writes; a 304 must leave every other one as it was
CLAIM_COLUMNS = {"claim_seq", "check_count", "prev_checked_at", "last_checked_at", "next_check_at"}
LAST_MODIFIED = "Wed, 21 Oct 2015 07:28:00 GMT"


def row_beyond_claim(monitor_id: str) -> dict:
    return {name: value for name, value in monitor_row(monitor_id).__data__.items() if name not in CLAIM_COLUMNS}


def conditional(headers: dict) -> dict:
    return {name: value for name, value in headers.items() if name in ("if-none-match", "if-modified-since")}


def test_page_with_an_etag_is_asked_with_it_and_its_304_writes_only_the_claim(client, owner, pages, run_due_checks):
    pages.validate("/e", etag='"v1"')
    monitor_id = make_monitor(client, owner[1], pages.set("/e", quote("95.10")))
    assert monitor_row(monitor_id).etag == '"v1"'  # kept from the baseline read at create
    before, claimed = row_beyond_claim(monitor_id), monitor_row(monitor_id)
    for _ in range(2):
        assert run_due_checks() == 1
    assert [conditional(h) for h in pages.headers_of("/e")] == [{}, {"if-none-match": '"v1"'},
                                                                {"if-none-match": '"v1"'}]
    assert row_beyond_claim(monitor_id) == before  # no raw_hash, validators, updated_at or error written
    after = monitor_row(monitor_id)
    assert (after.claim_seq, after.check_count) == (claimed.claim_seq + 2, claimed.check_count + 2)
    assert runs(monitor_id) == 0 and wakes(monitor_id) == []


def test_changed_page_with_a_new_etag_is_checked_and_its_etag_stored(client, owner, pages, run_due_checks):
    pages.validate("/e", etag='"v1"')
    monitor_id = make_monitor(client, owner[1], pages.set("/e", quote("95.10")), max_wakes=3)
    pages.set("/e", quote("89.50"))
    pages.validate("/e", etag='"v2"')
    run_due_checks()
    [wake] = wakes(monitor_id)
    assert "89.50 is below 90 (was 95.10)" in wake.content
    row = monitor_row(monitor_id)
    assert row.etag == '"v2"' and row.last_modified == ""
    assert run_due_checks() == 1
    assert conditional(pages.headers_of("/e")[-1]) == {"if-none-match": '"v2"'}
    assert len(wakes(monitor_id)) == 1 and monitor_row(monitor_id).raw_hash == row.raw_hash


def test_last_modified_is_asked_with_if_modified_since_and_its_304_is_quiet(client, owner, pages, run_due_checks):
    pages.validate("/m", last_modified=LAST_MODIFIED)
    monitor_id = make_monitor(client, owner[1], pages.set("/m", quote("95.10")))
    before = row_beyond_claim(monitor_id)
    assert before["last_modified"] == LAST_MODIFIED and before["etag"] == ""
    run_due_checks()
    assert conditional(pages.headers_of("/m")[-1]) == {"if-modified-since": LAST_MODIFIED}
    assert row_beyond_claim(monitor_id) == before and runs(monitor_id) == 0
    newer = "Thu, 22 Oct 2015 07:28:00 GMT"
    pages.set("/m", quote("80.00"))
    pages.validate("/m", last_modified=newer)
    run_due_checks()
    assert len(wakes(monitor_id)) == 1 and monitor_row(monitor_id).last_modified == newer


def test_server_without_validators_gets_no_conditional_headers(client, owner, pages, run_due_checks):
    monitor_id = make_monitor(client, owner[1], pages.set("/plain", quote("95.10")))
    run_due_checks()
    run_due_checks()
    assert [conditional(h) for h in pages.headers_of("/plain")] == [{}, {}, {}]
    row = monitor_row(monitor_id)
    assert (row.etag, row.last_modified, row.check_count, row.last_error) == ("", "", 3, "")


def test_304_to_a_request_that_sent_no_validators_is_an_error(client, owner, pages, run_due_checks):
    monitor_id = make_monitor(client, owner[1], pages.set("/odd", quote("95.10")))
    pages.set("/odd", b"", status=304)
    run_due_checks()
    row = monitor_row(monitor_id)
    assert "304 Not Modified" in row.last_error and row.failure_count == 1
    assert wakes(monitor_id) == []


def test_validators_learnt_on_a_quiet_check_then_used(client, owner, pages, run_due_checks):
    """A monitor from before its server sent validators learns them on its first quiet check (in the one UPDATE a
    quiet check that changes something makes), and its next check is a 304."""
    monitor_id = make_monitor(client, owner[1], pages.set("/late", quote("95.10")))
    pages.validate("/late", etag='W/"late"')
    run_due_checks()
    assert monitor_row(monitor_id).etag == 'W/"late"'
    before = row_beyond_claim(monitor_id)
    run_due_checks()
    assert conditional(pages.headers_of("/late")[-1]) == {"if-none-match": 'W/"late"'}
    assert row_beyond_claim(monitor_id) == before and runs(monitor_id) == 0


def test_same_bytes_under_a_new_etag_write_nothing(client, owner, pages, run_due_checks):
    """A server that makes up a new ETag for unchanged bytes answers 200 each time; that check stays quiet and
    writes nothing beyond the claim (the stored ETag is kept until the bytes change)."""
    pages.validate("/spin", etag='"1"')
    monitor_id = make_monitor(client, owner[1], pages.set("/spin", quote("95.10")))
    before = row_beyond_claim(monitor_id)
    for number in (2, 3):
        pages.validate("/spin", etag=f'"{number}"')
        run_due_checks()
    assert row_beyond_claim(monitor_id) == before and runs(monitor_id) == 0


def test_validators_follow_a_redirect_on_the_origin_only(client, owner, pages, run_due_checks):
    pages.validate("/final", etag='"f"')
    pages.set("/final", quote("95.10"))
    same = make_monitor(client, owner[1], pages.redirect("/same", pages.url("/final")))
    assert monitor_row(same).etag == '"f"'
    run_due_checks()
    assert conditional(pages.headers_of("/same")[-1]) == {"if-none-match": '"f"'}
    assert conditional(pages.headers_of("/final")[-1]) == {"if-none-match": '"f"'}
    assert runs(same) == 0 and monitor_row(same).last_error == ""
    other_origin = pages.url("/final").replace("127.0.0.1", "localhost")
    away = make_monitor(client, owner[1], pages.redirect("/away", other_origin))
    assert monitor_row(away).etag == ""  # the other site's validators are not sent to this one next time
    run_due_checks()
    assert conditional(pages.headers_of("/away")[-1]) == {}


def test_json_source_is_asked_with_its_etag(client, owner, pages, run_due_checks):
    pages.validate("/j", etag='"j1"')
    url = pages.set_json("/j", '{"value": 95}')
    monitor_id = make_monitor(client, owner[1], url, source={"type": "json", "url": url},
                              check={"type": "threshold", "op": "<", "value": 90, "value_path": "value"})
    before = row_beyond_claim(monitor_id)
    run_due_checks()
    assert conditional(pages.headers_of("/j")[-1]) == {"if-none-match": '"j1"'}
    assert row_beyond_claim(monitor_id) == before and runs(monitor_id) == 0
