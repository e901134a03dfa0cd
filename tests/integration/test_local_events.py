"""Issue 30 in embedded mode: `vigil token create`, a process of its own, hands token.created to a running
`vigil serve` (no Redis; its bus is in-process) through serve.json and POST /internal/events, so the owner's open
Settings → Tokens page shows the row without a reload; the route hears only this machine's key holder."""

from __future__ import annotations

import json
import os
import socket
import stat

import pytest
import requests

from tests.integration.test_live_rows import Stream, signed_in
from tests.processes import VIGIL, serve_vigil, stop, vigil

OWNER, STRANGER = ("owner@example.com", "owner-password"), ("stranger@example.com", "stranger-password")


def embedded_env(tmp_path) -> dict:
    return {"VIGIL_DATA_DIR": str(tmp_path / "data"), "DATABASE_URL": "", "REDIS_URL": ""}


@pytest.fixture(scope="module")
def laptop(tmp_path_factory):
    """`vigil serve` on SQLite with two accounts; its environment and base URL."""
    tmp_path = tmp_path_factory.mktemp("local-events")
    env = embedded_env(tmp_path)
    log = tmp_path / "serve.log"
    served = serve_vigil([VIGIL, "serve"], env, log)
    try:
        for email, password in (OWNER, STRANGER):
            vigil("user", "create", email, "--password", password, env=env)
        yield served, env
    finally:
        stop(served.process)


def serve_file(env: dict) -> dict:
    with open(os.path.join(env["VIGIL_DATA_DIR"], "serve.json")) as handle:
        return json.load(handle)


def post_event(base: str, event: dict, key: str | None) -> requests.Response:
    headers = {"X-Vigil-Local-Key": key} if key is not None else {}
    return requests.post(f"{base}/internal/events", json=event, headers=headers, timeout=30)


def test_local_events_cli_token_reaches_the_owners_open_tokens_page(laptop):
    served, env = laptop
    owner_ui = Stream(f"{served.base}/ui/events", signed_in(served.base, *OWNER)[0])
    stranger_ui = Stream(f"{served.base}/ui/events", signed_in(served.base, *STRANGER)[0])
    try:
        printed = vigil("token", "create", "--user", OWNER[0], "--label", "from the CLI", env=env)
        secret = printed.strip().splitlines()[-1]
        row = owner_ui.wait("tokens", "from the CLI")
        assert '<tr id="token-' in row and secret not in row
        vigil("token", "create", "--user", STRANGER[0], "--label", "the stranger's", env=env)
        stranger_ui.wait("tokens", "the stranger&#39;s")
        assert [name for name, _ in stranger_ui.events if name == "tokens"] == ["tokens"]  # not the owner's
    finally:
        owner_ui.close()
        stranger_ui.close()


def test_local_events_route_hears_only_the_key_holder(laptop):
    served, env = laptop
    key = serve_file(env)["key"]
    token = {"id": 1, "label": "x", "created_at": "2026-12-03T19:00:00+00:00", "last_used_at": None}
    event = {"user_id": 1, "name": "token.created", "data": token}
    assert post_event(served.base, event, None).status_code == 404
    assert post_event(served.base, event, "not-" + key).status_code == 404
    assert post_event(served.base, event, key[:-1]).status_code == 404
    assert requests.get(f"{served.base}/internal/events", headers={"X-Vigil-Local-Key": key},
                        timeout=30).status_code == 404
    unknown = post_event(served.base, {**event, "name": "monitor.created"}, key)
    assert unknown.status_code == 400 and "token.created" in unknown.json()["detail"]
    extra = post_event(served.base, {**event, "data": {**token, "token": "vgl_secret"}}, key)
    assert extra.status_code == 400
    assert post_event(served.base, {**event, "user_id": "1"}, key).status_code == 400
    assert post_event(served.base, event, key).status_code == 204
    paths = requests.get(f"{served.base}/schema/openapi.json", timeout=30).json()["paths"]
    assert not [path for path in paths if path.startswith("/internal")]


def test_local_events_serve_file_is_private_and_gone_after_sigterm(tmp_path):
    env = embedded_env(tmp_path)
    served = serve_vigil([VIGIL, "serve"], env, tmp_path / "serve.log")
    path = tmp_path / "data" / "serve.json"
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert json.loads(path.read_text())["url"] == served.base
    finally:
        assert stop(served.process) == 0
    assert not path.exists()


def test_local_events_token_create_succeeds_when_the_server_is_gone(tmp_path):
    env = embedded_env(tmp_path)
    vigil("user", "create", OWNER[0], "--password", OWNER[1], env=env)
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    (tmp_path / "data" / "serve.json").write_text(json.dumps(
        {"url": f"http://127.0.0.1:{port}", "key": "stale", "pid": os.getpid()}))
    printed = vigil("token", "create", "--user", OWNER[0], env=env)
    assert printed.strip().splitlines()[-1].startswith("vgl_")
