"""POST /api/monitors/{id}/check ("Check now"): the ordinary check of a polled monitor at once, through the same
claim and check actor; the owner's session (with CSRF) or the account's runtime token; once per 10 s a monitor."""

from __future__ import annotations

from bs4 import BeautifulSoup

from models.tables import Monitor
from tests.integration.helpers import db, login, monitor_row, tool, wakes
from tests.integration.test_check_actor import make_monitor, quote


def auth(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def check_now(client, monitor_id: str, headers: dict):
    return client.post(f"/api/monitors/{monitor_id}/check", headers=headers)


def test_check_now_checks_at_once_and_a_changed_page_fires_once(client, owner, pages, drain):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")), max_wakes=5)
    before = monitor_row(monitor_id)
    pages.set("/q", quote("88.20"))

    answer = check_now(client, monitor_id, auth(owner[1]))
    assert answer.status_code == 202, answer.text
    assert answer.json() == {"monitor_id": monitor_id, "checking": True}
    drain()

    after = monitor_row(monitor_id)
    assert after.check_count == before.check_count + 1 and after.fire_count == 1
    assert after.next_check_at > after.last_checked_at, "the schedule starts over from the check"
    [message] = wakes(monitor_id)
    assert "88.20" in message.content

    again = check_now(client, monitor_id, auth(owner[1]))
    assert again.status_code == 429 and 1 <= int(again.headers["retry-after"]) <= 10
    assert "check again in" in again.json()["detail"]
    drain()
    assert len(wakes(monitor_id)) == 1 and monitor_row(monitor_id).check_count == after.check_count


def test_check_now_of_an_unchanged_page_is_quiet(client, owner, pages, drain):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    count = monitor_row(monitor_id).check_count
    assert check_now(client, monitor_id, auth(owner[1])).status_code == 202
    drain()
    assert monitor_row(monitor_id).check_count == count + 1 and wakes(monitor_id) == []


def test_check_now_needs_the_owner_and_the_csrf_token(client, owner, stranger, pages, drain):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    assert check_now(client, monitor_id, {}).status_code == 401
    foreign = check_now(client, monitor_id, auth(stranger[1]))
    assert foreign.status_code == 404 and foreign.json()["detail"] == "No such monitor."
    csrf = login(client)
    assert check_now(client, monitor_id, {}).status_code == 403, "a session without its CSRF token"
    assert monitor_row(monitor_id).check_count == 1, "nothing was claimed by the refused calls"

    swapped = check_now(client, monitor_id, {"X-CSRF-Token": csrf, "HX-Request": "true"})
    assert swapped.status_code == 202 and swapped.headers["content-type"].startswith("text/html")
    status = BeautifulSoup(swapped.text, "html.parser").select_one(f"#check-now-status-{monitor_id}")
    assert status is not None and "Checking now" in status.get_text()
    drain()
    assert monitor_row(monitor_id).check_count == 2


def test_check_now_refuses_paused_ended_and_event_sources_with_a_sentence(client, owner, pages):
    url = pages.set("/q", quote("95.10"))
    paused, ended = make_monitor(client, owner[1], url), make_monitor(client, owner[1], url)
    client.post(f"/api/monitors/{paused}/pause", headers=auth(owner[1]))
    client.post(f"/api/monitors/{ended}/cancel", headers=auth(owner[1]))
    hook = tool(client, owner[1], "monitor_create", {"description": "the deploy finishes",
                                                      "source": {"type": "webhook"}, "on_match": "Tell the user."})
    hook_id = hook.json()["result"]["monitor_id"]

    answers = {name: check_now(client, monitor_id, auth(owner[1]))
               for name, monitor_id in (("paused", paused), ("ended", ended), ("hook", hook_id))}
    assert {name: a.status_code for name, a in answers.items()} == {"paused": 409, "ended": 409, "hook": 409}
    assert answers["paused"].json()["detail"] == "The monitor is paused, so it is not checked. Resume it first."
    assert answers["ended"].json()["detail"] == "The monitor is cancelled, so it is not checked."
    assert "Only a polled source" in answers["hook"].json()["detail"]
    with db():
        assert Monitor.get_by_id(paused).check_count == Monitor.get_by_id(ended).check_count == 1


def test_check_now_is_in_the_openapi_document(client):
    operation = client.get("/schema/openapi.json").json()["paths"]["/api/monitors/{monitor_id}/check"]["post"]
    assert {"202", "401", "403", "404", "409", "429", "503"} <= set(operation["responses"])
