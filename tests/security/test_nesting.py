"""Documents nested 100,000 deep, fetched as a page or JSON source and delivered to a trigger link: each is read
(or refused with a clear error) in bounded time, never a RecursionError, a hung worker or a 500.

(JSON nested 100,000 deep in a delivery is in tests/integration/test_triggers.py; the parsers' own limits are
unit tested in tests/unit/test_content.py.)
"""

from __future__ import annotations

import time

import pytest

from models.tables import Delivery, Monitor
from tests.integration.helpers import db, monitor_row, tool, wakes

DEPTH = 100_000
#: generous: the point is "finishes", not "is fast"
BOUND = 30
DEEP_HTML = "<html><body>" + "<div>" * DEPTH + "deep text" + "</div>" * DEPTH + "</body></html>"
DEEP_JSON = '{"a": ' * DEPTH + "1" + "}" * DEPTH


@pytest.fixture(autouse=True)
def room(reconfigure):
    """Limits that let the whole 1.1 MB document through, so it is the nesting under test, not the size cap."""
    reconfigure(FETCH_MAX_BYTES=4 * 1024 * 1024, TRIGGER_MAX_PAYLOAD_BYTES=4 * 1024 * 1024)


def create(client, token: str, source: dict) -> dict:
    return tool(client, token, "monitor_create", {"description": "deep", "source": source, "interval": "1m",
                                                  "max_wakes": 5}).json()


@pytest.mark.parametrize("selector", [None, "div", "body > div"])
def test_deep_html_page_is_read_in_bounded_time(client, owner, pages, run_due_checks, selector):
    url = pages.set("/deep", DEEP_HTML)
    source = {"type": "page", "url": url, **({"selector": selector} if selector else {})}
    started = time.monotonic()
    body = create(client, owner[1], source)
    assert time.monotonic() - started < BOUND
    assert body["ok"] is True, body  # a sane result: the text, read as far as the parser nests
    assert "deep text" in body["result"]["baseline"]
    pages.set("/deep", DEEP_HTML.replace("deep text", "deeper text"))
    started = time.monotonic()
    run_due_checks()
    assert time.monotonic() - started < BOUND
    monitor = body["result"]["monitor_id"]
    assert monitor_row(monitor).last_error == ""
    assert len(wakes(monitor)) == 1 and "deeper text" in wakes(monitor)[0].content


def test_deep_json_source_is_refused_with_a_clear_error(client, owner, pages):
    url = pages.set_json("/deep.json", DEEP_JSON)
    started = time.monotonic()
    body = create(client, owner[1], {"type": "json", "url": url})
    assert time.monotonic() - started < BOUND
    assert body["ok"] is False and "nested too deeply" in body["error"], body
    with db():
        assert Monitor.select().count() == 0


def test_deep_json_source_that_turns_deep_later_records_the_error(client, owner, pages, run_due_checks):
    url = pages.set_json("/later.json", '{"a": 1}')
    monitor = create(client, owner[1], {"type": "json", "url": url})["result"]["monitor_id"]
    pages.set_json("/later.json", DEEP_JSON)
    run_due_checks()
    assert "nested too deeply" in monitor_row(monitor).last_error and wakes(monitor) == []


def test_deep_html_delivery_is_stored_and_wakes_as_text(client, owner, drain):
    result = create(client, owner[1], {"type": "webhook"})["result"]
    path = "/api/triggers/" + result["url"].rsplit("/", 1)[1]
    started = time.monotonic()
    assert client.post(path, content=DEEP_HTML.encode(), headers={"Content-Type": "text/html"}).status_code == 202
    drain()
    assert time.monotonic() - started < BOUND
    with db():
        assert Delivery.get().processed_at is not None
    woke = wakes(result["monitor_id"])
    assert len(woke) == 1 and "<div><div>" in woke[0].content  # a delivery is its text: no HTML parser runs
    assert len(woke[0].content.encode()) < 2 * 256 * 1024
