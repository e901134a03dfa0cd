"""What a newcomer runs first: `vigil serve` on SQLite with nothing else installed, from creation to wake."""

from __future__ import annotations

import json
import threading

import pytest
import requests

from tests.integration.helpers import wait_for
from tests.processes import serve_vigil, stop, vigil, VIGIL


@pytest.fixture()
def embedded(tmp_path):
    env = {"VIGIL_DATA_DIR": str(tmp_path / "data"), "FETCH_ALLOW_LOOPBACK": "true",
           "MONITOR_MIN_INTERVAL_SECONDS": "1", "SCHEDULER_TICK_SECONDS": "0.2",
           "DATABASE_URL": "", "REDIS_URL": ""}
    log = tmp_path / "serve.log"
    served = serve_vigil([VIGIL, "serve"], env, log)
    base, process = served.base, served.process
    yield base, env, process, log
    stop(process)


def collect_events(base: str, token: str, into: list, ready: threading.Event) -> None:
    try:
        read_events(base, token, into, ready)
    except requests.RequestException:
        pass  # the server went away at the end of the test


def read_events(base: str, token: str, into: list, ready: threading.Event) -> None:
    with requests.get(f"{base}/api/events", headers={"Authorization": f"Bearer {token}"}, stream=True,
                      timeout=(5, 60)) as response:
        event = None
        for line in response.iter_lines(decode_unicode=True):
            if line.startswith(": connected"):
                ready.set()
            elif line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event:
                into.append((event, json.loads(line[6:])))


def test_embedded_mode_creates_checks_and_wakes(embedded, pages, tmp_path):
    base, env, process, log = embedded
    assert "No account yet" in log.read_text() and "vigil token create" in log.read_text()
    vigil("user", "create", "me@example.com", "--password", "a-good-password", env=env)
    token = vigil("token", "create", "--user", "me@example.com", env=env).strip().splitlines()[-1]
    assert token.startswith("vgl_")
    assert "vigil.db" in "".join(p.name for p in (tmp_path / "data").iterdir())

    events: list = []
    ready = threading.Event()
    threading.Thread(target=collect_events, args=(base, token, events, ready), daemon=True).start()
    assert ready.wait(10), "the event stream did not open"

    url = pages.set("/status", "<h1>Deploy</h1><p>running</p>")
    created = requests.post(f"{base}/api/tool/monitor", headers={"Authorization": f"Bearer {token}"}, json={
        "action": "monitor_create", "context": {"conversation_id": "laptop-1", "channel": "chat"},
        "arguments": {"description": "the deploy finishes", "source": {"type": "page", "url": url},
                      "interval": "1s"}}).json()
    assert created["ok"] and created["result"]["baseline"].startswith("currently: Deploy")
    monitor_id = created["result"]["monitor_id"]

    wait_for(lambda: sum(1 for name, data in events if name == "monitor.updated"
                         and data["monitor_id"] == monitor_id and data["check_count"] >= 3))
    pages.set("/status", "<h1>Deploy</h1><p>finished</p>")
    messages = wait_for(lambda: requests.get(f"{base}/api/conversations/laptop-1/messages?after=0",
                                             headers={"Authorization": f"Bearer {token}"}).json()["messages"])
    [wake] = messages
    assert "+ finished" in wake["content"] and wake["metadata"]["wake"]["ref_id"] == monitor_id
    done = wait_for(lambda: [d for n, d in events if n == "monitor.updated" and d["status"] == "done"])
    assert done[0]["wakes_left"] == 0 and done[0]["conversation_id"] == "laptop-1"
    assert any(name == "message.created" and data["id"] == wake["id"] for name, data in events)
    assert stop(process) == 0, "SIGTERM with an open event stream must still end the server cleanly"


def test_embedded_trigger_link_wakes_once_and_ends_at_max_hits(embedded):
    """The SQLite path of a delivery: stored once per sender id, woken, and refused once used up."""
    base, env, process, log = embedded
    vigil("user", "create", "hooks@example.com", "--password", "a-good-password", env=env)
    token = vigil("token", "create", "--user", "hooks@example.com", env=env).strip().splitlines()[-1]
    created = requests.post(f"{base}/api/tool/monitor", headers={"Authorization": f"Bearer {token}"}, json={
        "action": "monitor_create", "context": {"conversation_id": "laptop-2", "channel": "chat"},
        "arguments": {"description": "the deploy webhook fires",
                      "source": {"type": "webhook", "signature": "none", "max_hits": 2}, "max_wakes": 5}}).json()
    assert created["ok"], created
    link = base + created["result"]["url"][created["result"]["url"].index("/api/triggers/"):]
    answers = [requests.post(link, json={"n": n}, headers={"Idempotency-Key": key}).status_code
               for n, key in ((1, "a"), (1, "a"), (2, "b"), (3, "c"))]
    assert answers == [202, 202, 202, 404]  # a repeat is accepted and ignored; the third sender is past max_hits
    messages = wait_for(lambda: (lambda m: m if len(m) == 2 else None)(requests.get(
        f"{base}/api/conversations/laptop-2/messages?after=0", headers={"Authorization": f"Bearer {token}"}
    ).json()["messages"]))
    assert ['"n": 1' in messages[0]["content"], '"n": 2' in messages[1]["content"]] == [True, True]
    assert all(m["metadata"]["wake"]["source"] == "trigger" for m in messages)


def test_embedded_local_runner_runs_an_approved_command_on_this_machine(tmp_path, pages):
    """`vigil serve --local-runner`: device "local" of the first account, no pairing; a watcher approved by the
    owner in the browser session runs here and its line wakes the conversation."""
    import re

    env = {"VIGIL_DATA_DIR": str(tmp_path / "data"), "DATABASE_URL": "", "REDIS_URL": "",
           "MONITOR_MIN_INTERVAL_SECONDS": "1", "SCHEDULER_TICK_SECONDS": "0.2"}
    log = tmp_path / "serve.log"
    served = serve_vigil([VIGIL, "serve", "--local-runner"], env, log)
    base, process = served.base, served.process
    try:
        assert "Local runner on" in log.read_text()
        vigil("user", "create", "me@example.com", "--password", "a-good-password", env=env)
        token = vigil("token", "create", "--user", "me@example.com", env=env).strip().splitlines()[-1]
        auth = {"Authorization": f"Bearer {token}"}
        device = wait_for(lambda: [d for d in requests.get(f"{base}/api/devices", headers=auth).json()["devices"]
                                   if d["name"] == "local" and d["online"]])
        assert device[0]["approval_mode"] == "ask"
        created = requests.post(f"{base}/api/tool/monitor", headers=auth, json={
            "action": "start", "context": {"conversation_id": "laptop-3"},
            "arguments": {"command": "echo built-on-this-laptop", "description": "the build"}}).json()
        assert created["ok"] and created["result"]["status"] == "awaiting_approval", created
        session = requests.Session()
        csrf = re.search(r'name="_csrf" value="([^"]+)"', session.get(f"{base}/login").text).group(1)
        session.post(f"{base}/login", data={"email": "me@example.com", "password": "a-good-password", "_csrf": csrf})
        page = session.get(created["result"]["approve_url"].replace("http://127.0.0.1:8000", base)).text
        assert "echo built-on-this-laptop" in page
        csrf = re.search(r'"X-CSRF-Token": "([^"]+)"', page).group(1)
        approved = session.post(f"{base}/api/monitors/{created['result']['monitor_id']}/approve",
                                headers={"X-CSRF-Token": csrf})
        assert approved.status_code == 200, approved.text
        messages = wait_for(lambda: [m for m in requests.get(f"{base}/api/conversations/laptop-3/messages?after=0",
                                                             headers=auth).json()["messages"]
                                     if "built-on-this-laptop" in m["content"]])
        assert messages[0]["metadata"]["wake"]["source"] == "command"
        wait_for(lambda: any("watcher exited (code 0)" in m["content"] for m in requests.get(
            f"{base}/api/conversations/laptop-3/messages?after=0", headers=auth).json()["messages"]))
    finally:
        assert stop(process) == 0
