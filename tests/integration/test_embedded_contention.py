"""The default install under load (the `laptop` fixture, tests/integration/embedded.py: `vigil serve
--local-runner` on SQLite): a stream watcher printing while slow webhook checks and creates write at the same time.
Every line arrives once, and nothing answers "database is locked" (the runner would have seen it as a 503)."""

from __future__ import annotations

import re
import threading
import time

import requests

from tests.integration.embedded import watch
from tests.integration.helpers import wait_for

#: lines the watcher prints; bursts of them go out between the rounds of contention
LINES = 60
BURST = 10


def _slow_link(base: str, auth: dict, n: int) -> str:
    """A trigger link whose regex check backtracks until the regex time limit (about a second a delivery)."""
    created = requests.post(f"{base}/api/tool/monitor", headers=auth, json={
        "action": "monitor_create", "context": {"conversation_id": f"hooks-{n}"},
        "arguments": {"description": f"hook {n}", "source": {"type": "webhook", "signature": "none"},
                      "check": {"type": "regex", "pattern": "(a|aa)+$"}, "max_wakes": 50}}).json()
    assert created["ok"], created
    return base + created["result"]["url"][created["result"]["url"].index("/api/triggers/"):]


def _contend(base: str, auth: dict, links: list[str], round_no: int, answers: list) -> None:
    """Four slow deliveries and four creates, all at once."""
    def deliver(link: str) -> None:
        answers.append(requests.post(link, data=("a" * 40 + "!").encode(),
                                     headers={"Content-Type": "text/plain", "Idempotency-Key": f"{round_no}"}
                                     ).status_code)

    def create(n: int) -> None:
        answers.append(requests.post(f"{base}/api/tool/monitor", headers=auth, json={
            "action": "monitor_create", "context": {"conversation_id": f"more-{round_no}-{n}"},
            "arguments": {"description": "a deploy", "source": {"type": "webhook", "signature": "none"}}}
        ).status_code)

    threads = [threading.Thread(target=deliver, args=(link,)) for link in links]
    threads += [threading.Thread(target=create, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)


def _printed(base: str, auth: dict) -> list[str]:
    messages = requests.get(f"{base}/api/conversations/laptop-9/messages?after=0", headers=auth).json()["messages"]
    return re.findall(r"line-(\d+)\b", "\n".join(m["content"] for m in messages
                                                 if m["metadata"]["wake"]["source"] == "command"))


def test_embedded_stream_under_contention_delivers_every_line_once_without_locked_errors(laptop, tmp_path):
    base, auth = laptop.base, laptop.auth
    output = tmp_path / "app.log"
    output.write_text("")
    watch(laptop, "laptop-9", f"tail -n +1 -F {output}")
    links = [_slow_link(base, auth, n) for n in range(4)]

    answers: list[int] = []
    for round_no in range(LINES // BURST):
        with output.open("a") as sink:
            sink.writelines(f"line-{n}\n" for n in range(round_no * BURST + 1, (round_no + 1) * BURST + 1))
        _contend(base, auth, links, round_no, answers)
        time.sleep(0.3)

    wait_for(lambda: len(set(_printed(base, auth))) == LINES, timeout=60)
    time.sleep(1)  # anything sent twice would have arrived by now
    assert sorted(map(int, _printed(base, auth))) == list(range(1, LINES + 1)), "each line arrives exactly once"
    assert set(answers) <= {200, 201, 202}, answers
    text = laptop.log.read_text()
    assert "database is locked" not in text
    assert " 503 " not in text, [line for line in text.splitlines() if " 503 " in line][:5]
