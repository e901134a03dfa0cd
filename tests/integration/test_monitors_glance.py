"""Settings → Monitors at a glance (issue 30): badges, relative times with the UTC time on hover, the latest
reading, filters and search as GET parameters, and deleting a monitor that has ended."""

from __future__ import annotations

import re

from bs4 import BeautifulSoup

from models.tables import Message, Monitor, MonitorRun
from tests.integration.helpers import db, login, tool, wakes
from tests.integration.test_check_actor import make_monitor, quote


def auth(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def rows(client, **params) -> dict[str, BeautifulSoup]:
    page = client.get("/settings/monitors", params=params)
    assert page.status_code == 200, page.text
    return {tr["id"].removeprefix("monitor-"): tr
            for tr in BeautifulSoup(page.text, "html.parser").select("table.monitors tbody tr.monitor")}


def text_of(node) -> str:
    return " ".join(node.get_text(" ").split())


def webhook(client, token: str, description: str, conversation: str = "conv-1") -> str:
    body = tool(client, token, "monitor_create", {"description": description, "source": {"type": "webhook"},
                                                   "on_match": "Tell the user."}, conversation=conversation).json()
    assert body["ok"], body
    return body["result"]["monitor_id"]


def test_monitor_rows_show_a_badge_relative_times_and_the_latest_reading(client, owner, pages, drain):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")), max_wakes=5)
    pages.set("/q", quote("85.50"))
    assert client.post(f"/api/monitors/{monitor_id}/check", headers=auth(owner[1])).status_code == 202
    drain()
    login(client)
    row = rows(client)[monitor_id]
    assert text_of(row.select_one(".badge-status")) == "active" and "badge-active" in row.select_one(".badge-status")["class"]
    assert text_of(row.select_one(".latest .reading")) == "85.50"
    assert re.fullmatch(r"changed (just now|\d+ min ago)", text_of(row.select_one(".latest .changed")))
    checked = row.select_one("td.last-checked")
    assert re.match(r"checked (just now|\d+ \w+ ago) next in \d+ \w+", text_of(checked)), text_of(checked)
    stamp = checked.select_one("time")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp["datetime"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", stamp["title"])


def test_monitor_filters_and_search_narrow_the_rows(client, owner, pages):
    url = pages.set("/q", quote("95.10"))
    price = make_monitor(client, owner[1], url, description="ACME price below 90")
    other = make_monitor(client, owner[1], url, description="Something else entirely")
    hook = webhook(client, owner[1], "the deploy finishes", conversation="conv-2")
    client.post(f"/api/monitors/{other}/cancel", headers=auth(owner[1]))
    login(client)

    assert set(rows(client)) == {price, other, hook}
    assert set(rows(client, status="cancelled")) == {other}
    assert set(rows(client, status="live")) == {price, hook}
    assert set(rows(client, status="ended")) == {other}
    assert set(rows(client, conversation="conv-2")) == {hook}
    assert set(rows(client, kind="webhook")) == {hook}
    assert set(rows(client, kind="page", q="acme")) == {price}
    assert set(rows(client, q=url)) == {price, other}, "the watched url is searched too"
    none = client.get("/settings/monitors", params={"q": "nothing like this"})
    assert "No monitors match these filters." in none.text

    refused = client.get("/settings/monitors", params={"status": "sleeping"})
    assert refused.status_code == 400
    error = BeautifulSoup(refused.text, "html.parser").select_one(".filter-error")
    assert error is not None and text_of(error).startswith("status must be one of active, holding, paused")


def test_delete_of_an_ended_monitor_removes_it_and_its_history_but_not_its_wakes(client, owner, pages,
                                                                                  run_due_checks):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    pages.set("/q", quote("85.50"))
    run_due_checks()
    [message] = wakes(monitor_id)
    csrf = login(client)
    row = rows(client)[monitor_id]
    button = row.select_one("button.delete")
    assert button is not None and button["hx-delete"] == f"/api/monitors/{monitor_id}"

    assert client.delete(f"/api/monitors/{monitor_id}").status_code == 403, "no CSRF token"
    assert client.delete(f"/api/monitors/{monitor_id}", headers=auth(owner[1])).status_code == 403, \
        "a runtime token can't delete"
    gone = client.delete(f"/api/monitors/{monitor_id}", headers={"X-CSRF-Token": csrf, "HX-Request": "true"})
    assert gone.status_code == 200 and gone.text == "", "an empty answer swaps the row out"
    with db():
        assert Monitor.get_or_none(Monitor.id == monitor_id) is None
        assert MonitorRun.select().where(MonitorRun.monitor == monitor_id).count() == 0
        assert Message.get_by_id(message.id).content == message.content, "the wake stays in its conversation"
    assert monitor_id not in rows(client)
    again = client.delete(f"/api/monitors/{monitor_id}", headers={"X-CSRF-Token": csrf})
    assert again.status_code == 404


def test_delete_refuses_a_running_monitor_and_another_accounts(client, owner, stranger, pages):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    csrf = login(client)
    assert rows(client)[monitor_id].select_one("button.delete") is None
    running = client.delete(f"/api/monitors/{monitor_id}", headers={"X-CSRF-Token": csrf})
    assert running.status_code == 409
    assert running.json()["detail"] == "The monitor is active; cancel it first, then delete it."
    client.post(f"/api/monitors/{monitor_id}/cancel", headers=auth(owner[1]))
    client.post("/logout", data={"_csrf": csrf})
    stranger_csrf = login(client, "stranger@example.com", "stranger-password")
    foreign = client.delete(f"/api/monitors/{monitor_id}", headers={"X-CSRF-Token": stranger_csrf})
    assert foreign.status_code == 404
    with db():
        assert Monitor.get_by_id(monitor_id).status == "cancelled"
