"""What an operator's tools call: /healthz (the process serves), /readyz (it can work), /metrics (Prometheus).

docs/operations.md describes each, the metrics table and the scrape config.
"""

from __future__ import annotations

import logging
import time

import dramatiq
from litestar import Request, Response, get
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.core import GaugeMetricFamily

from adapters.logs import first_line
from adapters.metrics import exposition
from app.auth import bearer_token
from engine.tokens import same_secret
from models import connection, database, utcnow
from models.claims import oldest_due
from models.devices import count_online
from tasks.broker import UNAVAILABLE
from tasks.queues import queue_stats
from tasks.runtime import current

log = logging.getLogger(__name__)
NO_STORE = {"Cache-Control": "no-store"}


@get("/healthz", include_in_schema=False)
async def healthz() -> Response:
    """200 while this process serves requests; it asks nothing of the database or Redis (that is /readyz)."""
    return Response({"ok": True}, headers=NO_STORE)


@get("/readyz", sync_to_thread=True, include_in_schema=False)
def readyz() -> Response:
    """200 while this web process reaches its database and (in production) Redis; 503 saying which it can't."""
    parts = {"database": _reachable(_ping_database), "redis": _reachable(current().bus.ping)}
    ok = all(state == "ok" for state in parts.values())
    return Response({"ok": ok, **parts}, status_code=200 if ok else 503,
                    headers={**NO_STORE, **({} if ok else {"Retry-After": "5"})})


def _ping_database() -> None:
    with connection():
        database.execute_sql("SELECT 1")


def _reachable(ping) -> str:
    try:
        ping()
    except UNAVAILABLE as exc:
        return f"unreachable: {first_line(exc)}"
    return "ok"


@get("/metrics", sync_to_thread=True, include_in_schema=False)
def metrics(request: Request) -> Response:
    """The counters of this machine's processes and the figures read at scrape; METRICS_TOKEN guards it."""
    token = current().settings.METRICS_TOKEN
    if token and not same_secret(bearer_token(request) or "", token):
        return Response({"detail": "Send Authorization: Bearer <METRICS_TOKEN>."}, status_code=401,
                        headers={**NO_STORE, "WWW-Authenticate": 'Bearer realm="vigil-metrics"'})
    return Response(exposition(Scraped()), media_type=CONTENT_TYPE_LATEST, headers=NO_STORE)


class Scraped:
    """Figures read when Prometheus scrapes: the same from every web process, since they live in the database
    and the broker. A part that can't be read (an outage) is left out and logged; the counters still answer."""

    def collect(self):
        yield from self._database()
        yield from self._queues()

    def _database(self):
        runtime, now = current(), utcnow()
        try:
            with connection():  # two indexed reads, and the connection goes back before Redis is asked anything
                due, online = oldest_due(now), count_online(now, runtime.presence)
        except UNAVAILABLE as exc:
            log.warning("/metrics: the database did not answer: %s", first_line(exc))
            return
        yield GaugeMetricFamily("vigil_scheduler_lag_seconds", "How long the most overdue active polled monitor "
                                "has been due and not claimed (0 when none is due).",
                                value=max((now - due).total_seconds(), 0.0) if due else 0.0)
        yield GaugeMetricFamily("vigil_devices_online", "Paired devices whose runner polled within "
                                "DEVICE_ONLINE_SECONDS.", value=online)

    def _queues(self):
        try:
            stats = queue_stats(dramatiq.get_broker(), current().settings.REDIS_URL, time.time())
        except UNAVAILABLE as exc:
            log.warning("/metrics: the broker did not answer: %s", first_line(exc))
            return
        depth = GaugeMetricFamily("vigil_queue_depth", "Messages waiting in a queue for a worker.",
                                  labels=["queue"])
        age = GaugeMetricFamily("vigil_queue_oldest_age_seconds", "How long the next message of a queue has "
                                "waited (0 when the queue is empty).", labels=["queue"])
        for stat in stats:
            depth.add_metric([stat.queue], stat.depth)
            age.add_metric([stat.queue], stat.oldest_age)
        yield depth
        yield age
