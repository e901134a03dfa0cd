"""Trigger-link secrets stay secret: a real `vigil serve` (SQLite, DEBUG logging, a real judge call) is driven
through signed links of every scheme, valid and invalid deliveries and refused reveals, and afterwards no signing
secret, model API key (JUDGE_API_KEY, or one entered in Settings → Models) or link token shows up in its log, the
tool results, the messages, the event stream or the Settings → Models page.
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest
import requests
from peewee import SqliteDatabase

from engine.crypto import Keyring
from engine.signatures import new_secret, sign
from models.tables import TriggerLink
from tests.integration.test_embedded_smoke import wait_for
from tests.judge_server import JudgeServer
from tests.processes import VIGIL, serve_vigil, stop, vigil

JUDGE_KEY = "sk-judge-SECRET-do-not-log"
#: A model API key entered in Settings → Models (stored encrypted in the catalog, not in the environment).
CATALOG_KEY = "sk-catalog-HIDDEN-never-shown"
CSRF = re.compile(r'name="_csrf" value="([^"]+)"')
CONVERSATION = "leak-check"
SCHEMES = ("github", "standard_webhooks", "hmac_sha256")
#: A link token as the access log would print it unmasked.
RAW_TOKEN = re.compile(r"trg_[A-Za-z0-9_-]{8,}")


@pytest.fixture()
def judge():
    with JudgeServer(mode="match") as server:
        yield server


@pytest.fixture()
def serve(tmp_path, judge):
    data = tmp_path / "data"
    env = {"VIGIL_DATA_DIR": str(data), "DATABASE_URL": "", "REDIS_URL": "", "SECRET_KEY": "",
           "ENCRYPTION_KEYS": "", "FETCH_ALLOW_LOOPBACK": "true", "LOG_LEVEL": "DEBUG",
           "API_URL": "", "JUDGE_BASE_URL": judge.base_url,
           "JUDGE_API_KEY": JUDGE_KEY, "JUDGE_MODEL": "m", "JUDGE_API_VERSION": "",
           "JUDGE_ALLOW_PRIVATE_URLS": "true",  # CATALOG_KEY's model, saved in Settings → Models, is on 127.0.0.1
           "DELIVERY_SWEEP_SECONDS": "1", "SCHEDULER_TICK_SECONDS": "0.2", "PYTHONUNBUFFERED": "1"}
    log = tmp_path / "serve.log"
    served = serve_vigil([VIGIL, "serve"], lambda port: {**env, "PUBLIC_API_BASE_URL": f"http://127.0.0.1:{port}"},
                         log)
    try:
        yield served.base, served.env, data, served.process, log
    finally:
        stop(served.process)


def read_stream(base: str, token: str, raw: list[str], events: list, ready: threading.Event) -> None:
    """Every line of /api/events, kept as sent, and the parsed events."""
    try:
        with requests.get(f"{base}/api/events", headers={"Authorization": f"Bearer {token}"}, stream=True,
                          timeout=(5, 60)) as response:
            name = None
            for line in response.iter_lines(decode_unicode=True):
                raw.append(line)
                if line.startswith(": connected"):
                    ready.set()
                elif line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: ") and name:
                    events.append((name, json.loads(line[6:])))
    except requests.RequestException:
        pass  # the server went away at the end of the test


def stored_secrets(data: Path, monitor_ids: list[str]) -> dict[str, str]:
    """Each link's signing secret, decrypted from the SQLite file with the instance's own key."""
    keyring = Keyring.from_settings((data / "secret_key").read_text().strip(), "")
    sqlite = SqliteDatabase(str(data / "vigil.db"))
    with sqlite.bind_ctx([TriggerLink], bind_refs=False, bind_backrefs=False), sqlite.connection_context():
        links = {link.monitor_id: link for link in TriggerLink.select().where(TriggerLink.monitor.in_(monitor_ids))}
    return {monitor_id: keyring.decrypt(links[monitor_id].secret_encrypted) for monitor_id in monitor_ids}


def add_catalog_model(base: str, judge_url: str) -> str:
    """Sign in as the owner and save a judge model with CATALOG_KEY; returns the models page as shown after."""
    browser = requests.Session()
    csrf = CSRF.search(browser.get(f"{base}/login", timeout=10).text).group(1)
    signed_in = browser.post(f"{base}/login", timeout=10, data={
        "email": "owner@example.com", "password": "a-good-password", "_csrf": csrf})
    assert signed_in.status_code == 200 and "/settings/monitors" in signed_in.url, signed_in.text[:300]
    csrf = CSRF.search(browser.get(f"{base}/settings/models", timeout=10).text).group(1)
    saved = browser.post(f"{base}/settings/models", timeout=10, data={
        "name": "catalog-judge", "base_url": judge_url, "model": "m2", "api_key": CATALOG_KEY, "_csrf": csrf})
    assert saved.status_code == 200 and "catalog-judge" in saved.text, saved.text[:300]
    return saved.text


def forms_of(secret: str) -> list[str]:
    """The secret and, for whsec_ secrets, its base64 part on its own."""
    return [secret, secret.removeprefix("whsec_")] if secret.startswith("whsec_") else [secret]


def test_secrets_and_tokens_never_leak(serve, judge):
    base, env, data, process, log = serve
    vigil("user", "create", "owner@example.com", "--password", "a-good-password", env=env)
    token = vigil("token", "create", "--user", "owner@example.com", env=env).strip().splitlines()[-1]
    auth = {"Authorization": f"Bearer {token}"}
    raw_stream: list[str] = []
    events: list = []
    ready = threading.Event()
    threading.Thread(target=read_stream, args=(base, token, raw_stream, events, ready), daemon=True).start()
    assert ready.wait(10), "the event stream did not open"

    tool_results: list[str] = []

    def call_tool(action: str, arguments: dict) -> dict:
        response = requests.post(f"{base}/api/tool/monitor", headers=auth, timeout=15, json={
            "action": action, "arguments": arguments,
            "context": {"conversation_id": CONVERSATION, "channel": "chat"}})
        assert response.status_code == 200, response.text
        tool_results.append(response.text)
        body = response.json()
        assert body["ok"], body
        return body["result"]

    # Signed links of every scheme, plus one whose matches go to the judge.
    links: dict[str, dict] = {}
    for scheme in SCHEMES:
        links[scheme] = call_tool("monitor_create", {"description": f"the {scheme} sender calls",
                                                     "source": {"type": "webhook", "signature": scheme},
                                                     "max_wakes": 10})
    links["judged"] = call_tool("monitor_create", {"description": "the deploy succeeds (judged)",
                                                   "source": {"type": "webhook", "signature": "hmac_sha256"},
                                                   "condition": "the deploy finished successfully",
                                                   "max_wakes": 10})
    schemes = {name: result["signature"] for name, result in links.items()}
    assert schemes == {**{s: s for s in SCHEMES}, "judged": "hmac_sha256"}
    for result in links.values():
        assert result["url"].startswith(f"{base}/api/triggers/trg_") and result["reachable_from_internet"] is False
        assert result["secret"] == "hidden from you; the user reveals it on the link card in this chat"
    tokens = {name: result["url"].rsplit("/", 1)[1] for name, result in links.items()}
    ids = {name: result["monitor_id"] for name, result in links.items()}
    stored = stored_secrets(data, list(ids.values()))
    secrets = {name: stored[monitor_id] for name, monitor_id in ids.items()}
    assert all(secrets.values()) and len(set(secrets.values())) == len(secrets)
    listed = call_tool("monitor_list", {})
    assert {m["monitor_id"] for m in listed["monitors"]} == set(ids.values())

    # The first judge call is refused (an error path with the key in play), then the judge answers match.
    judge.queue("401")
    posts = 0

    def deliver(name: str, body: bytes, headers: dict, token_: str | None = None) -> int:
        nonlocal posts
        posts += 1
        response = requests.post(f"{base}/api/triggers/{token_ or tokens[name]}", data=body, timeout=10,
                                 headers={"Content-Type": "application/json", **headers})
        for secret in secrets.values():
            assert secret not in response.text
        return response.status_code

    for name in links:
        scheme = schemes[name]
        body = json.dumps({"event": "done", "link": name}).encode()
        other = next(secrets[n] for n in links if n != name and schemes[n] == scheme) if name in (
            "hmac_sha256", "judged") else new_secret(scheme)
        refused = [
            deliver(name, body, {}),                                                      # unsigned
            deliver(name, body, sign(scheme, other, body, time.time())),                  # someone else's secret
            deliver(name, b'{"event": "forged"}', sign(scheme, secrets[name], body, time.time())),  # altered body
        ]
        if scheme == "standard_webhooks":
            refused.append(deliver(name, body, sign(scheme, secrets[name], body, time.time() - 3600)))  # replayed
        assert refused == [401] * len(refused), (name, refused)
        assert deliver(name, body, sign(scheme, secrets[name], body, time.time(), message_id=f"msg_{name}")) == 202
    assert deliver("github", b"{}", {}, token_="trg_" + "x" * 43) == 404
    get = requests.get(links["github"]["url"], timeout=10)
    assert get.status_code == 405 and tokens["github"] not in get.text

    # Reveals need the owner's browser session: a runtime token gets a 404, no credentials at all a 401.
    for monitor_id in ids.values():
        for headers, status in ((auth, 404), ({}, 401)):
            response = requests.get(f"{base}/api/monitors/{monitor_id}/secret", headers=headers, timeout=10)
            assert response.status_code == status, response.text
            assert not any(secret in response.text for secret in secrets.values())
    assert requests.get(f"{base}/conversations/1", timeout=10, allow_redirects=False).status_code in (302, 303, 307)

    # Every link wakes once; the judged one after the sweep brings back the delivery its judge failed on.
    def all_messages() -> tuple[str, list]:
        response = requests.get(f"{base}/api/conversations/{CONVERSATION}/messages?after=0", headers=auth,
                                timeout=10)
        response.raise_for_status()
        return response.text, response.json()["messages"]

    wait_for(lambda: len(all_messages()[1]) >= len(links), timeout=20)
    messages_text, messages = all_messages()
    woken = {m["metadata"]["wake"]["ref_id"]: m for m in messages}
    assert set(woken) == set(ids.values()) and len(messages) == len(links)
    assert all(m["metadata"]["wake"]["source"] == "trigger" for m in messages)
    assert woken[ids["judged"]]["metadata"]["checked_against_condition"] is True
    assert len(judge.requests) >= 2
    assert all(r.headers["authorization"] == f"Bearer {JUDGE_KEY}" for r in judge.requests)
    assert any(n == "monitor.updated" and d["monitor_id"] == ids["judged"] and d["last_error"]
               and "refused the API key" in d["last_error"] for n, d in events), "the judge failure was not seen"
    wait_for(lambda: sum(1 for n, d in events if n == "message.created") >= len(links), timeout=10)

    # A model whose key the owner enters in Settings → Models judges one more link's delivery with that key.
    models_page = add_catalog_model(base, judge.base_url)
    catalog = call_tool("monitor_create", {"description": "the release ships (judged by the catalog model)",
                                           "source": {"type": "webhook"}, "condition": "the release shipped",
                                           "judge_model": "catalog-judge", "max_wakes": 10})
    assert deliver("catalog", b'{"event": "shipped"}', {}, token_=catalog["url"].rsplit("/", 1)[1]) == 202
    wait_for(lambda: len(all_messages()[1]) > len(links), timeout=20)
    assert any(r.headers["authorization"] == f"Bearer {CATALOG_KEY}" for r in judge.requests), \
        "the catalog model was not called with its key"
    call_tool("monitor_cancel", {"monitor_id": ids["github"]})
    assert deliver("github", b"{}", {}) == 404
    wait_for(lambda: any(n == "monitor.updated" and d["status"] == "cancelled" for n, d in events), timeout=10)
    messages_text, _ = all_messages()

    assert stop(process) == 0
    log_text = log.read_text(errors="replace")
    stream_text = "\n".join(raw_stream)
    assert "DEBUG" in log_text, "LOG_LEVEL=DEBUG did not reach the log"

    # No signing secret (nor the base64 inside a whsec_ one) and no judge key anywhere.
    # (LOG_LEVEL=DEBUG only holds until the app is built: Litestar's default logging config then puts the root
    # logger back to INFO. Should that change, the checks below cover the request-time DEBUG lines as well.)
    judge_bodies = "\n".join(r.raw.decode("utf-8", "replace") for r in judge.requests)
    places = {"serve log": log_text, "messages": messages_text, "event stream": stream_text,
              "requests to the judge model": judge_bodies, "Settings → Models page": models_page,
              **{f"tool result {n}": text for n, text in enumerate(tool_results)}}
    for place, text in places.items():
        for name, secret in secrets.items():
            for form in forms_of(secret):
                assert form not in text, f"the {name} link's signing secret is in the {place}"
        assert JUDGE_KEY not in text, f"the judge API key is in the {place}"
        assert "SECRET-do-not-log" not in text, f"part of the judge API key is in the {place}"
        assert "HIDDEN-never-shown" not in text, f"the Settings → Models API key (or part of it) is in the {place}"

    # Link tokens: only in their own creation result (its url and example curl, which are for the sender).
    creations = {name: tool_results[n] for n, name in enumerate(links)}
    for name, link_token in tokens.items():
        for place, text in places.items():
            if text is creations[name]:
                result = json.loads(text)["result"]
                assert link_token in result["url"] and link_token in result["example_curl"]
                rest = {k: v for k, v in result.items() if k not in ("url", "example_curl")}
                assert link_token not in json.dumps(rest), f"the {name} link token is in {place} outside url"
            else:
                assert link_token not in text, f"the {name} link token is in the {place}"
        assert link_token.removeprefix("trg_") not in log_text

    # The access log prints every trigger request, each with its token masked.
    assert not RAW_TOKEN.search(log_text), RAW_TOKEN.search(log_text).group(0)
    assert "x" * 43 not in log_text
    masked_posts = re.findall(r'"POST /api/triggers/trg_… HTTP/1\.1" (\d{3})', log_text)
    assert len(masked_posts) == posts, (len(masked_posts), posts)
    assert {"202", "401", "404"} <= set(masked_posts)
    assert re.search(r'"GET /api/triggers/trg_… HTTP/1\.1" 405', log_text)
