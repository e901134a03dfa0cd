"""Issue 28: an agent can't decide its own approval link. Vigil never sends a request to itself: every outbound
request (page and JSON sources, tool steps, MCP connections, wake endpoints) is refused when its resolved address
and port are Vigil's own public origin or the address its web listens on, FETCH_ALLOW_LOOPBACK or not, whatever
headers the request carries; a step that writes is never armed by the runtime's read_only mark alone; and a
decision needs the page's cookie, which only the HTML page a person opens sets.

The app runs on a real port of 127.0.0.1 in this process (the integration settings allow loopback), so every
refusal here is Vigil knowing itself, not the loopback rule."""

from __future__ import annotations

import re
import socket
import threading
import time

import pytest
import requests
import uvicorn

from engine.errors import BlockedURL
from engine.http import FetchPolicy, Fetcher
from models.tables import ApprovalRequest, McpConnection, Monitor, WakeEndpoint
from tasks.runtime import own_endpoints
from tests.integration.helpers import db, login, monitor_row, tool, wakes

ITSELF = "is Vigil itself; a monitor can't watch or call Vigil's own API."
AGENT = "agent-1"


class live_app:
    """The app on a port of 127.0.0.1 bound before it starts, so its settings can name its own address."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"

    def start(self, settings) -> None:
        from app import create_app

        self.server = uvicorn.Server(uvicorn.Config(create_app(settings), log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.listener]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture()
def itself(reconfigure):
    """Vigil on a real port, knowing its address as PUBLIC_API_BASE_URL (links are built on it)."""
    app = live_app()
    app.settings = reconfigure(PUBLIC_API_BASE_URL=app.base)
    app.start(app.settings)
    yield app
    app.stop()


@pytest.fixture()
def listening(reconfigure):
    """Vigil on a real port, knowing it only as where `vigil web --host 0.0.0.0` listens (no public url set)."""
    app = live_app()
    app.settings = reconfigure(WEB_LISTEN_ADDRESSES=f"0.0.0.0:{app.port}")
    app.start(app.settings)
    yield app
    app.stop()


def auth(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def approval(client, token: str) -> tuple[str, str]:
    """An approval link the agent asked for: (its token, the JSON twin's url)."""
    body = tool(client, token, "monitor_create", {"description": "Dana approves the plan", "source": {
        "type": "approval", "question": "Send the plan?"}}).json()
    assert body["ok"], body
    url = body["result"]["approval_url"]
    link = url[url.index("/approve/") + len("/approve/"):]
    return link, url.replace("/approve/", "/api/approvals/")


def undecided() -> bool:
    with db():
        return [r.decision for r in ApprovalRequest.select()] == [None] and not [
            m for m in wakes() if m.metadata["wake"]["source"] == "approval"]


def form_nonce(html: str) -> str:
    return re.search(r'name="nonce" value="([0-9a-f]+)"', html).group(1)


# --- the penetration test's chain, with a runtime token only --------------------------------------------------------

def test_self_approval_a_tool_step_reading_the_agents_own_link_is_refused_by_the_guard(client, owner, itself,
                                                                                        run_due_checks):
    link, api_url = approval(client, owner[1])
    assert api_url.startswith(itself.base)
    peek = {"parameters": {"type": "object", "properties": {"link": {"type": "string"}}, "required": ["link"]},
            "steps": [{"kind": "http", "method": "GET", "url": itself.base + "/api/approvals/{{args.link}}",
                       "headers": {"User-Agent": "Mozilla/5.0"}}],
            "output": {"main": "steps[0].body"}}
    assert client.put(f"/api/agents/{AGENT}/tools/peek", headers=auth(owner[1]), json=peek).status_code == 201
    body = tool(client, owner[1], "monitor_create", {"description": "read my link", "source": {
        "type": "tool", "tool": "peek", "arguments": {"link": link}},
        "check": {"type": "cel", "expr": "data.state == 'open'"}}).json()
    assert body["ok"] and body["result"]["status"] == "active", body

    run_due_checks(1)
    watch = monitor_row(body["result"]["monitor_id"])
    assert f"127.0.0.1:{itself.port}" in watch.last_error and ITSELF in watch.last_error, watch.last_error
    assert wakes(watch.id) == [], "the step never reached the approval, so nothing it read woke the agent"
    assert undecided()


def test_self_approval_a_post_step_marked_read_only_waits_for_the_owner_and_decides_nothing(client, owner, itself,
                                                                                           run_due_checks):
    link, _ = approval(client, owner[1])
    decide = {"parameters": {"type": "object", "properties": {"link": {"type": "string"}}, "required": ["link"]},
              "steps": [{"kind": "http", "method": "POST", "url": itself.base + "/api/approvals/{{args.link}}",
                         "read_only": True, "headers": {"User-Agent": "Mozilla/5.0"},
                         "body": {"decision": "Approve", "nonce": "0" * 32}}],
              "output": {"main": "steps[0].body"}}
    assert client.put(f"/api/agents/{AGENT}/tools/decide", headers=auth(owner[1]), json=decide).status_code == 201
    body = tool(client, owner[1], "monitor_create", {"description": "approve my link", "source": {
        "type": "tool", "tool": "decide", "arguments": {"link": link}},
        "check": {"type": "cel", "expr": "data.state == 'decided'"}}).json()
    assert body["ok"], body
    assert body["result"]["status"] == "awaiting_approval", "a runtime's read_only mark on a POST arms nothing"
    assert any("only marked read_only" in note for note in body["result"]["notes"])
    run_due_checks()
    assert monitor_row(body["result"]["monitor_id"]).status == "awaiting_approval" and undecided()


def test_self_approval_the_one_seam_refuses_vigil_whatever_the_headers(owner, itself):
    """Even a step the owner did approve: the guard decides by address and port, not by the User-Agent."""
    fetcher = Fetcher(FetchPolicy(allow_loopback=True, own=own_endpoints(itself.settings)))
    for method in ("GET", "POST"):
        with pytest.raises(BlockedURL, match=re.escape(ITSELF)):
            fetcher.call(method, itself.base + "/api/approvals/apr_x", headers={"User-Agent": "Mozilla/5.0"},
                         body=b"{}" if method == "POST" else None)
    assert requests.get(itself.base + "/healthz", timeout=10).status_code == 200, "the server is up: refused, not down"


@pytest.mark.parametrize("spelling", ["127.0.0.1", "localhost", "2130706433", "0x7f000001", "127.1",
                                      "[::ffff:127.0.0.1]"])
def test_the_guard_knows_vigil_by_its_resolved_address_however_it_is_spelled(owner, itself, spelling):
    fetcher = Fetcher(FetchPolicy(allow_loopback=True, own=own_endpoints(itself.settings)))
    with pytest.raises(BlockedURL, match=re.escape(ITSELF)):
        fetcher.get(f"http://{spelling}:{itself.port}/healthz")


# --- sources, MCP connections and wake endpoints ------------------------------------------------------------------

@pytest.mark.parametrize("kind, path", [("page", "/approve/{link}"), ("json", "/api/approvals/{link}"),
                                        ("json", "/healthz")])
@pytest.mark.parametrize("known_as", ["itself", "listening"])
def test_a_source_on_vigils_own_address_is_refused_with_loopback_allowed(client, owner, request, kind, path,
                                                                         known_as):
    app = request.getfixturevalue(known_as)
    assert app.settings.FETCH_ALLOW_LOOPBACK
    link, _ = approval(client, owner[1])
    host = "localhost" if known_as == "listening" else "127.0.0.1"
    url = f"http://{host}:{app.port}" + path.format(link=link)
    body = tool(client, owner[1], "monitor_create", {"description": "watch my own link", "source": {
        "type": kind, "url": url}}).json()
    assert body["ok"] is False and ITSELF in body["error"], body
    with db():
        assert Monitor.select().count() == 1, "only the approval's monitor: the watch was not created"
    assert undecided()


@pytest.mark.parametrize("known_as", ["itself", "listening"])
def test_a_wake_endpoint_at_vigils_own_address_is_refused_with_loopback_allowed(client, owner, request, known_as):
    app = request.getfixturevalue(known_as)
    answer = client.post("/api/wake-endpoints", headers=auth(owner[1]),
                         json={"url": f"http://127.0.0.1:{app.port}/api/approvals/apr_x"})
    assert answer.status_code == 400 and ITSELF in answer.json()["detail"], answer.text
    with db():
        assert WakeEndpoint.select().count() == 0
    other_port = client.post("/api/wake-endpoints", headers=auth(owner[1]),
                             json={"url": f"http://127.0.0.1:{app.port + 1 if app.port < 65535 else 1}/wake"})
    assert other_port.status_code == 201, "another port of this machine is not Vigil"


def test_an_mcp_connection_to_vigils_own_mcp_is_refused(client, owner, itself):
    csrf = login(client)
    answer = client.post("/api/connections", headers={"X-CSRF-Token": csrf},
                         json={"name": "myself", "url": itself.base + "/mcp", "bearer_token": owner[1]})
    assert answer.status_code == 400 and ITSELF in answer.json()["detail"], answer.text
    with db():
        assert McpConnection.select().count() == 0


def test_an_accounts_judge_model_at_vigils_own_address_is_not_called(owner, itself):
    """Even with JUDGE_ALLOW_PRIVATE_URLS (a model server on this machine): Vigil itself is never the model."""
    from engine.judge import JudgeError, JudgeModel, judge
    from engine.judge_transport import guarded_session
    from tests.judge_server import JudgeServer

    session = guarded_session(True, own_endpoints(itself.settings))
    with pytest.raises(JudgeError, match=re.escape(ITSELF)):
        judge(session, JudgeModel("mine", itself.base + "/v1", "", "x"), "d", "c", "content", timeout=5)
    with JudgeServer() as server:  # another port of this machine is a model server like any other
        assert judge(session, JudgeModel("local", server.base_url, "", "x"), "d", "c", "content", timeout=5).match


# --- the page's cookie --------------------------------------------------------------------------------------------

def test_approval_json_read_never_gives_the_nonce(client, owner, itself):
    link, api_url = approval(client, owner[1])
    state = client.get(f"/api/approvals/{link}").json()
    assert state["state"] == "open" and "nonce" not in state
    assert not re.search(r"[0-9a-f]{32}", client.get(f"/api/approvals/{link}").text)


def test_approval_decision_without_the_pages_cookie_is_refused_and_decides_nothing(client, owner, itself):
    link, _ = approval(client, owner[1])
    nonce = form_nonce(client.get(f"/approve/{link}").text)
    client.cookies.clear()  # a client that holds the link and even the nonce, but never loaded the page itself
    form = client.post(f"/approve/{link}", data={"decision": "Approve", "nonce": nonce})
    assert form.status_code == 403 and "only be sent from the approval page" in form.text
    as_json = client.post(f"/api/approvals/{link}", json={"decision": "Approve", "nonce": nonce})
    assert as_json.status_code == 403 and "only be sent from the approval page" in as_json.json()["detail"]
    assert undecided()


def test_approval_decision_with_the_cookie_of_another_browser_is_refused(client, owner, itself):
    link, _ = approval(client, owner[1])
    mine = requests.get(f"{itself.base}/approve/{link}", timeout=10)
    theirs = requests.get(f"{itself.base}/approve/{link}", timeout=10)
    answer = requests.post(f"{itself.base}/approve/{link}", data={"decision": "Approve", "nonce": form_nonce(mine.text)},
                           cookies=theirs.cookies, timeout=10)
    assert answer.status_code == 403 and "reload the page" in answer.text
    assert undecided()


def test_approval_decision_with_the_pages_cookie_decides_once(client, owner, itself):
    link, _ = approval(client, owner[1])
    page = requests.get(f"{itself.base}/approve/{link}", timeout=10)
    cookies = [c for c in page.raw.headers.getlist("Set-Cookie")]
    assert sorted(re.search(r"Path=([^;]+)", c).group(1) for c in cookies) == [f"/api/approvals/{link}",
                                                                              f"/approve/{link}"]
    for cookie in cookies:
        assert "HttpOnly" in cookie and "samesite=strict" in cookie.lower(), cookie
    nonce = form_nonce(page.text)
    decided = requests.post(f"{itself.base}/api/approvals/{link}", json={"decision": "Reject", "nonce": nonce},
                            cookies=page.cookies, timeout=10)
    assert decided.status_code == 200 and decided.json()["decision"] == "Reject", decided.text
    again = requests.post(f"{itself.base}/approve/{link}", data={"decision": "Approve", "nonce": nonce},
                          cookies=page.cookies, timeout=10)
    assert again.status_code == 409
    [wake] = [m for m in wakes() if m.metadata["wake"]["source"] == "approval"]
    assert wake.metadata["decision"] == "Reject" and wake.metadata["decided_by"] == "link"
