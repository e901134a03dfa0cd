"""The default install under load: `vigil serve --local-runner` on SQLite, a stream watcher printing while slow
webhook checks and creates write at the same time. Every line arrives once, and nothing answers "database is
locked" (the runner would have seen it as a 503 and waited)."""

from __future__ import annotations

import re
import threading
import time

import requests

from tests.integration.helpers import wait_for
from tests.processes import VIGIL, serve_vigil, stop, vigil

#: lines the watcher prints; bursts of them go out between the rounds of contention
LINES = 60
BURST = 10


def _owner_session(base: str, email: str) -> requests.Session:
    session = requests.Session()
    csrf = re.search(r'name="_csrf" value="([^"]+)"', session.get(f"{base}/login").text).group(1)
    answer = session.post(f"{base}/login", data={"email": email, "password": "a-good-password", "_csrf": csrf})
    assert answer.ok, answer.text
    return session


def _approve(base: str, session: requests.Session, created: dict) -> None:
    page = session.get(f"{base}/commands/{created['monitor_id']}").text
    csrf = re.search(r'"X-CSRF-Token": "([^"]+)"', page).group(1)
    approved = session.post(f"{base}/api/monitors/{created['monitor_id']}/approve", headers={"X-CSRF-Token": csrf})
    assert approved.status_code == 200, approved.text


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


def test_embedded_stream_under_contention_delivers_every_line_once_without_locked_errors(tmp_path):
    env = {"VIGIL_DATA_DIR": str(tmp_path / "data"), "DATABASE_URL": "", "REDIS_URL": "",
           "MONITOR_MIN_INTERVAL_SECONDS": "1", "SCHEDULER_TICK_SECONDS": "0.2"}
    log = tmp_path / "serve.log"
    served = serve_vigil([VIGIL, "serve", "--local-runner"], env, log)
    base, process = served.base, served.process
    output = tmp_path / "app.log"
    output.write_text("")
    try:
        vigil("user", "create", "me@example.com", "--password", "a-good-password", env=env)
        token = vigil("token", "create", "--user", "me@example.com", env=env).strip().splitlines()[-1]
        auth = {"Authorization": f"Bearer {token}"}
        wait_for(lambda: [d for d in requests.get(f"{base}/api/devices", headers=auth).json()["devices"]
                          if d["name"] == "local" and d["online"]])
        started = requests.post(f"{base}/api/tool/monitor", headers=auth, json={
            "action": "start", "context": {"conversation_id": "laptop-9"},
            "arguments": {"command": f"tail -n +1 -F {output}", "description": "the app log"}}).json()
        assert started["ok"], started
        _approve(base, _owner_session(base, "me@example.com"), started["result"])
        links = [_slow_link(base, auth, n) for n in range(4)]

        answers: list[int] = []
        for round_no in range(LINES // BURST):
            with output.open("a") as sink:
                sink.writelines(f"line-{n}\n" for n in range(round_no * BURST + 1, (round_no + 1) * BURST + 1))
            _contend(base, auth, links, round_no, answers)
            time.sleep(0.3)

        printed = wait_for(lambda: (lambda got: got if len(set(got)) == LINES else None)(_printed(base, auth)),
                           timeout=60)
        time.sleep(1)  # anything sent twice would have arrived by now
        printed = _printed(base, auth)
        assert sorted(map(int, printed)) == list(range(1, LINES + 1)), "each line arrives exactly once"
        assert set(answers) <= {200, 201, 202}, answers
    finally:
        stop(process)
    text = log.read_text()
    assert "database is locked" not in text
    assert "503" not in text, [line for line in text.splitlines() if "503" in line][:5]
