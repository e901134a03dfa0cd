"""engine/describe: every source type and every check type in words, as the owner's rows show them."""

from __future__ import annotations

import pytest

from engine.describe import approval_word, describe
from engine.spec import Limits, SourcePolicy, parse_create, spec_to_record

LIMITS = Limits(default_interval=900, min_interval=300)
POLICY = SourcePolicy(file_roots=("/srv/data",))


def stored(source: dict, check: dict | None = None, **arguments) -> tuple[dict, dict, int, str]:
    """source, check, interval and condition as a created monitor stores them."""
    raw = {"description": "d", "source": source, **({"check": check} if check is not None else {}), **arguments}
    spec, _ = parse_create(raw, LIMITS, POLICY)
    record = spec_to_record(spec)
    return record["source"], record["check"], spec.interval_seconds, spec.condition


def words(source: dict, check: dict | None = None, hits=None, approval=None, **arguments):
    source, check, interval, condition = stored(source, check, **arguments)
    return describe(source, check, interval, condition=condition, hits=hits, approval=approval)


# --- sources ----------------------------------------------------------------------------------------------------------

def test_describe_page_url_and_selector_polled_every_interval():
    d = words({"type": "page", "url": "https://shop.example.com/item", "selector": "#price"}, interval="15m")
    assert d.watches == "page https://shop.example.com/item (#price)"
    assert (d.check, d.cadence, d.polled, d.last_label) == ("any change", "every 15m", True, "last checked")
    assert words({"type": "page", "url": "https://a.example.com/"}).watches == "page https://a.example.com/"


def test_describe_json_url_with_value_path_in_check():
    d = words({"type": "json", "url": "https://ci.example.com/run.json"},
              {"type": "status", "value_path": "data.status", "values": ["success", "failure"]}, interval="2h")
    assert d.watches == "JSON https://ci.example.com/run.json"
    assert d.check == "data.status becomes success or failure"
    assert d.cadence == "every 2h"


def test_describe_feed_plain_and_json_list():
    assert words({"type": "feed", "url": "https://blog.example.com/rss"}).watches == "feed https://blog.example.com/rss"
    d = words({"type": "feed", "url": "https://api.example.com/releases", "items_path": "data.items",
               "key_path": "tag"}, {"type": "new_items"})
    assert d.watches == "feed https://api.example.com/releases (items at data.items, keyed by tag)"
    assert d.check == "new entries"


def test_describe_file_path():
    assert words({"type": "file", "path": "/srv/data/state.json"}).watches == "file /srv/data/state.json"


def test_describe_metric_name_labels_and_url():
    d = words({"type": "metric", "url": "https://api.example.com/metrics", "metric": "http_errors_total",
               "labels": {"job": "api", "code": "500"}}, {"type": "threshold", "op": "above", "value": 10})
    assert d.watches == 'metric http_errors_total{job="api", code="500"} at https://api.example.com/metrics'
    assert d.check == "the value above 10"
    assert words({"type": "metric", "url": "https://m.example.com/", "metric": "up"}).watches == \
        "metric up at https://m.example.com/"


def test_describe_command_polled_on_its_device():
    d = words({"type": "command", "device": "laptop", "command": "pytest -q", "cwd": "/home/me/app"},
              interval="10m")
    assert d.watches == "$ pytest -q on laptop in /home/me/app · polled"
    assert (d.cadence, d.polled, d.last_label) == ("every 10m", True, "last checked")


def test_describe_command_stream_is_an_event_source_on_each_line():
    d = words({"type": "command", "device": "ci-box", "command": "tail -f build.log", "mode": "stream"})
    assert d.watches == "$ tail -f build.log on ci-box · streamed"
    assert (d.check, d.cadence, d.polled, d.last_label) == ("every line", "on each line", False, "last event")
    assert words({"type": "command", "device": "b", "command": "tail -f x", "mode": "stream"},
                 {"type": "regex", "pattern": "ERROR"}).check == "lines matching /ERROR/"
    assert words({"type": "command", "device": "b", "command": "tail -f x", "mode": "stream"},
                 {"type": "cel", "expr": "line.contains('done')"}).check == "lines where line.contains('done')"


@pytest.mark.parametrize("scheme, shown", [("standard_webhooks", "standard_webhooks"), ("github", "github"),
                                           ("hmac_sha256", "hmac_sha256"), ("none", "unsigned")])
def test_describe_webhook_scheme_and_hits_on_delivery(scheme, shown):
    d = words({"type": "webhook", "signature": scheme}, hits=3)
    assert d.watches == f"trigger link ({shown}) · 3 of 1000 hits"
    assert (d.check, d.cadence, d.polled, d.last_label) == ("every delivery", "on delivery", False, "last event")


def test_describe_webhook_without_the_hit_count_says_the_limit():
    d = words({"type": "webhook", "signature": "github", "max_hits": 50})
    assert d.watches == "trigger link (github) · up to 50 hits"
    checked = words({"type": "webhook"}, {"type": "status", "value_path": "state", "values": ["done"]}, hits=0)
    assert checked.watches == "trigger link (unsigned) · 0 of 1000 hits"
    assert checked.check == "state becomes done"


def test_describe_approval_question_and_state_on_decision():
    d = words({"type": "approval", "question": "Ship v2?"}, approval="open")
    assert d.watches == "approval: Ship v2? · open"
    assert (d.check, d.cadence, d.polled, d.last_label) == ("the decision", "on decision", False, "last event")
    assert words({"type": "approval", "question": "Ship v2?"}).watches == "approval: Ship v2?"


def test_approval_word_names_the_decision():
    assert approval_word("open") == "open"
    assert approval_word("expired") == "expired"
    assert approval_word("ended") == "ended"
    assert approval_word("decided", "Approve") == "approved"
    assert approval_word("decided", "Reject") == "rejected"
    assert approval_word("decided", "Ship it") == "decided: Ship it"


def test_describe_time_fire_at_and_delay_at_its_time():
    d = words({"type": "time", "fire_at": "2026-12-01T17:00:00Z"})
    assert d.watches == "time: 2026-12-01 17:00:00 UTC"
    assert (d.check, d.cadence, d.polled, d.last_label) == ("fires once at its time", "at its time", False,
                                                            "last event")
    assert words({"type": "time", "delay": "30m"}).watches == "time: 30m after it was made"


def test_describe_document_item_on_write():
    d = words({"type": "document", "item_type": "transcription_jobs", "item_id": "job-7"},
              {"type": "cel", "expr": "has(doc.status) && doc.status == 'done'"})
    assert d.watches == "document transcription_jobs/job-7"
    assert d.check == "when has(doc.status) && doc.status == 'done'"
    assert (d.cadence, d.polled, d.last_label) == ("on write", False, "last event")


def test_describe_ingest_job_ending_on_write():
    d = words({"type": "ingest", "item_id": "upload-9"})
    assert d.watches == "ingest job upload-9"
    assert (d.check, d.cadence, d.polled) == ("the job ends (done or failed)", "on write", False)


def test_describe_tool_declared_and_on_a_connection():
    d = words({"type": "tool", "tool": "ticket_status", "arguments": {"id": "T-1", "verbose": True},
               "agent_id": "helpdesk"}, interval="30m")
    assert d.watches == 'tool ticket_status(id="T-1", verbose=true) of agent helpdesk'
    assert (d.cadence, d.polled) == ("every 30m", True)
    mcp = words({"type": "tool", "tool": "search_issues", "arguments": {"q": "bug"}, "connection": "github"})
    assert mcp.watches == 'tool search_issues(q="bug") on connection github'
    assert words({"type": "tool", "tool": "ping"}).watches == "tool ping()"


def test_describe_unknown_source_type_reads_its_type():
    assert describe({"type": "carrier_pigeon"}, {}, 900).watches == "carrier_pigeon"
    assert describe({}, {}, 900).watches == "unknown source"


# --- checks -----------------------------------------------------------------------------------------------------------

PAGE = {"type": "page", "url": "https://shop.example.com/item"}
JSON = {"type": "json", "url": "https://ci.example.com/run.json"}


def test_describe_check_change_is_the_default():
    assert words(PAGE).check == "any change"
    assert words(PAGE, {"type": "change"}).check == "any change"


def test_describe_check_threshold_with_and_without_value_path():
    assert words(PAGE, {"type": "threshold", "op": "below", "value": 90}).check == "the first number below 90"
    assert words(JSON, {"type": "threshold", "value_path": "data.price", "op": "<=", "value": 95.1}).check == \
        "data.price at or below 95.10"
    assert words(JSON, {"type": "threshold", "value_path": "n", "op": "!=", "value": 0}).check == "n not equal to 0"


def test_describe_check_status_values_of_any_scalar():
    assert words(JSON, {"type": "status", "value_path": "ok", "values": [True, 3, "up"]}).check == \
        "ok becomes true or 3 or up"


def test_describe_check_new_items_plain_and_at_a_path():
    assert words(JSON, {"type": "new_items"}).check == "new items"
    assert words(JSON, {"type": "new_items", "items_path": "data.items", "key_path": "sha"}).check == \
        "new items at data.items (keyed by sha)"


def test_describe_check_regex_match_and_no_match():
    assert words(PAGE, {"type": "regex", "pattern": "in stock"}).check == "text matches /in stock/"
    assert words(PAGE, {"type": "regex", "pattern": "sold out", "when": "no_match"}).check == \
        "text stops matching /sold out/"


def test_describe_check_cel_expression():
    assert words(JSON, {"type": "cel", "expr": "data.count > 3.0"}).check == "when data.count > 3.0"


def test_describe_check_every_call_by_source():
    assert words({"type": "webhook"}).check == "every delivery"
    assert words({"type": "webhook"}, {"type": "every_call"}).check == "every delivery"
    assert describe(PAGE, {"type": "every_call"}, 900).check == "every check"


def test_describe_trigger_link_says_after_how_many_wakes_it_ends():
    assert describe({"type": "webhook"}, {"type": "every_call"}, 0, max_wakes=1).check == \
        "every delivery · ends after 1 wake"
    assert describe({"type": "webhook"}, {"type": "every_call"}, 0, max_wakes=20).check == \
        "every delivery · ends after 20 wakes"
    assert describe(PAGE, {"type": "change"}, 900, max_wakes=3).check == "any change"


def test_describe_check_with_a_judge_condition():
    d = words(PAGE, condition="the price dropped below what it was")
    assert d.check == "any change, then judged: the price dropped below what it was"


def test_describe_reads_partial_and_empty_records():
    d = describe(None, None, 60)
    assert (d.watches, d.check, d.cadence, d.polled) == ("unknown source", "any change", "every 1m", True)
