"""The default install as a test drives it: `vigil serve --local-runner` on SQLite, an account, a runtime token,
the owner signed in, and watchers (seed 002's `start`) approved by that owner."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tests.integration.helpers import wait_for
from tests.processes import VIGIL, serve_vigil, stop, vigil

EMAIL, PASSWORD = "me@example.com", "a-good-password"


@dataclass
class Laptop:
    base: str
    auth: dict
    session: requests.Session  # the owner's browser session
    log: Path  # what `vigil serve` (and its local runner) logged


@pytest.fixture()
def laptop(tmp_path):
    """A Laptop whose local runner is online; the server is stopped after the test, and must never have logged
    "database is locked"."""
    env = {"VIGIL_DATA_DIR": str(tmp_path / "data"), "DATABASE_URL": "", "REDIS_URL": "",
           "MONITOR_MIN_INTERVAL_SECONDS": "1", "SCHEDULER_TICK_SECONDS": "0.2"}
    log = tmp_path / "serve.log"
    served = serve_vigil([VIGIL, "serve", "--local-runner"], env, log)
    try:
        vigil("user", "create", EMAIL, "--password", PASSWORD, env=env)
        token = vigil("token", "create", "--user", EMAIL, env=env).strip().splitlines()[-1]
        auth = {"Authorization": f"Bearer {token}"}
        wait_for(lambda: [d for d in requests.get(f"{served.base}/api/devices", headers=auth).json()["devices"]
                          if d["name"] == "local" and d["online"]])
        yield Laptop(served.base, auth, owner_session(served.base), log)
    finally:
        stop(served.process)
    assert "database is locked" not in log.read_text()


def owner_session(base: str) -> requests.Session:
    session = requests.Session()
    csrf = re.search(r'name="_csrf" value="([^"]+)"', session.get(f"{base}/login").text).group(1)
    answer = session.post(f"{base}/login", data={"email": EMAIL, "password": PASSWORD, "_csrf": csrf})
    assert answer.ok, answer.text
    return session


def watch(laptop: Laptop, conversation: str, command: str) -> str:
    """Start a watcher (seed 002's `start`) in `conversation` and approve it as the owner; its monitor id."""
    started = requests.post(f"{laptop.base}/api/tool/monitor", headers=laptop.auth, json={
        "action": "start", "context": {"conversation_id": conversation},
        "arguments": {"command": command, "description": conversation}}).json()
    assert started["ok"], started
    monitor_id = started["result"]["monitor_id"]
    page = laptop.session.get(f"{laptop.base}/commands/{monitor_id}").text
    csrf = re.search(r'"X-CSRF-Token": "([^"]+)"', page).group(1)
    approved = laptop.session.post(f"{laptop.base}/api/monitors/{monitor_id}/approve",
                                   headers={"X-CSRF-Token": csrf})
    assert approved.status_code == 200, approved.text
    return monitor_id
