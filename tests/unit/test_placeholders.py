from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from engine.errors import SpecError
from engine.placeholders import PLACEHOLDERS, fill, has_placeholders, sample_values, unknown, values
from engine.sources import SourceIO, SourcePolicy, SourceSpec, fill_placeholders, parse_source, read

NOW = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=timezone.utc)
CHECKED = datetime(2024, 5, 1, 23, 59, 59, tzinfo=timezone.utc)
CHANGED = datetime(2024, 4, 30, 12, 0, 0, tzinfo=timezone.utc)


class Body:
    truncated = False

    def __init__(self, body: bytes):
        self.body = body


class FakeFetcher:
    def __init__(self, body: bytes = b"{}"):
        self.body, self.urls = body, []

    def get(self, url):
        self.urls.append(url)
        return Body(self.body)


# --- values and fill ---------------------------------------------------------------------------------------------------

def test_values_are_iso_utc_with_z_and_a_slashed_date():
    assert values(NOW, CHECKED, CHANGED) == {
        "now": "2024-05-06T07:08:09Z", "last_checked_at": "2024-05-01T23:59:59Z",
        "last_changed_at": "2024-04-30T12:00:00Z", "last_checked_date": "2024/05/01"}
    assert set(values(NOW)) == set(PLACEHOLDERS)


def test_values_without_previous_times_fall_back_to_now():
    filled = values(NOW, None, None)
    assert filled["last_checked_at"] == filled["last_changed_at"] == filled["now"] == "2024-05-06T07:08:09Z"
    assert filled["last_checked_date"] == "2024/05/06"


def test_values_convert_other_zones_to_utc_and_take_naive_times_as_utc():
    east = timezone(timedelta(hours=5))
    filled = values(datetime(2024, 5, 6, 2, 0, tzinfo=east), datetime(2024, 5, 1, 1, 30))
    assert filled["now"] == "2024-05-05T21:00:00Z"
    assert filled["last_checked_at"] == "2024-05-01T01:30:00Z" and filled["last_checked_date"] == "2024/05/01"


def test_fill_replaces_known_names_and_leaves_others():
    text = "after:{{last_checked_date}} at {{ now }} {{unknown}} {x}"
    assert fill(text, values(NOW, CHECKED)) == "after:2024/05/01 at 2024-05-06T07:08:09Z {{unknown}} {x}"


def test_fill_encoded_percent_encodes_every_value():
    assert fill("q=after:{{last_checked_date}}&t={{now}}", values(NOW, CHECKED), encode=True) == \
        "q=after:2024%2F05%2F01&t=2024-05-06T07%3A08%3A09Z"


def test_unknown_lists_each_unknown_name_once():
    assert unknown("{{now}} {{today}} {{ today }} {{Now}} {{}}") == ["today", "Now", ""]
    assert unknown("no placeholders {here}") == []
    assert has_placeholders("a {{ now }}") and not has_placeholders("{now}")


# --- at create ---------------------------------------------------------------------------------------------------------

def test_placeholder_in_url_query_is_accepted_and_stored_as_written():
    url = "https://mail.example.com/search?q=after:{{last_checked_date}}&since={{last_checked_at}}"
    spec = parse_source({"type": "json", "url": f"  {url} "})
    assert spec == SourceSpec(type="json", url=url)


def test_placeholder_in_url_path_is_accepted():
    url = "https://api.example.com/days/{{last_checked_date}}/events"
    assert parse_source({"type": "feed", "url": url, "items_path": "events"}).url == url


@pytest.mark.parametrize("field, value", [
    ("url", "https://x.example.com/?after={{yesterday}}"),
    ("selector", "#day-{{today}}"),
])
def test_unknown_placeholder_is_refused_naming_it(field, value):
    raw = {"type": "page", "url": "https://x.example.com/", field: value}
    with pytest.raises(SpecError) as info:
        parse_source(raw)
    message = str(info.value)
    assert f"source.{field}" in message and "{{" + value.split("{{")[1].split("}}")[0] + "}}" in message
    assert "{{last_checked_date}}" in message and message.endswith(".")


def test_known_placeholder_outside_url_and_path_is_refused():
    with pytest.raises(SpecError, match="source.url, source.path and source.command only; take them out of source.selector"):
        parse_source({"type": "page", "url": "https://x.example.com/", "selector": "#d-{{now}}"})


def test_placeholder_in_the_host_is_refused():
    with pytest.raises(SpecError, match="not in its host"):
        parse_source({"type": "page", "url": "https://{{now}}.example.com/"})


def test_url_with_placeholders_is_still_checked():
    with pytest.raises(SpecError, match="http:// or https://"):
        parse_source({"type": "page", "url": "ftp://x.example.com/{{now}}"})


def test_placeholder_in_a_file_path_is_checked_against_the_roots(tmp_path):
    policy = SourcePolicy(file_roots=(str(tmp_path),))
    spec = parse_source({"type": "file", "path": f"{tmp_path}/logs/{{{{last_checked_date}}}}.log"}, policy)
    assert spec.path == f"{tmp_path}/logs/{{{{last_checked_date}}}}.log"
    with pytest.raises(SpecError, match="outside the folders"):
        parse_source({"type": "file", "path": f"{tmp_path}/../{{{{now}}}}.log"}, policy)


def test_sample_values_are_fixed():
    assert sample_values() == sample_values() and sample_values()["last_checked_date"] == "2024/01/31"


# --- at read -------------------------------------------------------------------------------------------------------

def test_read_fills_the_url_encoding_values():
    fetcher = FakeFetcher()
    spec = SourceSpec(type="json", url="https://x.example.com/s?q=after:{{last_checked_date}}&t={{now}}")
    read(spec, SourceIO(fetcher), values(NOW, CHECKED))
    assert fetcher.urls == ["https://x.example.com/s?q=after:2024%2F05%2F01&t=2024-05-06T07%3A08%3A09Z"]


def test_read_without_placeholders_leaves_the_spec_alone():
    spec = SourceSpec(type="json", url="https://x.example.com/plain")
    assert fill_placeholders(spec, values(NOW)) is spec
    fetcher = FakeFetcher()
    read(spec, SourceIO(fetcher), values(NOW))
    assert fetcher.urls == ["https://x.example.com/plain"]


def test_read_with_no_values_given_fills_with_the_current_time():
    fetcher = FakeFetcher()
    read(SourceSpec(type="json", url="https://x.example.com/?d={{last_checked_date}}"), SourceIO(fetcher))
    [url] = fetcher.urls
    assert "{{" not in url and url.startswith("https://x.example.com/?d=20") and url.count("%2F") == 2


def test_fill_placeholders_fills_the_url_path_and_command_and_encodes_only_the_url():
    spec = SourceSpec(type="file", path="/data/{{last_checked_date}}.txt")
    assert fill_placeholders(spec, values(NOW, CHECKED)) == replace(spec, path="/data/2024/05/01.txt")
    spec = SourceSpec(type="json", url="https://x.example.com/?d={{last_checked_date}}")
    assert fill_placeholders(spec, values(NOW, CHECKED)).url == "https://x.example.com/?d=2024%2F05%2F01"
    # the other fields are never filled (parse_source refuses a placeholder there, as tested above)
    spec = SourceSpec(type="page", url="https://x.example.com/", selector="{{now}}")
    assert fill_placeholders(spec, values(NOW, CHECKED)) is spec


def test_read_fills_the_file_path(tmp_path):
    (tmp_path / "2024" / "05").mkdir(parents=True)
    (tmp_path / "2024" / "05" / "01.log").write_text("hello")
    policy = SourcePolicy(file_roots=(str(tmp_path),))
    spec = parse_source({"type": "file", "path": f"{tmp_path}/{{{{last_checked_date}}}}.log"}, policy)
    assert read(spec, SourceIO(FakeFetcher(), policy), values(NOW, CHECKED)) == b"hello"
