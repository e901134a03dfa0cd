"""The pub/sub wire format of one user's events (adapters/events.encoded, decoded): every event comes back as it
was published, in order, and a run of events of one shape carries its keys once."""

from __future__ import annotations

import json

import pytest

from adapters.events import decoded, encoded


def quiet_event(n: int, error: str | None = None) -> tuple[str, dict]:
    return ("monitor.updated", {"monitor_id": f"m{n}", "status": "active", "wakes_left": 1,
                                "last_checked_at": "2026-12-03T06:00:00.250000", "conversation_id": "c1",
                                "check_count": n, "last_error": error})


def test_a_mixed_batch_comes_back_event_by_event_in_order():
    events = [quiet_event(1), quiet_event(2, "HTTP 503"), ("conversation.updated", {"conversation_id": "c1",
                                                                                  "watching": True}),
              quiet_event(3), ("message.created", {"conversation_id": "c1", "id": 9, "content": '["a"]'}),
              ("monitor.updated", {"monitor_id": "m4", "status": "done"}), quiet_event(5), ("device.work", {})]
    assert decoded(encoded(events)) == events
    assert decoded(encoded(events[:1])) == events[:1]


def test_a_run_of_one_shape_writes_its_keys_once():
    events = [quiet_event(n) for n in range(200)]
    wire = encoded(events)
    assert decoded(wire) == events
    assert wire.count('"last_checked_at"') == 1
    keyed = json.dumps({"events": events})
    assert len(wire) < 0.6 * len(keyed)


def test_the_format_a_worker_wrote_before_still_reads():
    """A rolling upgrade has a newer web reading an older worker's messages for a while."""
    events = [quiet_event(1), ("message.created", {"id": 2})]
    assert decoded(json.dumps({"events": events})) == events
    assert decoded(json.dumps({"name": "device.work", "data": {"device_id": 3}})) == [("device.work",
                                                                                         {"device_id": 3})]


@pytest.mark.parametrize("raw", ['{"rows": [["monitor.updated", ["a", "b"], [1]]]}', '{"rows": [["x"]]}',
                                 '{"rows": 3}', "not json", '{"other": 1}'])
def test_a_message_it_did_not_write_is_refused_not_misread(raw):
    with pytest.raises((ValueError, KeyError, TypeError)):
        decoded(raw)


def test_the_event_streams_write_each_event_as_litestar_would_have():
    """app/events.sse writes the bytes itself (issue 27); a client reads exactly what ServerSentEvent sent."""
    from litestar.response.sse import ServerSentEventMessage

    from app.events import CONNECTED, KEEPALIVE, sse

    for event, data in [("message.created", '{"id": 1, "content": "a\\nb"}'), ("monitor-1", "<li>\n  x\r\n</li>\n"),
                        ("empty", ""), ("bare-cr", "a\rb")]:
        assert sse(event, data) == ServerSentEventMessage(event=event, data=data).encode(), (event, data)
    assert CONNECTED == ServerSentEventMessage(comment="connected", data=None).encode()
    assert KEEPALIVE == ServerSentEventMessage(comment="keep-alive", data=None).encode()
