"""Approval links: the public page, the first decision wins, and nothing else changes anything."""

from __future__ import annotations

import re
import socket
import threading
import time
from datetime import timedelta

import pytest
import requests
import uvicorn

from models import utcnow
from models.tables import ApprovalRequest, Monitor
from tests.integration.helpers import db, tool, wakes

DRAFT = "Dear Dana,\n<script>alert('x')</script>\nPlease find the Q3 plan attached."


def create(client, token, **source) -> dict:
    args = {"description": "INTERNAL: Dana approves the Q3 draft", "expires_in": "2d",
            "source": {"type": "approval", "question": "Send the Q3 plan to the board?", "details": DRAFT, **source}}
    body = tool(client, token, "monitor_create", args).json()
    assert body["ok"], body
    return body["result"]


def path_of(result) -> str:
    return result["approval_url"][result["approval_url"].index("/approve/"):]


def form_nonce(html: str) -> str:
    return re.search(r'name="nonce" value="([0-9a-f]+)"', html).group(1)


def decisions() -> list:
    with db():
        return [(r.decision, r.comment) for r in ApprovalRequest.select()]


def test_create_gives_only_the_page_link_and_ignores_a_check(client, owner):
    body = tool(client, owner[1], "monitor_create", {
        "description": "d", "source": {"type": "approval", "question": "Ship?"}, "check": {"type": "change"}}).json()
    result = body["result"]
    assert result["approval_url"].startswith("http://127.0.0.1:8000/approve/apr_")
    assert result["options"] == ["Approve", "Reject"] and "takes no check" in " ".join(result["notes"])
    assert set(result) == {"monitor_id", "status", "approval_url", "options", "expires_at", "notes"}


def test_page_shows_the_request_escaped_and_opening_it_changes_nothing(client, owner):
    result = create(client, owner[1])
    for method in ("get", "head"):
        response = getattr(client, method)(path_of(result))
        assert response.status_code == 200
        assert response.headers["cache-control"] == "no-store" and response.headers["referrer-policy"] == "no-referrer"
        assert "noindex" in response.headers["x-robots-tag"]
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    page = client.get(path_of(result)).text
    assert "Send the Q3 plan to the board?" in page and "&lt;script&gt;alert" in page and "<script>alert" not in page
    assert "INTERNAL: Dana approves" not in page, "the description is written for the requester's chat"
    assert decisions() == [(None, "")] and wakes() == []


def test_first_decision_wins_and_resumes_the_conversation(client, owner):
    result = create(client, owner[1], options=["Send", "Hold", "Rewrite"])
    page = client.get(path_of(result)).text
    decided = client.post(path_of(result), data={"decision": "Hold", "comment": "<b>wait</b> for legal",
                                                 "nonce": form_nonce(page)})
    assert decided.status_code == 200 and 'data-decision="Hold"' in decided.text
    assert "&lt;b&gt;wait&lt;/b&gt;" in decided.text
    [wake] = wakes()
    assert wake.metadata["wake"]["source"] == "approval" and wake.metadata["decision"] == "Hold"
    assert wake.metadata["comment"] == "<b>wait</b> for legal" and wake.metadata["decided_by"] == "link"
    assert "not the user of this chat" in wake.content
    again = client.post(path_of(result), data={"decision": "Send", "nonce": form_nonce(page)})
    assert again.status_code == 409 and 'data-decision="Hold"' in again.text
    with db():
        assert Monitor.get_by_id(result["monitor_id"]).status == "done"
    assert decisions() == [("Hold", "<b>wait</b> for legal")] and len(wakes()) == 1


@pytest.mark.parametrize("headers, data", [
    ({}, {"decision": "Approve"}),
    ({}, {"decision": "Approve", "nonce": "0" * 32}),
    ({"Origin": "https://evil.example"}, {"decision": "Approve", "nonce": "NONCE"}),
    ({"User-Agent": "Vigil/0.1 (+monitor)"}, {"decision": "Approve", "nonce": "NONCE"}),
])
def test_refused_posts_decide_nothing(client, owner, headers, data):
    result = create(client, owner[1])
    data = {k: (form_nonce(client.get(path_of(result)).text) if v == "NONCE" else v) for k, v in data.items()}
    assert client.post(path_of(result), data=data, headers=headers).status_code == 403
    assert decisions() == [(None, "")] and wakes() == []


def test_json_api_reads_and_decides(client, owner):
    result = create(client, owner[1], allow_comment=False)
    api = path_of(result).replace("/approve/", "/api/approvals/")
    state = client.get(api).json()
    assert state["state"] == "open" and state["allow_comment"] is False and "description" not in state
    assert "nonce" not in state, "only the page a person opens carries the nonce"
    nonce = form_nonce(client.get(path_of(result)).text)  # the page's cookie goes to the JSON twin's path too
    bad = client.post(api, json={"decision": "Maybe", "nonce": nonce})
    assert bad.status_code == 400 and "Approve, Reject" in bad.json()["detail"]
    ok = client.post(api, json={"decision": "Reject", "comment": "ignored", "nonce": nonce})
    assert ok.status_code == 200 and ok.json()["decision"] == "Reject" and ok.json()["comment"] is None
    assert client.post(api, json={"decision": "Approve", "nonce": nonce}).status_code == 409


def test_comment_is_capped(client, owner):
    result = create(client, owner[1])
    nonce = form_nonce(client.get(path_of(result)).text)
    response = client.post(path_of(result), data={"decision": "Approve", "comment": "x" * 2001, "nonce": nonce})
    assert response.status_code == 400 and decisions() == [(None, "")]


def test_expired_cancelled_and_unknown(client, owner, broker):
    from tasks.scheduler import tick

    expired, cancelled = create(client, owner[1]), create(client, owner[1])
    nonce_expired = form_nonce(client.get(path_of(expired)).text)
    nonce_cancelled = form_nonce(client.get(path_of(cancelled)).text)
    with db():
        Monitor.update(expires_at=utcnow() - timedelta(seconds=1)).where(Monitor.id == expired["monitor_id"]).execute()
        tick(utcnow(), 100)
    assert "expired" in client.get(path_of(expired)).text
    assert client.post(path_of(expired), data={"decision": "Approve", "nonce": nonce_expired}).status_code == 410
    client.post(f"/api/monitors/{cancelled['monitor_id']}/cancel", headers={"Authorization": f"Bearer {owner[1]}"})
    assert "has ended" in client.get(path_of(cancelled)).text
    assert client.post(path_of(cancelled), data={"decision": "Approve", "nonce": nonce_cancelled}).status_code == 404
    assert client.get("/approve/apr_" + "x" * 43).status_code == 404
    assert [m.metadata["wake"]["source"] for m in wakes()] == ["monitor_expired"], "expiry tells the agent once"


def test_vigils_own_fetcher_is_refused(client, owner, settings, broker):
    from engine.http import FetchError, Fetcher, FetchPolicy

    result = create(client, owner[1])
    with live_server(settings) as base:
        with pytest.raises(FetchError, match="403"):
            Fetcher(FetchPolicy(allow_loopback=True)).get(base + path_of(result))
    assert decisions() == [(None, "")]


def test_fifty_simultaneous_decisions_one_wins(client, owner, settings, broker):
    result = create(client, owner[1], options=["A", "B", "C", "D"])
    with live_server(settings) as base:
        url = base + path_of(result)
        page = requests.get(url, timeout=10)
        nonce, cookies = form_nonce(page.text), page.cookies
        start, codes = threading.Barrier(50), []

        def post(n: int) -> None:
            start.wait()
            response = requests.post(url, data={"decision": "ABCD"[n % 4], "nonce": nonce}, cookies=cookies,
                                     timeout=30)
            codes.append(response.status_code)

        threads = [threading.Thread(target=post, args=(n,)) for n in range(50)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert sorted(codes) == [200] + [409] * 49
    assert len(wakes()) == 1 and len([d for d in decisions() if d[0]]) == 1


class live_server:
    """The app on a real port in this process, for tests that need real concurrent HTTP."""

    def __init__(self, settings) -> None:
        from app import create_app

        listener = socket.create_server(("127.0.0.1", 0))  # bound here: no other process can take the port
        self.base = f"http://127.0.0.1:{listener.getsockname()[1]}"
        config = uvicorn.Config(create_app(settings), log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [listener]}, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.base

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def test_link_uses_public_app_url_when_the_ui_runs_elsewhere(client, owner, reconfigure):
    reconfigure(PUBLIC_APP_URL="http://localhost:5173/", PUBLIC_API_BASE_URL="https://api.example.com")
    assert create(client, owner[1])["approval_url"].startswith("http://localhost:5173/approve/apr_")
    reconfigure(PUBLIC_API_BASE_URL="https://vigil.example.com")
    assert create(client, owner[1])["approval_url"].startswith("https://vigil.example.com/approve/apr_")
