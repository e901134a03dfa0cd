"""A message of deliveries recorded in one transaction (models/deliveries.process_batch): each delivery still
wakes exactly once and in order, a judged fire still goes outside any transaction, and one delivery that fails
rolls the batch back so the others are recorded one by one and only the bad one waits for its retry."""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor

import pytest

from adapters.events import decoded
from models.tables import Delivery
from tests.integration.helpers import db, wakes
from tests.integration.test_triggers import create, path_of

CAPS = {"MONITOR_MAX_WAKES": 1000, "MONITOR_MAX_WAKES_PER_HOUR": 1000, "MONITOR_MAX_FIRES_PER_CONVERSATION_DAY": 1000,
        "MONITOR_MAX_ARMED_PER_CONVERSATION": 20}


@pytest.fixture()
def held(monkeypatch):
    """The web stores deliveries without handing them to the workers: the test hands over the batches."""
    from tasks.deliveries import relay

    monkeypatch.setattr(relay, "put", lambda delivery_id: None)


def deliver(client, link: dict, n: int) -> int:
    response = client.post(path_of(link["url"]), json={"n": n}, headers={"Idempotency-Key": f"{link['monitor_id']}-{n}"})
    assert response.status_code == 202
    with db():
        return Delivery.select(Delivery.id).order_by(Delivery.id.desc()).first().id


def numbers(monitor_id: str) -> list[int]:
    return [json.loads(w.content[w.content.index("{"):w.content.rindex("}") + 1])["n"] for w in wakes(monitor_id)]


def outcomes(ids: list[int]) -> list[str | None]:
    with db():
        by_id = {d.id: d.outcome if d.processed_at else None for d in Delivery.select().where(Delivery.id.in_(ids))}
    return [by_id[i] for i in ids]


def test_a_batch_over_three_monitors_wakes_each_delivery_once_in_order_and_publishes_each(client, owner, held,
                                                                                          reconfigure):
    import hashlib

    import redis

    from tasks.deliveries import process_deliveries
    from tests.conftest import TEST_DATABASE_URL, TEST_REDIS_URL

    reconfigure(**CAPS)
    links = [create(client, owner[1], max_wakes=100) for _ in range(3)]
    ids = [deliver(client, links[n % 3], n) for n in range(12)]
    listener = redis.Redis.from_url(TEST_REDIS_URL).pubsub(ignore_subscribe_messages=True)
    listener.psubscribe(f"vigil:{hashlib.sha256(TEST_DATABASE_URL.encode()).hexdigest()[:12]}:*")
    listener.get_message(timeout=1)
    with db():
        process_deliveries.fn(ids)
    for index, link in enumerate(links):
        assert numbers(link["monitor_id"]) == list(range(index, 12, 3))
    assert outcomes(ids) == ["fired"] * 12
    seen = []
    while (message := listener.get_message(timeout=0.5)) is not None:
        seen.extend(decoded(message["data"]))
    listener.close()
    assert [name for name, _ in seen] == ["monitor.updated", "message.created"] * 12
    for link in links:  # each delivery's monitor.updated shows the monitor as that delivery left it
        assert [data["wakes_left"] for name, data in seen
                if name == "monitor.updated" and data["monitor_id"] == link["monitor_id"]] == [99, 98, 97, 96]
    with db():  # one transaction: the batch's deliveries share its clock
        assert len({d.processed_at for d in Delivery.select().where(Delivery.id.in_(ids))}) == 1
    with db():  # a message queued again (the sweep) finds them done and writes nothing
        process_deliveries.fn(ids)
    assert sum(len(wakes(link["monitor_id"])) for link in links) == 12


def test_a_fire_that_must_be_judged_leaves_the_batch_and_is_judged_outside_it(client, owner, held, reconfigure):
    from tasks.deliveries import process_deliveries
    from tests.judge_server import JudgeServer

    with JudgeServer("match") as judge:
        reconfigure(JUDGE_BASE_URL=judge.base_url, JUDGE_API_KEY="sk-test", JUDGE_MODEL="judge-mini", **CAPS)
        plain = create(client, owner[1], max_wakes=100)
        judged = create(client, owner[1], max_wakes=100, condition="the deploy finished")
        ids = [deliver(client, plain, 0), deliver(client, judged, 1), deliver(client, plain, 2),
               deliver(client, plain, 3)]
        with db():
            process_deliveries.fn(ids)
        assert len(judge.requests) == 1
    assert numbers(plain["monitor_id"]) == [0, 2, 3] and numbers(judged["monitor_id"]) == [1]
    assert outcomes(ids) == ["fired"] * 4


def test_one_delivery_that_fails_rolls_the_batch_back_and_only_it_waits_for_its_retry(client, owner, held, broker,
                                                                                      drain, reconfigure, caplog):
    """The failure is PostgreSQL's own: a trigger that refuses one monitor's wakes."""
    from tasks.deliveries import process_deliveries

    reconfigure(**CAPS)
    good, bad = create(client, owner[1], max_wakes=100), create(client, owner[1], max_wakes=100)
    ids = [deliver(client, good, 0), deliver(client, bad, 1), deliver(client, good, 2)]
    with db() as database:
        database.execute_sql(
            "CREATE FUNCTION refuse_wake() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF NEW.monitor_id = '{bad['monitor_id']}' THEN RAISE EXCEPTION 'refused for the test'; END IF; "
            "RETURN NEW; END $$")
        database.execute_sql("CREATE TRIGGER refuse_wake BEFORE INSERT ON wakes FOR EACH ROW EXECUTE FUNCTION "
                             "refuse_wake()")
    try:
        with caplog.at_level(logging.INFO), db():
            process_deliveries.fn(ids)
        assert numbers(good["monitor_id"]) == [0, 2] and wakes(bad["monitor_id"]) == []
        assert outcomes(ids) == ["fired", None, "fired"]
        assert any("went one by one" in record.getMessage() for record in caplog.records)
    finally:
        with db() as database:
            database.execute_sql("DROP TRIGGER refuse_wake ON wakes")
            database.execute_sql("DROP FUNCTION refuse_wake()")
    drain()  # its own message, queued again when it failed
    assert numbers(bad["monitor_id"]) == [1] and outcomes(ids) == ["fired"] * 3
    assert numbers(good["monitor_id"]) == [0, 2]


def test_batches_that_share_monitors_in_opposite_orders_wait_for_each_other_without_a_deadlock(client, owner, held,
                                                                                              reconfigure, caplog):
    """Each batch locks its monitors in one order (by id), so two that share them queue up instead of each
    holding what the other needs (PostgreSQL would abort one after deadlock_timeout)."""
    from tasks.deliveries import process_deliveries

    reconfigure(**CAPS)
    links = [create(client, owner[1], max_wakes=200) for _ in range(4)]
    ids = [deliver(client, links[n % 4], n) for n in range(64)]
    batches = [ids[i:i + 16] for i in range(0, 64, 16)]
    batches = [list(reversed(batch)) if i % 2 else batch for i, batch in enumerate(batches)]

    def run(batch: list[int]) -> None:
        with db():
            process_deliveries.fn(batch)

    with caplog.at_level(logging.INFO), ThreadPoolExecutor(4) as pool:
        list(pool.map(run, batches))
    assert not [record for record in caplog.records if "went one by one" in record.getMessage()]
    for index, link in enumerate(links):  # each once; the batches themselves ran in either order
        assert sorted(numbers(link["monitor_id"])) == list(range(index, 64, 4))
    assert outcomes(ids) == ["fired"] * 64


def test_a_batch_works_on_the_monitors_no_one_else_holds_first_then_waits_for_the_rest(client, owner, held,
                                                                                      reconfigure):
    """Another worker holds one monitor's row (a long transaction of its own): the batch records the other
    monitor's deliveries at once, and that one's once it is let go."""
    import threading
    import time

    import psycopg2

    from tasks.deliveries import process_deliveries
    from tests.conftest import TEST_DATABASE_URL

    reconfigure(**CAPS)
    busy, free = create(client, owner[1], max_wakes=100), create(client, owner[1], max_wakes=100)
    ids = [deliver(client, busy if n % 2 else free, n) for n in range(6)]
    other = psycopg2.connect(TEST_DATABASE_URL)
    try:
        other.cursor().execute("SELECT id FROM monitors WHERE id = %s FOR UPDATE", (busy["monitor_id"],))

        def run() -> None:
            with db():
                process_deliveries.fn(ids)

        worker = threading.Thread(target=run)
        worker.start()
        deadline = time.monotonic() + 20
        while outcomes(ids[0::2]) != ["fired"] * 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert outcomes(ids[0::2]) == ["fired"] * 3 and outcomes(ids[1::2]) == [None] * 3
        assert worker.is_alive()  # waiting for the held monitor
    finally:
        other.rollback()
        other.close()
    worker.join(20)
    assert not worker.is_alive()
    assert numbers(free["monitor_id"]) == [0, 2, 4] and numbers(busy["monitor_id"]) == [1, 3, 5]
    assert outcomes(ids) == ["fired"] * 6


@pytest.mark.parametrize("caps", [{"MONITOR_MAX_WAKES_PER_HOUR": 3},
                                  {"MONITOR_MAX_WAKES_PER_HOUR": 3, "MONITOR_MAX_FIRES_PER_CONVERSATION_DAY": 4}])
def test_a_batch_that_reaches_a_cap_ends_as_the_same_deliveries_one_by_one_do(client, owner, held, reconfigure,
                                                                            caps):
    """A round reads the caps once for all its monitors, and before each fire only for those it could take to a
    cap: the outcomes, wakes and statuses are those of the same deliveries processed one at a time, in the order
    a round takes them (by monitor, then delivery). A trigger link is seed 000's: the hourly cap pauses it, and
    seed 001's daily cap (4 here, below the conversation's 6 fires) never ends it."""
    from models.tables import Monitor
    from tasks.deliveries import process_delivery, process_deliveries

    reconfigure(**{**CAPS, **caps})

    def run(conversation: str, one_by_one: bool) -> tuple:
        links = [create_in(client, owner[1], conversation) for _ in range(2)]
        ids = [deliver(client, links[n % 2], n) for n in range(8)]
        with db():
            if one_by_one:
                for _, delivery_id in sorted((links[n % 2]["monitor_id"], delivery_id)
                                             for n, delivery_id in enumerate(ids)):
                    process_delivery.fn(delivery_id)
            else:
                process_deliveries.fn(ids)
        first = sorted(range(2), key=lambda i: links[i]["monitor_id"])  # the monitor a round takes first, first
        with db():
            return [(outcomes(ids[i::2]), Monitor.get_by_id(links[i]["monitor_id"]).status,
                     [w.metadata["wake"]["source"] for w in wakes(links[i]["monitor_id"])]) for i in first]

    batched, alone = run("conv-batched", False), run("conv-alone", True)
    assert batched == alone
    assert {status for _, status, _ in batched} == {"paused"}  # the hourly cap was reached, and only it


def create_in(client, token: str, conversation: str) -> dict:
    from tests.integration.helpers import tool

    body = tool(client, token, "monitor_create", {"description": "the deploy finishes", "max_wakes": 100,
                                                  "source": {"type": "webhook", "signature": "none"}},
                conversation=conversation).json()
    assert body["ok"], body
    return body["result"]
