"""Trigger links: every answer code, every bad input with nothing stored, and the wake they cause."""

from __future__ import annotations

import json
import re
import time

import pytest

from engine.signatures import sign
from models.tables import AuditEvent, Delivery, TriggerLink
from tests.integration.helpers import db, tool, wakes
from adapters.events import decoded
from adapters.ratelimit import LinkLimiter


def create(client, token, signature="none", **arguments) -> dict:
    args = {"description": "the deploy finishes", "source": {"type": "webhook", "signature": signature},
            "max_wakes": 10, **arguments}
    body = tool(client, token, "monitor_create", args).json()
    assert body["ok"], body
    return body["result"]


def path_of(url: str) -> str:
    return url[url.index("/api/triggers/"):]


def deliveries() -> int:
    with db():
        return Delivery.select().count()


def stored_secret(monitor_id: str) -> str:
    import tasks.runtime as runtime

    with db():
        return runtime.current().keyring.decrypt(TriggerLink.get(TriggerLink.monitor == monitor_id).secret_encrypted)


def test_unsigned_link_result_and_a_delivery_wakes(client, owner, drain):
    result = create(client, owner[1])
    assert result["url"].startswith("http://127.0.0.1:8000/api/triggers/trg_") and result["method"] == "POST"
    assert result["reachable_from_internet"] is False and "PUBLIC_API_BASE_URL" in " ".join(result["notes"])
    assert result["secret"] is None and "curl" in result["example_curl"] and "sent_at" in result["example_curl"]
    response = client.post(path_of(result["url"]), json={"status": "deployed", "version": "1.2.3"})
    assert response.status_code == 202 and response.json() == {"accepted": True}
    drain()
    [wake] = wakes(result["monitor_id"])
    assert wake.metadata["wake"]["source"] == "trigger" and '"version": "1.2.3"' in wake.content


def test_public_base_url_makes_the_link_reachable(client, owner, reconfigure):
    reconfigure(PUBLIC_API_BASE_URL="https://vigil.example.com/")
    result = create(client, owner[1])
    assert result["url"].startswith("https://vigil.example.com/api/triggers/trg_")
    assert result["reachable_from_internet"] is True and result["notes"] == []


@pytest.mark.parametrize("scheme", ["github", "standard_webhooks", "hmac_sha256"])
def test_signed_link_accepts_a_signed_delivery_and_refuses_others(client, owner, drain, scheme):
    result = create(client, owner[1], signature=scheme)
    assert result["secret"] == "hidden from you; the user reveals it on the link card in this chat"
    secret = stored_secret(result["monitor_id"])
    assert secret not in json.dumps(result) and "VIGIL_WEBHOOK_SECRET" in result["example_curl"]
    body = b'{"status": "done"}'
    wrong = sign(scheme, "another-links-secret" if scheme != "standard_webhooks" else
                 "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", body, time.time())
    for headers in ({}, wrong, {"X-Signature": "sha256=" + "0" * 64, "X-Hub-Signature-256": "v1,!!!",
                                "webhook-signature": "v1,a,b"}):
        response = client.post(path_of(result["url"]), content=body, headers=headers)
        assert response.status_code == 401, headers
    assert deliveries() == 0
    good = sign(scheme, secret, body, time.time())
    assert client.post(path_of(result["url"]), content=body, headers=good).status_code == 202
    drain()
    [wake] = wakes(result["monitor_id"])
    assert secret not in wake.content


def test_get_and_head_do_nothing(client, owner):
    result = create(client, owner[1])
    assert client.get(path_of(result["url"])).status_code == 405
    assert client.head(path_of(result["url"])).status_code == 405
    assert deliveries() == 0


def test_unknown_cancelled_and_used_up_links_all_look_the_same(client, owner, reconfigure):
    unknown = client.post("/api/triggers/trg_" + "x" * 43, json={})
    cancelled = create(client, owner[1])
    client.post(f"/api/monitors/{cancelled['monitor_id']}/cancel", headers={"Authorization": f"Bearer {owner[1]}"})
    after_cancel = client.post(path_of(cancelled["url"]), json={"a": 1})
    used = create(client, owner[1], source={"type": "webhook", "max_hits": 1})
    assert client.post(path_of(used["url"]), json={"n": 1}).status_code == 202
    used_up = client.post(path_of(used["url"]), json={"n": 2})
    for response in (unknown, after_cancel, used_up):
        assert response.status_code == 404 and response.json() == {"detail": "Not found."}
    assert deliveries() == 1


def test_payload_over_the_cap_is_413_with_and_without_content_length(client, owner, reconfigure):
    reconfigure(TRIGGER_MAX_PAYLOAD_BYTES=1000)
    result = create(client, owner[1])
    assert client.post(path_of(result["url"]), content=b"x" * 1001).status_code == 413

    def chunks():
        for _ in range(20):
            yield b"y" * 100

    assert client.post(path_of(result["url"]), content=chunks()).status_code == 413
    assert client.post(path_of(result["url"]), content=b"z" * 1000).status_code == 202
    assert deliveries() == 1


@pytest.mark.parametrize("body", [b"\xff\xfe not utf-8", b'{"a": "nul \x00 byte"}'])
def test_body_that_cannot_be_stored_is_400(client, owner, body):
    result = create(client, owner[1])
    assert client.post(path_of(result["url"]), content=body).status_code == 400
    assert deliveries() == 0


@pytest.mark.parametrize("body", [b'{"a": NaN}', b'{"a": Infinity}', b'{"a": "\\u0000"}', b"[" * 100_000 + b"]" * 100_000])
def test_odd_json_is_accepted_as_text_and_never_breaks_processing(client, owner, drain, body):
    result = create(client, owner[1])
    assert client.post(path_of(result["url"]), content=body).status_code == 202
    drain()
    assert len(wakes(result["monitor_id"])) == 1
    with db():
        assert Delivery.get().processed_at is not None


def test_rate_limit_at_the_boundary(client, owner, reconfigure):
    reconfigure(TRIGGER_RATE_PER_MINUTE=3)
    result = create(client, owner[1])
    codes = [client.post(path_of(result["url"]), json={"n": n}).status_code for n in range(4)]
    assert codes == [202, 202, 202, 429]
    assert deliveries() == 3


def test_unreachable_redis_turns_the_rate_limit_off_not_the_link():
    limiter = LinkLimiter("redis://127.0.0.1:1/0")
    assert all(limiter.allow("trigger", "1", 1) for _ in range(3))


def test_repeats_are_stored_once(client, owner, drain):
    result = create(client, owner[1])
    url = path_of(result["url"])
    for _ in range(2):
        assert client.post(url, json={"n": 1}, headers={"Idempotency-Key": "abc"}).status_code == 202
        assert client.post(url, json={"same": "body"}).status_code == 202
    assert deliveries() == 2
    drain()
    assert len(wakes(result["monitor_id"])) == 2


def test_github_ping_is_acknowledged_and_ignored(client, owner):
    result = create(client, owner[1], signature="github")
    body = b'{"zen": "Keep it logically awesome."}'
    headers = {**sign("github", stored_secret(result["monitor_id"]), body, time.time()), "X-GitHub-Event": "ping"}
    assert client.post(path_of(result["url"]), content=body, headers=headers).status_code == 202
    assert deliveries() == 0


def test_status_check_wakes_on_entering_and_misfits_speak_once(client, owner, drain):
    result = create(client, owner[1], check={"type": "status", "value_path": "state", "values": ["success", "failure"]})
    assert '"state": "success"' in result["example_curl"]
    url = path_of(result["url"])
    for body in ({"state": "running"}, {"state": "success"}, {"state": "success", "n": 2},
                 {"progress": 50}, {"progress": 80}):
        assert client.post(url, json=body).status_code == 202
        drain()
    messages = wakes(result["monitor_id"])
    assert len(messages) == 2
    assert "success" in messages[0].content and messages[0].metadata["wake"]["source"] == "trigger"
    assert "did not fit its check" in messages[1].content and "state" in messages[1].content


def test_lost_delivery_message_is_swept_and_processed_once(client, owner, broker, drain):
    from models import utcnow
    from models.triggers import find_link, store_delivery
    from tasks.deliveries import process_delivery
    from tasks.scheduler import sweep

    result = create(client, owner[1])
    token = result["url"].rsplit("/", 1)[1]
    with db():
        link = find_link(token)
        delivery_id = store_delivery(link, "lost-1", '{"lost": true}', "application/json", utcnow(), 600)
        assert sweep(utcnow(), 0) == 1
    # a second sweep while the first message is still queued sends it again; the worker may already have taken the
    # first one, so the repeat is sent here rather than left to a race with a second sweep
    process_delivery.send(delivery_id)
    drain()
    assert len(wakes(result["monitor_id"])) == 1
    with db():
        assert sweep(utcnow(), 0) == 0  # processed: nothing left to queue again


def test_reveal_secret_is_for_the_owners_session_only(client, owner, stranger):
    from tests.integration.test_monitors_api import login

    result = create(client, owner[1], signature="standard_webhooks")
    path = f"/api/monitors/{result['monitor_id']}/secret"
    assert client.get(path, headers={"Authorization": f"Bearer {owner[1]}"}).status_code == 404
    login(client, "stranger@example.com", "stranger-password")
    assert client.get(path).status_code == 404
    client.cookies.clear()
    login(client)
    revealed = client.get(path)
    assert revealed.status_code == 200 and revealed.headers["cache-control"].startswith("no-store")
    assert revealed.json() == {"secret": stored_secret(result["monitor_id"])}
    with db():
        [event] = AuditEvent.select()
        assert (event.action, event.user_id, event.monitor_id) == ("monitor.secret_revealed", owner[0].id,
                                                                    result["monitor_id"])
    page = client.get("/conversations/1")
    assert "Reveal secret" in page.text and result["url"] in page.text
    assert stored_secret(result["monitor_id"]) not in page.text
    csrf = re.search(r'"X-CSRF-Token": "([^"]+)"', page.text).group(1)
    client.post(f"/api/monitors/{result['monitor_id']}/cancel", headers={"X-CSRF-Token": csrf})
    assert client.get(path).status_code == 404


def test_deliveries_are_accepted_while_redis_is_unreachable_for_the_rate_limit(client, owner, drain):
    import tasks.runtime as runtime

    result = create(client, owner[1])
    runtime.current().limiter = LinkLimiter("redis://127.0.0.1:1/0")
    for n in range(3):
        assert client.post(path_of(result["url"]), json={"n": n}, headers={"Idempotency-Key": f"k{n}"}).status_code == 202
        assert client.post(path_of(result["url"]), json={"m": n}).status_code == 202
    assert deliveries() == 6
    drain()
    assert len(wakes(result["monitor_id"])) == 6


def test_an_ended_signed_link_is_404_even_to_a_bad_signature(client, owner):
    """The link was just used (so this process knows it); once cancelled, every request is 404, not 401."""
    result = create(client, owner[1], signature="hmac_sha256")
    body = b'{"status": "done"}'
    good = sign("hmac_sha256", stored_secret(result["monitor_id"]), body, time.time())
    assert client.post(path_of(result["url"]), content=body, headers=good).status_code == 202
    client.post(f"/api/monitors/{result['monitor_id']}/cancel", headers={"Authorization": f"Bearer {owner[1]}"})
    for headers in ({}, {"X-Signature": "sha256=" + "0" * 64}, good):
        response = client.post(path_of(result["url"]), content=b'{"n": 2}', headers=headers)
        assert response.status_code == 404 and response.json() == {"detail": "Not found."}, headers
    assert deliveries() == 1


def test_simultaneous_deliveries_never_go_past_max_hits(client, owner):
    from concurrent.futures import ThreadPoolExecutor

    from models import connection, utcnow
    from models.triggers import LinkEnded, find_link, store_delivery

    result = create(client, owner[1], source={"type": "webhook", "max_hits": 3})
    with db():
        link = find_link(result["url"].rsplit("/", 1)[1])

    def deliver(n: int) -> str:
        with connection():
            try:
                store_delivery(link, f"sender-{n}", f'{{"n": {n}}}', "application/json", utcnow(), 600)
            except LinkEnded:
                return "ended"
            return "stored"

    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(deliver, range(24)))
    assert answers.count("stored") == 3 and answers.count("ended") == 21
    with db():
        assert Delivery.select().count() == 3 and TriggerLink.get(TriggerLink.id == link.id).hits == 3


def test_a_delivery_queued_again_while_its_judge_is_slow_is_judged_once(client, owner, broker, drain, reconfigure):
    """The sweep queues a delivery still in progress (a judge call can outlast DELIVERY_SWEEP_SECONDS):
    the second worker thread leaves it to the first instead of paying for a second judge call."""
    from tasks.deliveries import process_delivery
    from tests.judge_server import JudgeServer

    with JudgeServer("slow", slow_seconds=1.5) as judge:
        reconfigure(JUDGE_BASE_URL=judge.base_url, JUDGE_API_KEY="sk-test", JUDGE_MODEL="judge-mini")
        result = create(client, owner[1], condition="the deploy finished")
        assert client.post(path_of(result["url"]), json={"status": "done"}).status_code == 202
        with db():
            [delivery] = Delivery.select()
        process_delivery.send(delivery.id)  # as the sweep would, while the first message is being judged
        drain()
        assert len(judge.requests) == 1
    assert len(wakes(result["monitor_id"])) == 1
    with db():
        assert Delivery.get_by_id(delivery.id).outcome == "fired"


def test_simultaneous_deliveries_each_wake_once_through_the_relay(client, owner, drain, reconfigure):
    """Deliveries that arrive together may share a message to the workers; each still wakes exactly once."""
    from concurrent.futures import ThreadPoolExecutor

    reconfigure(MONITOR_MAX_WAKES=100, MONITOR_MAX_WAKES_PER_HOUR=100, MONITOR_MAX_FIRES_PER_CONVERSATION_DAY=100)
    result = create(client, owner[1], max_wakes=100)

    def deliver(n: int) -> int:
        return client.post(path_of(result["url"]), json={"n": n}, headers={"Idempotency-Key": f"n{n}"}).status_code

    with ThreadPoolExecutor(8) as pool:
        assert set(pool.map(deliver, range(40))) == {202}
    drain()
    woken = sorted(json.loads(w.content[w.content.index("{"):w.content.rindex("}") + 1])["n"]
                   for w in wakes(result["monitor_id"]))
    assert woken == list(range(40))


def test_deliveries_of_one_monitor_in_parallel_threads_wait_for_each_other_and_each_wakes_once(client, owner,
                                                                                               reconfigure):
    """The worker reads a delivery with its monitor's row locked: two threads on one monitor never both record
    from the same claim, so none loses the race (and none starts over); every delivery wakes once."""
    from concurrent.futures import ThreadPoolExecutor

    import models.deliveries as deliveries
    from tasks.deliveries import process_deliveries

    reconfigure(MONITOR_MAX_WAKES=100, MONITOR_MAX_WAKES_PER_HOUR=100, MONITOR_MAX_FIRES_PER_CONVERSATION_DAY=100)
    result = create(client, owner[1], max_wakes=100)
    for n in range(24):
        response = client.post(path_of(result["url"]), json={"n": n}, headers={"Idempotency-Key": f"p{n}"})
        assert response.status_code == 202
    with db():
        ids = [d.id for d in Delivery.select(Delivery.id).order_by(Delivery.id)]
    lost = []
    real = deliveries._Lost.__init__
    deliveries._Lost.__init__ = lambda self, *args: (lost.append(1), real(self, *args))[1]

    def run(batch: list[int]) -> None:
        with db():
            process_deliveries.fn(batch)

    try:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(run, [ids[i::4] for i in range(4)]))
    finally:
        deliveries._Lost.__init__ = real
    assert len(wakes(result["monitor_id"])) == 24 and lost == []
    with db():
        assert {d.outcome for d in Delivery.select()} == {"fired"}


def test_a_delivery_after_the_server_dropped_the_prepared_statements_still_wakes_once(client, owner, drain):
    """DISCARD ALL or DEALLOCATE ALL (a pooler) under a pooled connection: the worker's statements, prepared
    inside the delivery's transaction, are prepared again and the delivery is recorded once."""
    result = create(client, owner[1], max_wakes=10)
    assert client.post(path_of(result["url"]), json={"n": 1}).status_code == 202
    drain()
    with db() as database:
        database.execute_sql("DEALLOCATE ALL")
    assert client.post(path_of(result["url"]), json={"n": 2}).status_code == 202
    drain()
    assert [w.content.count('"n": ') for w in wakes(result["monitor_id"])] == [1, 1]
    with db():
        assert {d.outcome for d in Delivery.select()} == {"fired"}


def test_a_delivery_the_relay_could_not_queue_is_swept_and_woken_once(client, owner, broker, drain, settings):
    """Redis down when the relay sends: the delivery is stored and answered 202, and the sweep queues it."""
    from dataclasses import replace

    from models import utcnow
    from tasks.broker import setup_broker
    from tasks.deliveries import relay
    from tasks.scheduler import sweep
    from tests.processes import free_port

    result = create(client, owner[1])
    setup_broker(replace(settings, REDIS_URL=f"redis://127.0.0.1:{free_port()}/0"))  # nothing listens there
    assert client.post(path_of(result["url"]), json={"status": "done"}).status_code == 202
    assert relay.wait_idle()
    with db():
        [stored] = Delivery.select()
    assert stored.processed_at is None
    setup_broker(settings, broker=broker)  # Redis is back
    with db():
        assert sweep(utcnow(), 0) == 1
    drain()
    assert len(wakes(result["monitor_id"])) == 1


def test_each_wake_reaches_the_owners_pages_and_the_last_one_clears_the_watching_mark(client, owner, drain):
    """A delivery publishes monitor.updated and message.created; conversation.updated (the sidebar's watching
    mark) only comes when the monitor's status moves, here when its last wake ends it."""
    import hashlib

    import redis

    from tests.conftest import TEST_DATABASE_URL, TEST_REDIS_URL

    result = create(client, owner[1], max_wakes=2)
    listener = redis.Redis.from_url(TEST_REDIS_URL).pubsub(ignore_subscribe_messages=True)
    # this Vigil's channels only: pub/sub spans Redis databases, and other Vigils may share the server
    listener.psubscribe(f"vigil:{hashlib.sha256(TEST_DATABASE_URL.encode()).hexdigest()[:12]}:*")
    listener.get_message(timeout=1)  # the subscription's confirmation

    def events_of_one_delivery(n: int) -> list[tuple[str, dict]]:
        assert client.post(path_of(result["url"]), json={"n": n}).status_code == 202
        drain()
        seen = []
        while (message := listener.get_message(timeout=0.5)) is not None:
            seen.extend(decoded(message["data"]))
        return seen

    first, last = events_of_one_delivery(1), events_of_one_delivery(2)
    listener.close()
    assert [name for name, _ in first] == ["monitor.updated", "message.created"]
    assert first[0][1]["status"] == "active" and first[0][1]["wakes_left"] == 1
    assert '"n": 1' in first[1][1]["content"]
    assert [name for name, _ in last] == ["monitor.updated", "conversation.updated", "message.created"]
    assert last[0][1]["status"] == "done" and last[0][1]["wakes_left"] == 0
    assert last[1][1] == {"conversation_id": first[0][1]["conversation_id"], "watching": False}
    assert '"n": 2' in last[2][1]["content"] and "last wake" in last[2][1]["content"]
