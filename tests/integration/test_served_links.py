"""The links Vigil hands out name the address it actually serves: `vigil serve --port N` without
PUBLIC_API_BASE_URL gives trigger links, their example curl, approval pages and the pairing command on port N (issue 30)."""

from __future__ import annotations

import re

import pytest
import requests

from tests.processes import VIGIL, serve_vigil, stop, vigil

PASSWORD = "a-good-password"


@pytest.fixture()
def served(tmp_path):
    env = {"VIGIL_DATA_DIR": str(tmp_path / "data"), "DATABASE_URL": "", "REDIS_URL": "",
           "PUBLIC_API_BASE_URL": "", "API_URL": "", "PUBLIC_APP_URL": ""}
    running = serve_vigil([VIGIL, "serve"], env, tmp_path / "serve.log")
    vigil("user", "create", "me@example.com", "--password", PASSWORD, env=env)
    token = vigil("token", "create", "--user", "me@example.com", env=env).strip().splitlines()[-1]
    yield running, token
    stop(running.process)


def create(base: str, token: str, source: dict) -> dict:
    answer = requests.post(f"{base}/api/tool/monitor", headers={"Authorization": f"Bearer {token}"}, timeout=30, json={
        "action": "monitor_create", "context": {"conversation_id": "c-1", "channel": "chat"},
        "arguments": {"description": "the deploy finishes", "source": source}}).json()
    assert answer["ok"], answer
    return answer["result"]


def test_served_links_name_the_port_vigil_serve_listens_on(served):
    running, token = served
    assert running.port != 8000
    trigger = create(running.base, token, {"type": "webhook", "signature": "none"})
    assert trigger["url"].startswith(f"{running.base}/api/triggers/")
    assert f"{running.base}/api/triggers/" in trigger["example_curl"] and ":8000" not in trigger["example_curl"]
    assert requests.post(trigger["url"], json={"status": "done"}, timeout=10).status_code == 202

    approval = create(running.base, token, {"type": "approval", "question": "Ship it?"})
    assert approval["approval_url"].startswith(f"{running.base}/approve/")
    assert requests.get(approval["approval_url"], timeout=10).status_code == 200

    browser = requests.Session()
    csrf = re.search(r'name="_csrf" value="([^"]+)"', browser.get(f"{running.base}/login", timeout=10).text).group(1)
    browser.post(f"{running.base}/login", data={"email": "me@example.com", "password": PASSWORD, "_csrf": csrf},
                 timeout=10)
    page = browser.get(f"{running.base}/settings/devices", timeout=10).text
    csrf = re.search(r'name="_csrf" value="([^"]+)"', page).group(1)
    paired = browser.post(f"{running.base}/settings/devices/pair-code", data={"name": "laptop", "_csrf": csrf},
                          timeout=10).text
    assert f"vigil runner pair --server {running.base} --code" in paired
