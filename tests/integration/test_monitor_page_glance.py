"""The monitor page at a glance (issue 30): the latest reading apart from the baseline, wakes numbered within
their conversation, the watched url as a link, relative times with the UTC time on hover, Check now."""

from __future__ import annotations

import re

from bs4 import BeautifulSoup

from tests.integration.helpers import login, tool, wakes
from tests.integration.test_check_actor import make_monitor, quote


def facts(client, monitor_id: str) -> dict[str, BeautifulSoup]:
    section = BeautifulSoup(client.get(f"/monitors/{monitor_id}").text, "html.parser").select_one(
        f"section#evidence-{monitor_id}")
    return {" ".join(dt.get_text(" ").split()): dt.find_next_sibling("dd") for dt in section.select("dl.facts dt")}


def text_of(node) -> str:
    return " ".join(node.get_text(" ").split())


def test_the_latest_reading_is_shown_apart_from_the_baseline_after_a_fire(client, owner, pages, run_due_checks):
    url = pages.set("/q", quote("95.10"))
    monitor_id = make_monitor(client, owner[1], url, max_wakes=5)
    pages.set("/q", quote("85.50"))
    run_due_checks()
    login(client)
    shown = facts(client, monitor_id)
    assert text_of(shown["Latest reading"].select_one("strong")) == "85.50"
    assert "95.10" in text_of(shown["Baseline"]) and "85.50" not in text_of(shown["Baseline"])
    link = shown["Watches"].select_one("a.watched-url")
    assert link["href"] == url and link["rel"] == ["noopener", "noreferrer"]
    for name in ("Last checked", "Next check", "Expires"):
        stamp = shown[name].select_one("time[data-relative]")
        assert stamp is not None and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", stamp["title"]), name


def test_wakes_are_numbered_within_their_conversation(client, owner, pages, run_due_checks):
    body = tool(client, owner[1], "monitor_create", {
        "description": "the other price", "source": {"type": "page", "url": pages.set("/other", quote("95.10")),
                                                     "selector": "#price"},
        "check": {"type": "threshold", "op": "<", "value": 90}, "on_match": "Tell the user.", "interval": "5m"},
        conversation="conv-2").json()
    other = body["result"]["monitor_id"]
    pages.set("/other", quote("80.00"))
    run_due_checks()
    assert len(wakes(other)) == 1

    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    pages.set("/q", quote("85.50"))
    run_due_checks()
    [message] = wakes(monitor_id)
    assert message.id > wakes(other)[0].id
    login(client)
    page = BeautifulSoup(client.get(f"/monitors/{monitor_id}").text, "html.parser")
    link = page.select_one("li.event.wake a")
    assert text_of(link) == "wake #1", "the first wake of conv-1, whatever the other conversations hold"
    assert link["href"].endswith(f"#message-{message.id}")


def test_the_page_offers_check_now_only_for_an_active_polled_monitor(client, owner, pages):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    login(client)
    page = BeautifulSoup(client.get(f"/monitors/{monitor_id}").text, "html.parser")
    button = page.select_one("button.check-now-button")
    assert button["hx-post"] == f"/api/monitors/{monitor_id}/check"
    assert page.select_one(button["hx-target"]) is not None
    client.post(f"/api/monitors/{monitor_id}/cancel", headers={"Authorization": f"Bearer {owner[1]}"})
    ended = BeautifulSoup(client.get(f"/monitors/{monitor_id}").text, "html.parser")
    assert ended.select_one("button.check-now-button") is None
