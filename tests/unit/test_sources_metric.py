import pytest

from engine.checks import CheckSpec, evaluate, read_number
from engine.errors import ContentError, SpecError
from engine.sources import SourceSpec, normalize, parse_source
from engine.sources.metric import MetricSyntaxError, Sample, parse_line, plain_number, samples

MAX = 64 * 1024
URL = "https://app.example.com/metrics"

EXPOSITION = b"""# HELP http_requests_total The total number of HTTP requests.
# TYPE http_requests_total counter
http_requests_total{method="post",code="200"} 1027 1395066363000
http_requests_total{method="post",code="400"}    3 1395066363000
http_requests_total{method="get",code="200"} 9001

# A plain comment, then an escaped label value and odd spacing.
msdos_file_access_time_seconds{path="C:\\\\DIR\\\\FILE.TXT",error="Cannot find file:\\n\\"FILE.TXT\\""} 1.458255915e9
queue_depth 42
queue_depth_max{ queue = "a" , } -1.5e-05
temperature_celsius{room="lab"} NaN
temperature_celsius{room="hall"} +Inf
temperature_celsius{room="cellar"} -Inf
something_weird this line is not a sample
"""


def spec(metric: str, labels: dict | None = None) -> SourceSpec:
    raw = {"type": "metric", "url": URL, "metric": metric}
    if labels is not None:
        raw["labels"] = labels
    return parse_source(raw)


def value(metric: str, labels: dict | None = None, body: bytes = EXPOSITION):
    return normalize(spec(metric, labels), body, MAX)


# --- parse -------------------------------------------------------------------------------------------------------------

def test_parse_keeps_url_metric_and_labels():
    assert spec("http_requests_total", {"code": "200"}) == SourceSpec(
        type="metric", url=URL, metric="http_requests_total", labels={"code": "200"})
    assert spec("node:load1", {}).labels is None and spec("up").labels is None


@pytest.mark.parametrize("raw, fix", [
    ({"metric": "http-requests"}, "source.metric must be the name of a Prometheus series"),
    ({"metric": "1abc"}, "source.metric must be the name"),
    ({}, "source.metric must be the name"),
    ({"metric": "up", "labels": ["job"]}, "source.labels must be an object"),
    ({"metric": "up", "labels": {"job": 1}}, "source.labels.job must be text"),
    ({"metric": "up", "labels": {"bad-name": "x"}}, "'bad-name', which is not a Prometheus label name"),
    ({"metric": "up", "labels": {"__name__": "x"}}, "not a Prometheus label name"),
    ({"metric": "up", "selector": "#x"}, "unknown field 'selector'"),
])
def test_parse_refuses_bad_fields(raw, fix):
    with pytest.raises(SpecError) as info:
        parse_source({"type": "metric", "url": URL, **raw})
    assert fix in str(info.value) and str(info.value).endswith(".")


def test_parse_refuses_a_missing_url():
    with pytest.raises(SpecError, match="source.url is required for a metric source"):
        parse_source({"type": "metric", "metric": "up"})


# --- the text format ---------------------------------------------------------------------------------------------------

def test_samples_parse_labels_values_and_timestamps():
    found = list(samples(EXPOSITION.decode(), "http_requests_total"))
    assert found == [Sample("http_requests_total", {"method": "post", "code": "200"}, 1027.0),
                     Sample("http_requests_total", {"method": "post", "code": "400"}, 3.0),
                     Sample("http_requests_total", {"method": "get", "code": "200"}, 9001.0)]


def test_escaped_label_values():
    [sample] = samples(EXPOSITION.decode(), "msdos_file_access_time_seconds")
    assert sample.labels == {"path": "C:\\DIR\\FILE.TXT", "error": 'Cannot find file:\n"FILE.TXT"'}
    assert sample.value == 1.458255915e9


def test_spaces_inside_braces_and_a_trailing_comma():
    assert parse_line('queue_depth_max{ queue = "a" , } -1.5e-05').labels == {"queue": "a"}


def test_a_brace_or_comma_inside_a_quoted_value():
    assert parse_line('m{a="x}y,z=\\"w"} 1').labels == {"a": 'x}y,z="w'}


def test_openmetrics_exemplars_and_fractional_timestamps():
    assert parse_line('jobs_total{q="a"} 17 1520879607.789 # {trace_id="oHg5SJYRHA0"} 9.8 1520879607.7') == \
        Sample("jobs_total", {"q": "a"}, 17.0)
    assert list(samples("jobs_total 3\n# EOF\n")) == [Sample("jobs_total", {}, 3.0)]


def test_special_values():
    values = {s.labels["room"]: s.value for s in samples(EXPOSITION.decode(), "temperature_celsius")}
    assert values["lab"] != values["lab"] and values["hall"] == float("inf") and values["cellar"] == float("-inf")


def test_other_metrics_are_not_parsed_when_a_name_is_given():
    assert [s.value for s in samples(EXPOSITION.decode(), "queue_depth")] == [42.0]
    with pytest.raises(MetricSyntaxError, match="line 14 "):
        list(samples(EXPOSITION.decode()))


@pytest.mark.parametrize("line, says", [
    ('{a="b"} 1', "does not start with a metric name"),
    ("m", "should end in a value"),
    ("m 1 2 3", "should end in a value"),
    ("m1x", "should end in a value"),
    ('m{a="b"}', "should end in a value"),
    ("m one", "where a value"),
    ("m 1 soon", "where a value"),
    ('m{a=b} 1', "malformed label"),
    ('m{="b"} 1', "malformed label"),
    ('m{a="b" c="d"} 1', "malformed label list"),
    ('m{a="b} 1', "without its closing quote"),
    ('m{a="1",a="2"} 1', "repeats the label a"),
])
def test_malformed_lines(line, says):
    with pytest.raises(MetricSyntaxError, match=says):
        parse_line(line, 7)


# --- normalize ---------------------------------------------------------------------------------------------------------

def test_the_one_matching_series_is_the_content():
    content = value("http_requests_total", {"method": "post", "code": "400"})
    assert content.text == "3" and content.is_json
    assert content.data == {"value": 3.0, "labels": {"method": "post", "code": "400"}}


def test_a_series_without_labels_matches_without_labels():
    assert value("queue_depth").data == {"value": 42.0, "labels": {}}


def test_labels_match_as_a_subset():
    assert value("http_requests_total", {"method": "get"}).text == "9001"


def test_small_and_large_numbers_are_written_without_an_exponent():
    assert value("queue_depth_max").text == "-0.000015"
    assert value("msdos_file_access_time_seconds").text == "1458255915"
    assert plain_number(2.5e20) == "250000000000000000000" and plain_number(0.1) == "0.1"


def test_no_series_with_that_name():
    with pytest.raises(ContentError, match="there is no series named up in the metrics"):
        value("up")


def test_no_series_with_those_labels_lists_the_series_there_are():
    with pytest.raises(ContentError) as info:
        value("http_requests_total", {"code": "500"})
    message = str(info.value)
    assert message.startswith('there is no series named http_requests_total with labels {"code": "500"}')
    assert 'http_requests_total{code="400",method="post"}' in message


def test_several_matches_say_which_labels_tell_them_apart():
    with pytest.raises(ContentError) as info:
        value("http_requests_total")
    message = str(info.value)
    assert message.startswith("3 series named http_requests_total match; add source.labels to pick one")
    assert "code ('200', '400')" in message and "method ('post', 'get')" in message
    with pytest.raises(ContentError, match="2 series .* using code \\('200', '400'\\)$"):
        value("http_requests_total", {"method": "post"})


@pytest.mark.parametrize("room, shown", [("lab", "nan"), ("hall", "inf"), ("cellar", "-inf")])
def test_non_finite_values_are_a_content_error(room, shown):
    with pytest.raises(ContentError, match=f'temperature_celsius{{room="{room}"}} is {shown}, not a number'):
        value("temperature_celsius", {"room": room})


def test_a_malformed_line_of_the_watched_metric_is_a_content_error():
    with pytest.raises(ContentError, match="line 1 of the metrics"):
        value("up", body=b'up{job="a} 1\n')


def test_an_html_page_is_no_series():
    with pytest.raises(ContentError, match="no series named up"):
        value("up", body=b"<html><body>Login</body></html>")


# --- with a threshold check --------------------------------------------------------------------------------------------

def test_threshold_reads_the_first_number_of_the_text_or_value_path():
    content = value("queue_depth_max")
    assert read_number(CheckSpec(type="threshold", op="<", value=0), content) == -0.000015
    assert read_number(CheckSpec(type="threshold", op="<", value=0, value_path="value"), content) == -0.000015


def test_threshold_fires_when_the_series_crosses():
    check = CheckSpec(type="threshold", op=">", value=100)
    before = evaluate(check, value("queue_depth"), None)
    after = evaluate(check, value("queue_depth", body=b"queue_depth 150\n"), before.state)
    assert after.fired and after.found == "150 is above 100 (was 42)"
