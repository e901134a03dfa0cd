"""Tool-source secrets stay secret: a real `vigil serve` (SQLite, DEBUG logging) registers a declared tool whose
step sends a secret header, connects an MCP server behind a bearer token (the official SDK's server, on
127.0.0.1), watches both tools until they fire, and afterwards neither secret shows up in its log, the registry's
answers, the tool results, the messages, the event stream or the Settings pages. The servers did get them.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from tests.integration.test_embedded_smoke import wait_for
from tests.mcp_server import serve_mcp
from tests.processes import stop, vigil
from tests.security.test_trigger_secrets_never_leak import read_stream

HEADER_SECRET = "sk-tool-HEADER-SECRET-never-logged"
MCP_TOKEN = "mcp-bearer-TOKEN-SECRET-never-logged"
CONVERSATION = "tool-leak-check"
AGENT = "leak-agent"
CSRF = re.compile(r'name="_csrf" value="([^"]+)"')
HEADER_CSRF = re.compile(r'"X-CSRF-Token": "([^"]+)"')


class PriceApi(BaseHTTPRequestHandler):
    """GET /price: the price the test sets; records the credential each request carried."""
    protocol_version = "HTTP/1.1"
    price = 120.0
    credentials: list = []

    def do_GET(self) -> None:
        type(self).credentials.append(self.headers.get("X-Api-Key"))
        body = json.dumps({"price": type(self).price}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture()
def price_api():
    PriceApi.credentials = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), PriceApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture()
def serve(serve_debug):
    return serve_debug


def test_tool_header_values_and_mcp_tokens_never_leak(serve, price_api):
    base, env, process, log = serve
    vigil("user", "create", "owner@example.com", "--password", "a-good-password", env=env)
    token = vigil("token", "create", "--user", "owner@example.com", env=env).strip().splitlines()[-1]
    auth = {"Authorization": f"Bearer {token}"}
    raw_stream: list[str] = []
    events: list = []
    ready = threading.Event()
    threading.Thread(target=read_stream, args=(base, token, raw_stream, events, ready), daemon=True).start()
    assert ready.wait(10), "the event stream did not open"
    answers: list[str] = []

    def call_tool(arguments: dict) -> dict:
        response = requests.post(f"{base}/api/tool/monitor", headers=auth, timeout=20, json={
            "action": "monitor_create", "arguments": arguments,
            "context": {"conversation_id": CONVERSATION, "channel": "chat", "agent_id": AGENT}})
        answers.append(response.text)
        body = response.json()
        assert body["ok"], body
        return body["result"]

    registered = requests.put(f"{base}/api/agents/{AGENT}/tools/price", headers=auth, timeout=10, json={
        "description": "A price", "steps": [{"kind": "http", "method": "GET", "url": f"{price_api}/price",
                                             "headers": {"X-Api-Key": HEADER_SECRET}}],
        "output": {"main": "{'price': steps[0].body.price, 'reached': steps[0].body.price < 100.0}"}})
    assert registered.status_code == 201, registered.text
    answers += [registered.text, requests.get(f"{base}/api/agents/{AGENT}/tools", headers=auth, timeout=10).text]

    with serve_mcp(token=MCP_TOKEN) as mcp_server:
        browser = requests.Session()
        csrf = CSRF.search(browser.get(f"{base}/login", timeout=10).text).group(1)
        browser.post(f"{base}/login", timeout=10, data={"email": "owner@example.com", "password": "a-good-password",
                                                        "_csrf": csrf})
        csrf = HEADER_CSRF.search(browser.get(f"{base}/settings/connections", timeout=10).text).group(1)
        added = browser.post(f"{base}/api/connections", headers={"X-CSRF-Token": csrf}, timeout=20,
                             json={"name": "tickets", "url": mcp_server.url, "bearer_token": MCP_TOKEN})
        assert added.status_code == 201, added.text
        answers.append(added.text)

        mcp_server.status = "closed"
        price_watch = call_tool({"description": "the price drops below 100", "source": {"type": "tool", "tool": "price"},
                                 "check": {"type": "cel", "expr": "data.reached == true"}})
        ticket_watch = call_tool({"description": "T-7 closes",
                                  "source": {"type": "tool", "connection": "tickets", "tool": "get_status",
                                             "arguments": {"ticket": "T-7"}},
                                  "check": {"type": "cel", "expr": "data.status == 'closed'"}})
        assert price_watch["status"] == ticket_watch["status"] == "active"

        def messages() -> tuple[str, list]:
            response = requests.get(f"{base}/api/conversations/{CONVERSATION}/messages?after=0", headers=auth,
                                    timeout=10)
            return response.text, response.json()["messages"]

        wait_for(lambda: len(messages()[1]) >= 1, timeout=30)  # the ticket watch fires on its first poll
        assert mcp_server.calls["get_status"] >= 1
        listed = requests.get(f"{base}/api/monitors", headers=auth, timeout=10)
        pages = [browser.get(f"{base}{path}", timeout=10).text for path in
                 ("/settings/tools", "/settings/connections", "/settings/monitors", "/conversations/1")]
        answers += [listed.text, browser.get(f"{base}/api/connections", timeout=10).text]
    messages_text, woken = messages()
    assert [m["metadata"]["wake"]["ref_id"] for m in woken] == [ticket_watch["monitor_id"]]
    assert HEADER_SECRET in PriceApi.credentials, "the tool's step did not send its header"

    assert stop(process) == 0
    log_text = log.read_text(errors="replace")
    places = {"serve log": log_text, "messages": messages_text, "event stream": "\n".join(raw_stream),
              **{f"answer {n}": text for n, text in enumerate(answers)},
              **{f"page {n}": text for n, text in enumerate(pages)}}
    for place, text in places.items():
        for secret in (HEADER_SECRET, MCP_TOKEN):
            assert secret not in text, f"a secret is in the {place}"
            assert "-".join(secret.split("-")[2:4]) not in text, f"part of a secret is in the {place}"
