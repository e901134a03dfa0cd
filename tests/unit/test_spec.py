import re

import pytest

from engine.checks import CheckSpec
from engine.spec import (UNREACHABLE_CHANNELS, Limits, SourceSpec, SpecError, channel_refusal, check_from_record,
                         parse_create, source_from_record, spec_to_record)

LIMITS = Limits(default_interval=900, min_interval=300, default_ttl=7 * 86400, max_ttl=30 * 86400, max_wakes=20)
PAGE = {"type": "page", "url": "https://shop.example.com/item"}
JSON = {"type": "json", "url": "https://ci.example.com/run.json"}


def args(**overrides):
    base = {"description": "ACME price drops below 90", "source": dict(PAGE)}
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not ...}


def refused(arguments) -> str:
    with pytest.raises(SpecError) as info:
        parse_create(arguments, LIMITS)
    message = str(info.value)
    assert message.strip()
    return message


# --- valid specs ------------------------------------------------------------------------------------------------------

def test_parse_create_valid_page_spec():
    spec, notes = parse_create(args(
        source={"type": "page", "url": " https://shop.example.com/item ", "selector": "#price"},
        check={"type": "threshold", "op": "below", "value": 90},
        on_match="  Tell the user.  ", interval="15m", expires_in="2d", max_wakes=3,
    ), LIMITS)
    assert notes == []
    assert spec.description == "ACME price drops below 90"
    assert spec.source == SourceSpec(type="page", url="https://shop.example.com/item", selector="#price")
    assert spec.check == CheckSpec(type="threshold", op="<", value=90.0, value_path=None)
    assert spec.on_match == "Tell the user."
    assert spec.interval_seconds == 900
    assert spec.ttl_seconds == 2 * 86400
    assert spec.max_wakes == 3


def test_parse_create_valid_json_spec():
    spec, notes = parse_create(args(
        source=dict(JSON),
        check={"type": "threshold", "value_path": "data.jobs[0].remaining", "op": "==", "value": "0"},
        interval=3600, expires_in=86400,
    ), LIMITS)
    assert notes == []
    assert spec.source == SourceSpec(type="json", url="https://ci.example.com/run.json", selector=None)
    assert spec.check == CheckSpec(type="threshold", op="==", value=0.0, value_path="data.jobs[0].remaining")
    assert spec.interval_seconds == 3600
    assert spec.ttl_seconds == 86400


def test_parse_create_defaults():
    spec, notes = parse_create(args(), LIMITS)
    assert notes == []
    assert spec.interval_seconds == 900
    assert spec.ttl_seconds == 7 * 86400
    assert spec.max_wakes == 1
    assert spec.check == CheckSpec(type="change")
    assert spec.on_match == ""
    assert spec.source.selector is None


def test_parse_create_explicit_change_check():
    spec, _ = parse_create(args(check={"type": "change"}), LIMITS)
    assert spec.check.type == "change"


def test_parse_create_numeric_value_strings_with_commas():
    spec, _ = parse_create(args(check={"type": "threshold", "op": ">", "value": "1,234.5"}), LIMITS)
    assert spec.check.value == 1234.5


def test_parse_create_interval_below_minimum_is_raised_with_a_note():
    spec, notes = parse_create(args(interval="1m"), LIMITS)
    assert spec.interval_seconds == 300
    assert len(notes) == 1
    assert "minimum" in notes[0] and "5m" in notes[0] and "1m" in notes[0]


def test_parse_create_interval_at_minimum_has_no_note():
    spec, notes = parse_create(args(interval="5m"), LIMITS)
    assert spec.interval_seconds == 300 and notes == []


def test_parse_create_expires_in_above_maximum_is_capped_with_a_note():
    spec, notes = parse_create(args(expires_in="90d"), LIMITS)
    assert spec.ttl_seconds == 30 * 86400
    assert len(notes) == 1
    assert "maximum" in notes[0] and "30d" in notes[0] and "90d" in notes[0]


def test_parse_create_max_wakes_above_limit_is_capped_with_a_note():
    spec, notes = parse_create(args(max_wakes=50), LIMITS)
    assert spec.max_wakes == 20
    assert len(notes) == 1
    assert "max_wakes" in notes[0] and "50" in notes[0] and "20" in notes[0]


def test_parse_create_collects_every_note():
    _, notes = parse_create(args(interval=60, expires_in="90d", max_wakes=50), LIMITS)
    assert len(notes) == 3


def test_spec_records_round_trip():
    spec, _ = parse_create(args(source=dict(JSON), check={"type": "threshold", "op": "<", "value": 9,
                                                          "value_path": "a.b"}), LIMITS)
    record = spec_to_record(spec)
    assert source_from_record(record["source"]) == spec.source
    assert check_from_record(record["check"]) == spec.check


# --- refusals ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("description", [..., None, "", "   ", 5])
def test_parse_create_refuses_missing_description(description):
    assert "description" in refused(args(description=description))


def test_parse_create_refuses_overlong_description():
    assert "description" in refused(args(description="x" * 501))


@pytest.mark.parametrize("source", [..., None, "https://example.com", ["page"]])
def test_parse_create_refuses_missing_source(source):
    assert "source" in refused(args(source=source))


@pytest.mark.parametrize("url", [..., None, "", "   ", 5])
def test_parse_create_refuses_missing_url(url):
    source = {"type": "page"} if url is ... else {"type": "page", "url": url}
    assert "source.url" in refused(args(source=source))


@pytest.mark.parametrize("url", ["ftp://x", "file:///etc/passwd", "javascript:alert(1)", "example.com/page",
                                 "http://user:pw@example.com/"])
def test_parse_create_refuses_unwatchable_urls(url):
    assert "source.url" in refused(args(source={"type": "page", "url": url}))


@pytest.mark.parametrize("kind", [None, "html", "rss", "PAGE", 1])
def test_parse_create_refuses_unknown_source_type(kind):
    assert "source.type" in refused(args(source={"type": kind, "url": "https://example.com"}))


def test_parse_create_refuses_unknown_source_field():
    assert "'headers'" in refused(args(source=dict(PAGE, headers={"x": "y"})))


@pytest.mark.parametrize("kind", ["diff", "jq", "", None])
def test_parse_create_refuses_unknown_check_type(kind):
    assert "check.type" in refused(args(check={"type": kind}))


def test_parse_create_refuses_a_check_that_is_not_an_object():
    assert "check" in refused(args(check="change"))


@pytest.mark.parametrize("op", ["approximately", None, "", 5])
def test_parse_create_refuses_bad_op(op):
    message = refused(args(check={"type": "threshold", "op": op, "value": 90}))
    assert "check.op" in message


@pytest.mark.parametrize("value", ["ninety", None, True, "nan", "inf", float("nan"), [90], ""])
def test_parse_create_refuses_non_number_value(value):
    assert "check.value" in refused(args(check={"type": "threshold", "op": "<", "value": value}))


def test_parse_create_refuses_missing_value():
    assert "check.value" in refused(args(check={"type": "threshold", "op": "<"}))


@pytest.mark.parametrize("interval", ["soon", "", "-5", "0", 0, -60, True, "every day"])
def test_parse_create_refuses_unparseable_interval(interval):
    assert "interval" in refused(args(interval=interval))


@pytest.mark.parametrize("expires_in", ["soon", "", "never", 0, False, "1 year"])
def test_parse_create_refuses_unparseable_expires_in(expires_in):
    assert "expires_in" in refused(args(expires_in=expires_in))


@pytest.mark.parametrize("max_wakes", [0, -1, "3", 1.5, True, 3.0])
def test_parse_create_refuses_bad_max_wakes(max_wakes):
    assert "max_wakes" in refused(args(max_wakes=max_wakes))


@pytest.mark.parametrize("name", ["url", "when", "descripton"])
def test_parse_create_refuses_unknown_argument(name):
    assert f"'{name}'" in refused(args(**{name: "x"}))


def test_parse_create_refuses_arguments_that_are_not_an_object():
    assert "description" in refused(["description"])


def test_parse_create_refuses_selector_on_json_source():
    assert "source.selector" in refused(args(source=dict(JSON, selector="#price")))


@pytest.mark.parametrize("selector", ["p[[[", "", "   ", 5, "div >", ":nope"])
def test_parse_create_refuses_invalid_css_selector(selector):
    assert "source.selector" in refused(args(source=dict(PAGE, selector=selector)))


def test_parse_create_refuses_value_path_on_page_source():
    message = refused(args(check={"type": "threshold", "op": "<", "value": 9, "value_path": "price"}))
    assert "check.value_path" in message


@pytest.mark.parametrize("path", ["a..b", "[x]", ""])
def test_parse_create_refuses_malformed_value_path(path):
    message = refused(args(source=dict(JSON), check={"type": "threshold", "op": "<", "value": 9, "value_path": path}))
    assert "check.value_path" in message


def test_parse_create_refuses_overlong_on_match():
    assert "on_match" in refused(args(on_match="x" * 2001))


# --- channels ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("channel", ["v1_api", "api_key", "widget", "shared_link", "workflow", "scheduled",
                                     "continuation"])
def test_channel_refusal_explains_channels_a_wake_cannot_reach(channel):
    sentence = channel_refusal(channel)
    assert sentence is not None
    assert sentence.startswith("Monitors can't be created in ") and sentence.endswith(".")
    assert UNREACHABLE_CHANNELS[channel] in sentence


def test_channel_refusal_allows_chat():
    assert channel_refusal("chat") is None


def test_parse_create_caps_an_interval_longer_than_a_monitor_may_live():
    spec, notes = parse_create({"description": "d", "source": {"type": "page", "url": "https://example.com/"},
                                "interval": "99999999999d"}, LIMITS)
    assert spec.interval_seconds == LIMITS.max_ttl and "lowered" in " ".join(notes)


@pytest.mark.parametrize("check, fix", [
    ({"op": "below", "value": 90}, "check.type"),
    ({"type": "threshold", "op": "<", "value": 1, "valeu_path": "a"}, "unknown field 'valeu_path'"),
    ({"type": "change", "op": "<"}, "unknown field 'op'"),
])
def test_parse_check_refuses_missing_type_and_unknown_fields(check, fix):
    with pytest.raises(SpecError, match=re.escape(fix)):
        parse_create({"description": "d", "source": {"type": "page", "url": "https://example.com/"},
                      "check": check}, LIMITS)


def test_on_match_of_wrong_type_names_on_match():
    with pytest.raises(SpecError, match="on_match must be text"):
        parse_create({"description": "d", "source": {"type": "page", "url": "https://example.com/"},
                      "on_match": 5}, LIMITS)
