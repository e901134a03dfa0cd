"""Exactly once under faults: 1,000 trigger deliveries and 200 polled page changes reach a production-mode Vigil
(web, worker, scheduler as separate processes on PostgreSQL and Redis) while the worker is SIGKILLed three times,
Redis is restarted once (losing every queued message: it keeps nothing on disk) and PostgreSQL is restarted once.

Senders behave like real ones: a 503 or a dropped connection is tried again with the same Idempotency-Key. Every
answer is recorded; afterwards each delivery was answered 202 in the end, only ever refused with a 503 before that,
and woke its conversation exactly once; each changed page woke its monitor exactly once.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import pytest
import requests

from tests.reliability.services import ensure_running
from tests.reliability.stack import Stack, new_stack
from tests.servers import PageServer

pytestmark = pytest.mark.reliability

HOOKS = 100                 #: webhook monitors …
PER_HOOK = 10               #: … each sent this many distinct facts: 1,000 deliveries
PAGES = 200                 #: polled monitors, each of whose pages changes once during the faults
PAGE_INTERVAL = "3s"
SENDERS = 6                 #: client threads
SEND_SECONDS = 70.0         #: the deliveries are spread evenly over this long
PAGE_CHANGES = (5.0, 62.0)  #: the page changes are spread over this part of it
#: (seconds after the first delivery, fault): the controller injects each at its time
FAULTS = ((10.0, "kill worker"), (22.0, "restart redis"), (33.0, "kill worker"), (45.0, "restart postgres"),
          (57.0, "kill worker"))
SETTLE_SECONDS = 120.0      #: bound for everything to be woken after the last delivery was answered
GIVE_UP_SECONDS = 120.0     #: a sender stops retrying one delivery after this long
FACT = re.compile(r"fact-(\d{4})")


@dataclass
class Delivery:
    n: int
    url: str
    answers: list = field(default_factory=list)  #: (seconds since start, status code or exception name, headers, body)

    @property
    def accepted(self) -> bool:
        return any(answer[1] == 202 for answer in self.answers)


@dataclass
class Run:
    stack: Stack
    deliveries: list[Delivery]
    page_monitors: dict[str, int]      #: monitor id -> page number
    timeline: list[tuple[float, str]]
    settled: bool
    problems: list[str]


def _send(delivery: Delivery, session: requests.Session, start: float) -> None:
    """POST until a 202, like a real sender: a 503 or a lost connection is retried with the same key."""
    deadline = time.monotonic() + GIVE_UP_SECONDS
    body = {"fact": f"fact-{delivery.n:04d}", "sent_by": "reliability test"}
    while time.monotonic() < deadline:
        try:
            response = session.post(delivery.url, json=body, headers={"Idempotency-Key": f"delivery-{delivery.n}"},
                                    timeout=30)
        except requests.RequestException as exc:
            delivery.answers.append((time.monotonic() - start, type(exc).__name__, {}, str(exc)[:200]))
            time.sleep(0.5)
            continue
        delivery.answers.append((time.monotonic() - start, response.status_code,
                                 {name.lower(): value for name, value in response.headers.items()},
                                 response.text[:300]))
        if response.status_code < 500:  # 202, or an answer that retrying would not change
            return
        time.sleep(min(float(response.headers.get("Retry-After", "1") or 1), 1.0) / 2)


def _sender(mine: list[Delivery], start: float) -> None:
    session = requests.Session()
    for delivery in mine:
        due = start + delivery.n * SEND_SECONDS / (HOOKS * PER_HOOK)
        time.sleep(max(0.0, due - time.monotonic()))
        _send(delivery, session, start)


def _change_pages(pages, count: int, start: float) -> None:
    first, last = PAGE_CHANGES
    for i in range(count):
        time.sleep(max(0.0, start + first + i * (last - first) / count - time.monotonic()))
        pages.set(f"/page/{i}", f"<html><body><p>page {i}: status changed to shipped</p></body></html>")


def _inject_faults(stack: Stack, pg, rds, start: float, timeline: list) -> None:
    for at, fault in FAULTS:
        time.sleep(max(0.0, start + at - time.monotonic()))
        timeline.append((time.monotonic() - start, f"{fault}: begin"))
        if fault == "kill worker":
            stack.kill("worker")
            time.sleep(1.5)
            stack.start_worker()
        elif fault == "restart redis":
            rds.restart(down_seconds=2.0)
        elif fault == "restart postgres":
            pg.restart(down_seconds=3.0)
        timeline.append((time.monotonic() - start, f"{fault}: end"))


def _woken_facts(stack: Stack) -> Counter:
    rows = stack.query("SELECT m.content FROM wakes w JOIN messages m ON m.id = w.message_id "
                       "JOIN monitors o ON o.id = w.monitor_id WHERE o.polled = false")
    return Counter(int(match.group(1)) for (content,) in rows for match in [FACT.search(content)] if match)


def _polled_wakes(stack: Stack) -> dict[str, int]:
    rows = stack.query("SELECT o.id, count(w.id) FROM monitors o LEFT JOIN wakes w ON w.monitor_id = o.id "
                       "WHERE o.polled GROUP BY o.id")
    return dict(rows)


def _settle(stack: Stack, accepted: int) -> bool:
    """Wait (bounded) until every accepted delivery is processed and woken and every page change is woken."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < deadline:
        try:
            facts = _woken_facts(stack)
            polled = _polled_wakes(stack)
            [(unprocessed,)] = stack.query("SELECT count(*) FROM deliveries WHERE processed_at IS NULL")
        except Exception:  # noqa: BLE001 — the test's own reads may meet the tail of a fault
            time.sleep(1)
            continue
        if len(facts) >= accepted and unprocessed == 0 and all(count >= 1 for count in polled.values()):
            return True
        time.sleep(1)
    return False


@pytest.fixture(scope="module")
def run(pg_server, redis_server):
    """Build the stack and the monitors, then send, change pages and inject faults at once; yields what happened."""
    ensure_running(pg_server, redis_server)
    pages = PageServer().start()
    stack = new_stack(pg_server, redis_server)
    try:
        stack.start_web()
        stack.start_worker()
        stack.start_scheduler()
        deliveries = []
        for hook in range(HOOKS):
            link = stack.tool(f"rel-hook-{hook}", description=f"hook {hook} calls back",
                              source={"type": "webhook"}, max_wakes=PER_HOOK * 2)
            deliveries += [Delivery(hook * PER_HOOK + k, link["url"]) for k in range(PER_HOOK)]
        # Deliveries to one link are spread over the run, not sent back to back.
        deliveries.sort(key=lambda d: (d.n % PER_HOOK, d.n // PER_HOOK))
        for position, delivery in enumerate(deliveries):
            delivery.n = position
        page_monitors = {}
        for i in range(PAGES):
            url = pages.set(f"/page/{i}", f"<html><body><p>page {i}: status pending</p></body></html>")
            result = stack.tool(f"rel-page-{i}", description=f"page {i} changes", source={"type": "page", "url": url},
                                check={"type": "change"}, interval=PAGE_INTERVAL, max_wakes=5)
            page_monitors[result["monitor_id"]] = i

        timeline: list[tuple[float, str]] = []
        start = time.monotonic() + 1.0
        threads = [threading.Thread(target=_sender, args=(deliveries[k::SENDERS], start), daemon=True)
                   for k in range(SENDERS)]
        threads.append(threading.Thread(target=_change_pages, args=(pages, PAGES, start), daemon=True))
        threads.append(threading.Thread(target=_inject_faults, args=(stack, pg_server, redis_server, start, timeline),
                                        daemon=True))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(SEND_SECONDS + GIVE_UP_SECONDS + 60)
        problems = [f"{thread.name} still running" for thread in threads if thread.is_alive()]
        timeline.append((time.monotonic() - start, "all sent"))
        settled = _settle(stack, sum(d.accepted for d in deliveries))
        timeline.append((time.monotonic() - start, f"settled={settled}"))
        yield Run(stack, deliveries, page_monitors, timeline, settled, problems)
    finally:
        problems = stack.stop_all()
        pages.stop()
        stack.remove(keep=bool(problems))


def _report(run: Run) -> str:
    events = ", ".join(f"{at:.1f}s {what}" for at, what in run.timeline)
    return f"timeline: {events}\n{run.stack.log_tails(2500)}"


def test_every_delivery_is_answered_202_or_told_to_retry(run):
    assert not run.problems, run.problems
    refused = Counter()
    wrong = []
    for delivery in run.deliveries:
        for at, status, headers, body in delivery.answers:
            if status == 202:
                continue
            refused[status] += 1
            if status != 503:
                wrong.append(f"delivery {delivery.n} at {at:.1f}s: {status} {body}")
            elif "retry-after" not in headers or "detail" not in body:
                wrong.append(f"delivery {delivery.n} at {at:.1f}s: a 503 without Retry-After or detail: {body}")
    never = [d.n for d in run.deliveries if not d.accepted]
    print(f"refusals by status: {dict(refused)}; timeline: {run.timeline}")
    assert not wrong, f"{len(wrong)} answers were neither 202 nor a 503 to retry:\n" + "\n".join(wrong[:20])
    assert not never, f"{len(never)} deliveries never got a 202 within {GIVE_UP_SECONDS}s: {never[:20]}"


def test_each_accepted_delivery_wakes_exactly_once(run):
    accepted = {d.n for d in run.deliveries if d.accepted}
    facts = _woken_facts(run.stack)
    duplicated = {n: count for n, count in facts.items() if count > 1}
    lost = sorted(accepted - set(facts))
    extra = sorted(set(facts) - accepted)
    [(stored, unprocessed)] = run.stack.query(
        "SELECT count(*), count(*) FILTER (WHERE processed_at IS NULL) FROM deliveries")
    assert not duplicated and not lost and not extra, (
        f"settled={run.settled}; {len(accepted)} accepted, {sum(facts.values())} wakes; duplicated: "
        f"{dict(list(duplicated.items())[:20])}; lost: {lost[:20]} ({len(lost)}); woken but never accepted: "
        f"{extra[:20]}; deliveries stored {stored}, unprocessed {unprocessed}\n{_report(run)}")
    assert sum(facts.values()) == len(run.deliveries) == HOOKS * PER_HOOK
    assert (stored, unprocessed) == (HOOKS * PER_HOOK, 0)


def test_each_changed_page_wakes_its_monitor_exactly_once(run):
    polled = _polled_wakes(run.stack)
    wrong = {run.page_monitors[monitor_id]: count for monitor_id, count in polled.items() if count != 1}
    assert len(polled) == PAGES
    assert not wrong, (f"settled={run.settled}; pages whose monitor did not wake exactly once (page: wakes): "
                       f"{dict(sorted(wrong.items())[:30])} ({len(wrong)} of {PAGES})\n{_report(run)}")


def test_web_worker_and_scheduler_live_through_the_faults(run):
    assert run.stack.alive() == {"web": True, "scheduler": True, "worker": True}, _report(run)
    errors = run.stack.grep_logs("Traceback")
    print("\n".join(errors[:20]))
