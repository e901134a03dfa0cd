"""The page source's render: "browser" (issue 31), its pure parts: what create accepts and refuses, what a rendered
page's text parts become, and where a read goes (the renderer, never the fetcher)."""

import json

import pytest

from engine.errors import ContentError, FetchError, SpecError
from engine.sources import SourceIO, SourcePolicy, normalize, parse_source, read
from engine.spec import source_from_record, spec_to_record

URL = "https://shop.example.com/item"
BROWSER = SourcePolicy(browser=True)


def test_page_render_browser_takes_selector_and_wait_for():
    spec = parse_source({"type": "page", "url": URL, "selector": "#price", "render": "browser",
                         "wait_for": ".loaded"}, BROWSER)
    assert (spec.render, spec.selector, spec.wait_for) == ("browser", "#price", ".loaded")


def test_page_render_without_a_browser_says_how_to_enable_it():
    with pytest.raises(SpecError) as refused:
        parse_source({"type": "page", "url": URL, "render": "browser"}, SourcePolicy())
    assert "BROWSER_CDP_URL" in str(refused.value) and "BROWSER_EXECUTABLE" in str(refused.value)


@pytest.mark.parametrize("raw, says", [
    ({"render": "chrome"}, 'source.render must be "browser"'),
    ({"render": True}, 'source.render must be "browser"'),
    ({"wait_for": "#x"}, "wait_for works with render"),
    ({"render": "browser", "wait_for": "div["}, "source.wait_for 'div[' is not a valid CSS selector"),
    ({"render": "browser", "wait_for": ""}, "source.wait_for must be a CSS selector"),
    ({"render": "browser", "selector": "p:-soup-contains('x')"}, "a browser takes standard CSS selectors"),
])
def test_page_render_refuses_bad_fields_with_a_sentence(raw, says):
    with pytest.raises(SpecError) as refused:
        parse_source({"type": "page", "url": URL, **raw}, BROWSER)
    assert says in str(refused.value)


def test_page_without_render_is_stored_as_before_and_with_it_round_trips():
    plain = parse_source({"type": "page", "url": URL, "selector": "#price"}, BROWSER)
    record = _stored(plain)
    assert "render" not in record and "wait_for" not in record
    rendered = parse_source({"type": "page", "url": URL, "render": "browser", "wait_for": "#p"}, BROWSER)
    assert source_from_record(_stored(rendered)) == rendered


def _stored(source) -> dict:
    """The source as a monitor's row keeps it (spec_to_record, through JSON)."""
    from types import SimpleNamespace

    from engine.checks import CheckSpec

    return json.loads(json.dumps(spec_to_record(SimpleNamespace(source=source, check=CheckSpec(type="change")))))[
        "source"]


class Renderer:
    def __init__(self, parts):
        self.parts, self.asked = parts, []

    def render(self, url, selector, wait_for):
        self.asked.append((url, selector, wait_for))
        return json.dumps(self.parts).encode()


class NoFetcher:
    def get(self, *args, **kwargs):
        raise AssertionError("a rendered page is read through the renderer, never the fetcher")


def test_rendered_page_reads_through_the_renderer_and_tidies_its_parts():
    spec = parse_source({"type": "page", "url": URL, "selector": ".p", "render": "browser", "wait_for": "#w"}, BROWSER)
    renderer = Renderer(["  Price:\n\n\n\n 95.10  ", "In   stock"])
    body = read(spec, SourceIO(NoFetcher(), BROWSER, renderer))
    assert renderer.asked == [(URL, ".p", "#w")]
    assert normalize(spec, body, 1024).text == "Price:\n\n95.10\n\nIn stock"


def test_rendered_page_whose_selector_matches_nothing_is_a_content_error():
    spec = parse_source({"type": "page", "url": URL, "selector": "#price", "render": "browser"}, BROWSER)
    with pytest.raises(ContentError, match="matches nothing on the rendered page"):
        normalize(spec, b"[]", 1024)


def test_rendered_text_is_cut_at_the_text_limit():
    spec = parse_source({"type": "page", "url": URL, "render": "browser"}, BROWSER)
    assert len(normalize(spec, json.dumps(["é" * 100]).encode(), 51).text.encode()) <= 51


def test_rendered_page_without_a_browser_in_this_process_is_unreachable():
    spec = parse_source({"type": "page", "url": URL, "render": "browser"}, BROWSER)
    with pytest.raises(FetchError) as failed:
        read(spec, SourceIO(NoFetcher(), BROWSER, None))
    assert failed.value.unreachable
