"""GET /api/monitors and POST /api/monitors/{id}/pause|resume|cancel, by token and by session."""

from __future__ import annotations

import re

from models.tables import Monitor
from tests.integration.helpers import db, tool

PAGE = "<p id='price'>Price: $95.10</p>"


def create(client, token, url, conversation="conv-1") -> str:
    args = {"description": "watch", "source": {"type": "page", "url": url}, "interval": "5m"}
    return tool(client, token, "monitor_create", args, conversation=conversation).json()["result"]["monitor_id"]


def auth(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def status_of(monitor_id: str) -> str:
    with db():
        return Monitor.get_by_id(monitor_id).status


def test_list_filters_by_conversation_and_live(client, owner, pages):
    url = pages.set("/p", PAGE)
    first, second = create(client, owner[1], url), create(client, owner[1], url, "conv-2")
    client.post(f"/api/monitors/{second}/cancel", headers=auth(owner[1]))
    everything = client.get("/api/monitors", headers=auth(owner[1])).json()["monitors"]
    assert {m["monitor_id"] for m in everything} == {first, second}
    live = client.get("/api/monitors?status=live", headers=auth(owner[1])).json()["monitors"]
    assert [m["monitor_id"] for m in live] == [first]
    mine = client.get("/api/monitors?conversation_id=conv-2", headers=auth(owner[1])).json()["monitors"]
    assert [m["monitor_id"] for m in mine] == [second]
    row = live[0]
    assert set(row) >= {"monitor_id", "status", "wakes_left", "last_checked_at", "conversation_id",
                        "check_count", "last_error", "expires_at", "interval_seconds", "description"}
    assert client.get("/api/monitors?status=dead", headers=auth(owner[1])).status_code == 400


def test_pause_resume_cancel_by_token(client, owner, pages, run_due_checks):
    monitor_id = create(client, owner[1], pages.set("/p", PAGE))
    paused = client.post(f"/api/monitors/{monitor_id}/pause", headers=auth(owner[1]))
    assert paused.status_code == 200 and paused.json()["status"] == "paused"
    assert run_due_checks() == 0, "a paused monitor is not checked"
    again = client.post(f"/api/monitors/{monitor_id}/pause", headers=auth(owner[1]))
    assert again.status_code == 409 and "paused" in again.json()["detail"]
    resumed = client.post(f"/api/monitors/{monitor_id}/resume", headers=auth(owner[1]))
    assert resumed.status_code == 200 and resumed.json()["status"] == "active"
    assert run_due_checks(seconds_ahead=1) == 1, "a resumed monitor is checked soon"
    cancelled = client.post(f"/api/monitors/{monitor_id}/cancel", headers=auth(owner[1]))
    assert cancelled.json()["status"] == "cancelled"
    assert client.post(f"/api/monitors/{monitor_id}/resume", headers=auth(owner[1])).status_code == 409
    assert status_of(monitor_id) == "cancelled"


def test_other_users_monitor_is_404_and_unchanged(client, owner, stranger, pages):
    monitor_id = create(client, owner[1], pages.set("/p", PAGE))
    assert client.post(f"/api/monitors/{monitor_id}/cancel", headers=auth(stranger[1])).status_code == 404
    assert client.get("/api/monitors", headers=auth(stranger[1])).json() == {"monitors": []}
    assert status_of(monitor_id) == "active"


def test_unknown_action_and_no_auth(client, owner, pages):
    monitor_id = create(client, owner[1], pages.set("/p", PAGE))
    assert client.post(f"/api/monitors/{monitor_id}/explode", headers=auth(owner[1])).status_code == 404
    assert client.post(f"/api/monitors/{monitor_id}/pause").status_code == 401
    assert client.get("/api/monitors").status_code == 401
    assert status_of(monitor_id) == "active"


def login(client, email="owner@example.com", password="owner-password"):
    form = client.get("/login")
    csrf = re.search(r'name="_csrf" value="([^"]+)"', form.text).group(1)
    return client.post("/login", data={"email": email, "password": password, "_csrf": csrf},
                       follow_redirects=False)


def test_login_wrong_password_is_refused(client, owner):
    response = login(client, password="wrong-password")
    assert response.status_code == 400 and "Wrong email or password" in response.text
    assert client.get("/settings/monitors", follow_redirects=False).status_code in (302, 303)


def test_login_without_csrf_is_refused(client, owner):
    client.get("/login")
    response = client.post("/login", data={"email": "owner@example.com", "password": "owner-password"})
    assert response.status_code == 403


def test_session_buttons_need_the_csrf_token(client, owner, pages):
    monitor_id = create(client, owner[1], pages.set("/p", PAGE))
    assert login(client).status_code == 303
    page = client.get("/settings/monitors")
    assert page.status_code == 200 and f'id="monitor-{monitor_id}"' in page.text
    refused = client.post(f"/api/monitors/{monitor_id}/pause")
    assert refused.status_code == 403 and status_of(monitor_id) == "active"
    csrf = re.search(r'"X-CSRF-Token": "([^"]+)"', page.text).group(1)
    swapped = client.post(f"/api/monitors/{monitor_id}/pause", headers={"X-CSRF-Token": csrf, "HX-Request": "true"})
    assert swapped.status_code == 200 and 'data-status="paused"' in swapped.text
    assert swapped.text.strip().startswith(f'<tr id="monitor-{monitor_id}"')
    assert status_of(monitor_id) == "paused"


def test_logout_ends_the_session(client, owner):
    login(client)
    page = client.get("/settings/monitors")
    csrf = re.search(r'name="_csrf" value="([^"]+)"', page.text).group(1)
    assert client.post("/logout", data={"_csrf": csrf}, follow_redirects=False).status_code == 303
    assert client.get("/settings/monitors", follow_redirects=False).status_code in (302, 303)


def test_messages_api_pages_with_a_cursor(client, owner, pages, run_due_checks):
    url = pages.set("/p", "<p>v1</p>")
    args = {"description": "notes", "source": {"type": "page", "url": url}, "max_wakes": 5}
    tool(client, owner[1], "monitor_create", args)
    for version in ("v2", "v3", "v4"):
        pages.set("/p", f"<p>{version}</p>")
        run_due_checks()
    first = client.get("/api/conversations/conv-1/messages?after=0&limit=2", headers=auth(owner[1])).json()
    assert len(first["messages"]) == 2 and "+ v2" in first["messages"][0]["content"]
    rest = client.get(f"/api/conversations/conv-1/messages?after={first['next_cursor']}",
                      headers=auth(owner[1])).json()
    assert [m["metadata"]["wake"]["source"] for m in rest["messages"]] == ["monitor"]
    assert "+ v4" in rest["messages"][0]["content"]
    empty = client.get(f"/api/conversations/conv-1/messages?after={rest['next_cursor']}",
                       headers=auth(owner[1])).json()
    assert empty == {"messages": [], "next_cursor": rest["next_cursor"]}


def test_messages_api_refuses_bad_cursor_and_foreign_conversation(client, owner, stranger, pages):
    tool(client, owner[1], "monitor_list")
    assert client.get("/api/conversations/conv-1/messages?after=abc", headers=auth(owner[1])).status_code == 400
    assert client.get("/api/conversations/conv-1/messages", headers=auth(stranger[1])).status_code == 404
    assert client.get("/api/conversations/conv-1/messages").status_code == 401


def test_models_page_saves_a_model_without_ever_showing_its_key(client, owner):
    from models.tables import JudgeModel

    login(client)
    page = client.get("/settings/models")
    csrf = re.search(r'name="_csrf" value="([^"]+)"', page.text).group(1)
    form = {"_csrf": csrf, "name": "fast", "base_url": "https://api.example.com/v1", "model": "mini",
            "api_key": "sk-very-secret", "api_version": ""}
    assert client.post("/settings/models", data=form, follow_redirects=False).status_code == 303
    listed = client.get("/settings/models")
    assert 'id="model-fast"' in listed.text and "sk-very-secret" not in listed.text
    with db():
        stored = JudgeModel.get(JudgeModel.name == "fast")
        assert "sk-very-secret" not in stored.api_key_encrypted
    bad = client.post("/settings/models", data={**form, "name": "other", "base_url": "ftp://x"})
    assert bad.status_code == 400 and "Base URL" in bad.text
    no_csrf = client.post("/settings/models", data={k: v for k, v in form.items() if k != "_csrf"})
    assert no_csrf.status_code == 403
    with db():
        assert JudgeModel.select().count() == 1
    deleted = client.post("/settings/models/fast/delete", data={"_csrf": csrf}, follow_redirects=False)
    assert deleted.status_code == 303
    with db():
        assert JudgeModel.select().count() == 0
