"""CEL conditions that would run for minutes: stopped at their deadline with a clear error, while the worker
keeps checking other monitors and taking trigger deliveries.

(The evaluator itself, and that it leaves the GIL free, is unit tested in tests/unit/test_checks_cel.py.)
"""

from __future__ import annotations

import json

from tests.integration.helpers import monitor_row, tool, wakes

#: 10^9 steps over a 1,000-item list: minutes of native code, holding the GIL, if run in the worker itself
CUBIC = "data.items.all(x, data.items.all(y, data.items.all(z, z >= 0.0)))"
STOPPED = "took longer than 2 s to evaluate and was stopped"


def items(n: int, extra: int = 0) -> str:
    return json.dumps({"items": list(range(n)), "extra": extra})


def create(client, token: str, source: dict, check: dict | None = None) -> str:
    arguments = {"description": "watch it", "source": source, "interval": "1m", "max_wakes": 5}
    body = tool(client, token, "monitor_create", {**arguments, **({"check": check} if check else {})}).json()
    assert body["ok"], body
    return body["result"]["monitor_id"]


def test_a_polled_condition_past_its_deadline_is_recorded_and_the_worker_checks_on(client, owner, pages,
                                                                                  run_due_checks, reconfigure):
    reconfigure(MONITOR_MIN_INTERVAL_SECONDS=1)
    pages.set("/victim.json", items(3), content_type="application/json")
    pages.set("/bystander", "<p>deploy: running</p>")
    victim = create(client, owner[1], {"type": "json", "url": pages.url("/victim.json")},
                    {"type": "cel", "expr": CUBIC})
    bystander = create(client, owner[1], {"type": "page", "url": pages.url("/bystander")})

    pages.set("/victim.json", items(1000), content_type="application/json")
    pages.set("/bystander", "<p>deploy: finished</p>")
    run_due_checks()

    assert len(wakes(bystander)) == 1 and "finished" in wakes(bystander)[0].content
    row = monitor_row(victim)
    assert STOPPED in row.last_error and row.failure_count == 1 and wakes(victim) == []

    pages.set("/victim.json", items(1000, extra=1), content_type="application/json")
    run_due_checks()  # the evaluator was replaced: the next check is stopped the same way, not broken
    assert STOPPED in monitor_row(victim).last_error and monitor_row(victim).failure_count == 2


def test_a_delivery_whose_condition_overruns_tells_the_agent_once_and_others_still_wake(client, owner, drain):
    victim = tool(client, owner[1], "monitor_create", {
        "description": "the build list settles", "source": {"type": "webhook", "signature": "none"},
        "check": {"type": "cel", "expr": CUBIC}, "max_wakes": 5}).json()["result"]
    bystander = tool(client, owner[1], "monitor_create", {
        "description": "the deploy finishes", "source": {"type": "webhook", "signature": "none"},
        "max_wakes": 5}).json()["result"]
    for link in (victim, bystander):
        assert client.post(link["url"][link["url"].index("/api/"):], content=items(1000),
                           headers={"Content-Type": "application/json"}).status_code == 202
    drain()
    [told] = wakes(victim["monitor_id"])
    assert "did not fit its check" in told.content and STOPPED in told.content
    assert len(wakes(bystander["monitor_id"])) == 1
