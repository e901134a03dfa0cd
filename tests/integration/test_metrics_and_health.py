"""/healthz, /readyz and /metrics: the counters move as checks, wakes and deliveries happen; the figures read at
the scrape (queues, scheduler lag, devices); the METRICS_TOKEN guard; and counters of a worker process summed by
the web process (multiprocess mode)."""

from __future__ import annotations

import time
from datetime import timedelta

import dramatiq
import pytest
import requests
from dramatiq.brokers.redis import RedisBroker
from dramatiq.brokers.stub import StubBroker
from prometheus_client.parser import text_string_to_metric_families

from models import utcnow
from models.db import bind
from models.devices import add_device
from models.tables import Device, Monitor
from tests.conftest import TEST_DATABASE_URL, TEST_REDIS_URL
from tests.integration.helpers import db, running_stack, tool, wait_for
from tests.processes import free_port

PAGE = "<html><body><p id='price'>Price: ${price}</p></body></html>"
QUEUES = ("checks", "deliveries", "pushes")


def quote(price: str) -> str:
    return PAGE.replace("{price}", price)


def parse(text: str) -> dict[tuple, float]:
    """{(sample name, ((label, value), …)): value} of a /metrics body."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scrape(client, token: str | None = None) -> dict[tuple, float]:
    response = client.get("/metrics", headers={"Authorization": f"Bearer {token}"} if token else {})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain") and response.headers["cache-control"] == "no-store"
    return parse(response.text)


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def moved(before: dict, after: dict, name: str, **labels) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def page_monitor(client, token: str, url: str) -> str:
    body = tool(client, token, "monitor_create", {
        "description": "ACMEB below 90", "source": {"type": "page", "url": url, "selector": "#price"},
        "check": {"type": "threshold", "op": "<", "value": 90}, "on_match": "Tell the user.", "interval": "5m",
        "max_wakes": 5}).json()
    assert body["ok"], body
    return body["result"]["monitor_id"]


def test_healthz_answers_while_the_process_serves(client):
    response = client.get("/healthz")
    assert response.status_code == 200 and response.json() == {"ok": True}
    assert response.headers["cache-control"] == "no-store"


def test_readyz_is_200_while_database_and_redis_answer(client):
    response = client.get("/readyz")
    assert response.status_code == 200 and response.json() == {"ok": True, "database": "ok", "redis": "ok"}


def test_readyz_is_503_naming_an_unreachable_database(client):
    bind(f"postgresql://vigil:vigil@127.0.0.1:{free_port()}/vigil")  # nothing listens there
    try:
        response = client.get("/readyz")
        health = client.get("/healthz")
    finally:
        bind(TEST_DATABASE_URL)
    assert response.status_code == 503 and response.headers["retry-after"] == "5"
    assert response.json()["database"].startswith("unreachable") and response.json()["redis"] == "ok"
    assert health.status_code == 200


def test_readyz_is_503_naming_an_unreachable_redis(client, settings):
    import tasks.runtime as runtime
    from adapters.events import RedisBus

    runtime.configure(settings, RedisBus(f"redis://127.0.0.1:{free_port()}/0", "h6"))
    response = client.get("/readyz")
    assert response.status_code == 503 and response.headers["retry-after"] == "5"
    assert response.json()["database"] == "ok" and response.json()["redis"].startswith("unreachable")


def test_checks_count_quiet_changed_and_fired(client, owner, pages, run_due_checks):
    monitor_id = page_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    before = scrape(client)
    run_due_checks()
    quiet = scrape(client)
    assert moved(before, quiet, "vigil_checks_total", outcome="quiet") == 1
    assert moved(before, quiet, "vigil_checks_total", outcome="changed") == 0
    pages.set("/q", quote("93.00"))
    run_due_checks()
    changed = scrape(client)
    assert moved(quiet, changed, "vigil_checks_total", outcome="changed") == 1
    assert moved(quiet, changed, "vigil_wakes_total", source="monitor") == 0
    pages.set("/q", quote("89.50"))
    run_due_checks()
    fired = scrape(client)
    assert moved(changed, fired, "vigil_checks_total", outcome="fired") == 1
    assert moved(changed, fired, "vigil_wakes_total", source="monitor") == 1
    assert moved(before, fired, "vigil_checks_total", outcome="quiet") == 1, monitor_id


def test_unreachable_and_error_checks_are_counted_apart(client, owner, pages, run_due_checks):
    page_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    before = scrape(client)
    pages.set("/q", "<html><body>no price here</body></html>")
    run_due_checks()
    pages.set("/q", "down for maintenance", status=503)  # unreachable (5xx): skipped, not an error
    run_due_checks()
    after = scrape(client)
    assert moved(before, after, "vigil_checks_total", outcome="error") == 1
    assert moved(before, after, "vigil_checks_total", outcome="unreachable") == 1


def test_trigger_deliveries_count_by_status(client, owner, drain, reconfigure):
    body = tool(client, owner[1], "monitor_create", {
        "description": "the deploy finishes", "source": {"type": "webhook", "signature": "none"},
        "max_wakes": 10}).json()
    assert body["ok"], body
    path = body["result"]["url"][body["result"]["url"].index("/api/triggers/"):]
    before = scrape(client)
    assert client.post(path, json={"status": "deployed"}).status_code == 202
    assert client.post("/api/triggers/trg_" + "x" * 43, json={}).status_code == 404
    reconfigure(TRIGGER_MAX_PAYLOAD_BYTES=100)
    assert client.post(path, content=b"x" * 101).status_code == 413
    drain()
    after = scrape(client)
    assert moved(before, after, "vigil_trigger_deliveries_total", status="202") == 1
    assert moved(before, after, "vigil_trigger_deliveries_total", status="404") == 1
    assert moved(before, after, "vigil_trigger_deliveries_total", status="413") == 1
    assert moved(before, after, "vigil_wakes_total", source="trigger") == 1


def test_every_queue_has_a_depth_and_an_age(client, broker):
    samples = scrape(client)
    for queue in QUEUES:
        assert ("vigil_queue_depth", (("queue", queue),)) in samples
        assert ("vigil_queue_oldest_age_seconds", (("queue", queue),)) in samples


@pytest.mark.parametrize("kind", ["stub", "redis"])
def test_queue_depth_and_oldest_age_of_waiting_messages(client, broker, kind):
    """Messages no worker took yet: in the in-memory broker (embedded mode) and in Redis (production)."""
    waiting = StubBroker() if kind == "stub" else RedisBroker(url=TEST_REDIS_URL)
    for queue in QUEUES:
        waiting.declare_queue(queue)
    stamp = int((time.time() - 30) * 1000)
    for n in range(3):
        waiting.enqueue(dramatiq.Message(queue_name="checks", actor_name="check_monitors", args=([],), kwargs={},
                                         options={}, message_timestamp=stamp + n))
    dramatiq.set_broker(waiting)
    try:
        samples = scrape(client)
    finally:
        dramatiq.set_broker(broker)
        waiting.close()
    assert value(samples, "vigil_queue_depth", queue="checks") == 3
    assert 30 <= value(samples, "vigil_queue_oldest_age_seconds", queue="checks") < 60
    assert value(samples, "vigil_queue_depth", queue="deliveries") == 0
    assert value(samples, "vigil_queue_oldest_age_seconds", queue="deliveries") == 0


def test_scheduler_lag_is_how_long_the_most_overdue_monitor_waited(client, owner, pages):
    monitor_id = page_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    assert value(scrape(client), "vigil_scheduler_lag_seconds") == 0, "nothing is due yet"
    with db():
        Monitor.update(next_check_at=utcnow() - timedelta(seconds=120)).where(Monitor.id == monitor_id).execute()
    lag = value(scrape(client), "vigil_scheduler_lag_seconds")
    assert 120 <= lag < 180


def test_devices_online_counts_devices_that_polled_lately(client, owner):
    user = owner[0]
    assert value(scrape(client), "vigil_devices_online") == 0
    with db():
        seen, _ = add_device(user, "laptop", utcnow())
        quiet, _ = add_device(user, "server", utcnow())
        Device.update(last_seen_at=utcnow()).where(Device.id == seen.id).execute()
        Device.update(last_seen_at=utcnow() - timedelta(hours=1)).where(Device.id == quiet.id).execute()
    assert value(scrape(client), "vigil_devices_online") == 1


def test_metrics_token_is_required_once_set(client, reconfigure):
    reconfigure(METRICS_TOKEN="metrics-secret-123")
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic metrics-secret-123"}):
        refused = client.get("/metrics", headers=headers)
        assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer")
        assert "vigil_" not in refused.text
    samples = scrape(client, token="metrics-secret-123")
    assert ("vigil_checks_total", (("outcome", "quiet"),)) in samples


def test_metrics_are_open_without_a_token(client):
    samples = scrape(client)
    assert ("vigil_devices_online", ()) in samples and ("vigil_scheduler_lag_seconds", ()) in samples


def test_worker_process_counters_show_in_the_web_process(postgres, owner, pages, tmp_path):
    """`vigil web`, `vigil worker` and `vigil scheduler` as processes: the quiet checks the worker process counts
    (the web process makes none) and the open event streams show in the web's /metrics."""
    url = pages.set("/mp", quote("95.10"))
    with running_stack(tmp_path, worker=True, scheduler=True, METRICS_TOKEN="mp-token") as stack:
        auth = {"Authorization": f"Bearer {owner[1]}"}
        created = requests.post(f"{stack.base}/api/tool/monitor", headers=auth, timeout=30, json={
            "action": "monitor_create", "context": {"conversation_id": "mp", "channel": "chat", "agent_id": "a"},
            "arguments": {"description": "ACMEB below 90", "source": {"type": "page", "url": url, "selector": "#price"},
                          "check": {"type": "threshold", "op": "<", "value": 90}, "interval": "1s"}}).json()
        assert created["ok"], created

        def metrics() -> dict:
            response = requests.get(f"{stack.base}/metrics", headers={"Authorization": "Bearer mp-token"}, timeout=30)
            assert response.status_code == 200, response.text
            return parse(response.text)

        wait_for(lambda: value(metrics(), "vigil_checks_total", outcome="quiet") >= 2, 60,
                 f"the worker's quiet checks never showed in the web's /metrics:\n{stack.log_tails()}")
        samples = metrics()
        assert all(("vigil_queue_depth", (("queue", queue),)) in samples for queue in QUEUES), "read from Redis"
        files = sorted(p.name for p in (tmp_path / "data" / "metrics").glob("counter_*.db"))
        assert len(files) >= 2, files  # the web's and the worker process's (and the scheduler's)
        with requests.get(f"{stack.base}/api/events", headers=auth, stream=True, timeout=30) as stream:
            lines = stream.iter_lines()  # kept: dropping the generator would close the connection
            assert next(lines) == b": connected"
            assert value(metrics(), "vigil_sse_clients") == 1
        wait_for(lambda: value(metrics(), "vigil_sse_clients") == 0, 30, "the closed stream was still counted")


def test_dead_processes_counters_are_folded_and_their_live_gauges_dropped(tmp_path):
    """A process killed without its exit hooks (os._exit, as SIGKILL) and one that exited: the next process to
    start folds both counters into the archive, so the total stays, and drops their open-stream gauges."""
    import subprocess
    import sys

    script = ("import os, sys\n"
              "from adapters.settings import Settings\n"
              "from adapters.metrics_dir import prepare\n"
              f"prepare(Settings(METRICS_DIR={str(tmp_path)!r}, SECRET_KEY='x'))\n"
              "from adapters import metrics\n"
              "for _ in range(int(sys.argv[1])): metrics.count_check('quiet')\n"
              "metrics.SSE_CLIENTS.inc()\n"
              "if sys.argv[2] == 'kill': os._exit(0)\n"
              "if sys.argv[2] == 'scrape': sys.stdout.write(metrics.exposition().decode())\n")

    def run(*args: str) -> str:
        done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    run("3", "kill")
    assert len(list(tmp_path.glob("counter_*.db"))) == 1 and len(list(tmp_path.glob("gauge_livesum_*.db"))) == 1
    run("2", "exit")
    assert {p.name for p in tmp_path.glob("*.db")} >= {"counter_archive.db"}, "the killed one's counters, folded"
    assert list(tmp_path.glob("gauge_livesum_*.db")) == [], "the killed one's gauge dropped; the other dropped its own"
    samples = parse(run("1", "scrape"))
    assert value(samples, "vigil_checks_total", outcome="quiet") == 6
    assert value(samples, "vigil_sse_clients") == 1, "only the scraping process's own open stream"
    left = {p.name for p in tmp_path.glob("*.db")}
    assert "counter_archive.db" in left and len(left) == 2, "the archive and the last process's counters: " + str(left)


def test_an_unusable_metrics_dir_is_logged_and_the_process_counts_for_itself(tmp_path):
    import subprocess
    import sys

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    script = ("from adapters.settings import Settings\n"
              "from adapters.metrics_dir import prepare\n"
              f"assert prepare(Settings(METRICS_DIR={str(blocker / 'metrics')!r}, SECRET_KEY='x')) == ''\n"
              "from adapters import metrics\n"
              "metrics.count_check('quiet')\n"
              "assert not metrics.multiprocess()\n"
              "print(metrics.exposition().decode())\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "METRICS_DIR" in done.stderr and "can't be used" in done.stderr
    assert value(parse(done.stdout), "vigil_checks_total", outcome="quiet") == 1
