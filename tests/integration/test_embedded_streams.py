"""Seed 002's guards for a stream watcher, end to end on the default install: `vigil serve --local-runner` on
SQLite, the real runner running the command on this machine. A burst arrives in a few wakes (not one per 100
lines), a flood ends with the flood guard's notice at default settings (no hourly or daily cap gets there first),
and a line with no newline for 40,000 bytes arrives once, truncated."""

from __future__ import annotations

import re

import pytest
import requests

from tests.integration.helpers import wait_for
from tests.processes import VIGIL, serve_vigil, stop, vigil


@pytest.fixture()
def laptop(tmp_path):
    """(base, auth, session): the embedded server with its local runner online, an account, a token, and the
    owner signed in (commands on device "local" wait for the owner's approval by default)."""
    env = {"VIGIL_DATA_DIR": str(tmp_path / "data"), "DATABASE_URL": "", "REDIS_URL": "",
           "MONITOR_MIN_INTERVAL_SECONDS": "1", "SCHEDULER_TICK_SECONDS": "0.2"}
    log = tmp_path / "serve.log"
    served = serve_vigil([VIGIL, "serve", "--local-runner"], env, log)
    try:
        vigil("user", "create", "me@example.com", "--password", "a-good-password", env=env)
        token = vigil("token", "create", "--user", "me@example.com", env=env).strip().splitlines()[-1]
        auth = {"Authorization": f"Bearer {token}"}
        wait_for(lambda: [d for d in requests.get(f"{served.base}/api/devices", headers=auth).json()["devices"]
                          if d["name"] == "local" and d["online"]])
        session = requests.Session()
        csrf = re.search(r'name="_csrf" value="([^"]+)"', session.get(f"{served.base}/login").text).group(1)
        assert session.post(f"{served.base}/login", data={"email": "me@example.com", "password": "a-good-password",
                                                          "_csrf": csrf}).ok
        yield served.base, auth, session
    finally:
        stop(served.process)
    assert "database is locked" not in log.read_text()


def watch(laptop, conversation: str, command: str) -> None:
    """Start a watcher (seed 002's `start`) and approve it as the owner."""
    base, auth, session = laptop
    started = requests.post(f"{base}/api/tool/monitor", headers=auth, json={
        "action": "start", "context": {"conversation_id": conversation},
        "arguments": {"command": command, "description": conversation}}).json()
    assert started["ok"], started
    monitor_id = started["result"]["monitor_id"]
    page = session.get(f"{base}/commands/{monitor_id}").text
    csrf = re.search(r'"X-CSRF-Token": "([^"]+)"', page).group(1)
    approved = session.post(f"{base}/api/monitors/{monitor_id}/approve", headers={"X-CSRF-Token": csrf})
    assert approved.status_code == 200, approved.text


def wakes_until_ended(laptop, conversation: str) -> list[str]:
    """The conversation's wake texts, once the watch has said it ended."""
    base, auth, _ = laptop

    def ended():
        texts = [m["content"] for m in requests.get(f"{base}/api/conversations/{conversation}/messages?after=0",
                                                    headers=auth).json()["messages"]]
        return texts if any("The watch has ended" in text for text in texts) else None

    return wait_for(ended, timeout=60)


def test_a_burst_of_1000_lines_arrives_in_at_most_5_wakes_every_line_once(laptop):
    watch(laptop, "burst", "seq 1 1000")
    texts = wakes_until_ended(laptop, "burst")
    printed = [int(n) for text in texts for n in re.findall(r"^(\d+)$", text, re.MULTILINE)]
    assert printed == list(range(1, 1001))
    assert len([text for text in texts if "printed" in text]) <= 5, len(texts)
    assert "watcher exited (code 0)" in texts[-1]


def test_seq_6000_ends_with_the_flood_notice_at_default_settings(laptop):
    watch(laptop, "flood", "seq 1 6000")
    texts = wakes_until_ended(laptop, "flood")
    printed = [int(n) for text in texts for n in re.findall(r"^(\d+)$", text, re.MULTILINE)]
    assert printed == list(range(1, 5001)), "the first 5,000 lines, each once, and nothing past the guard"
    assert any("flood guard" in text for text in texts)
    assert "stopped by the flood guard" in texts[-1]
    assert not any("paused" in text.lower() or "times in an hour" in text for text in texts)


def test_a_40000_byte_line_arrives_once_truncated(laptop):
    watch(laptop, "long", "head -c 40000 /dev/zero | tr '\\0' x; echo; echo after")
    texts = wakes_until_ended(laptop, "long")
    body = "\n".join(texts)
    assert body.count("x" * 16000) == 1, "one line, cut at 16 KiB, not three"
    assert "x" * 16 * 1024 + "x" not in body
    assert "truncated" in body and "40,000 bytes" in body
    assert re.search(r"^after$", body, re.MULTILINE)
