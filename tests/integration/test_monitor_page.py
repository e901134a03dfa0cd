"""The monitor page and GET /api/monitors/{id}/events: what a monitor saw and why it did or didn't fire, with the
quiet checks counted (never written), a page at a time, kept to MONITOR_EVENTS_KEPT, and only for its owner."""

from __future__ import annotations

import re

import pytest
from bs4 import BeautifulSoup

from engine.explain import CHECK_KINDS
from models.tables import MonitorRun
from tests.integration.helpers import db, login, monitor_row, tool, wakes
from tests.integration.test_check_actor import make_monitor, quote
from tests.judge_server import JudgeServer

FIRE_REASON = "88.20 is below 90 (was 91.30)"
CHANGE_REASON = "Changed, but 91.30 is not below 90."


def events(client, token: str, monitor_id: str, **params):
    return client.get(f"/api/monitors/{monitor_id}/events", params=params,
                      headers={"Authorization": f"Bearer {token}"})


def timeline(client, token: str, monitor_id: str, **params) -> dict:
    response = events(client, token, monitor_id, **params)
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    return response.json()


def stored_runs(monitor_id: str) -> list[MonitorRun]:
    with db():
        return list(MonitorRun.select().where(MonitorRun.monitor == monitor_id).order_by(MonitorRun.id))


def stored_check_events(monitor_id: str) -> int:
    return sum(1 for run in stored_runs(monitor_id) if run.kind in CHECK_KINDS)


def check_at(pages, run_due_checks, price: str, times: int = 1) -> None:
    pages.set("/q", quote(price))
    for _ in range(times):
        assert run_due_checks() == 1


def through_the_fire(client, owner, pages, run_due_checks, **arguments) -> str:
    """95.10 (the baseline) → 95.10 three times (quiet) → 91.30 (a change, no fire) → 88.20 (the fire)."""
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")), **arguments)
    check_at(pages, run_due_checks, "95.10", times=3)
    check_at(pages, run_due_checks, "91.30")
    check_at(pages, run_due_checks, "88.20")
    return monitor_id


def soup(html: str) -> BeautifulSoup:
    return BeautifulSoup(html, "html.parser")


def text_of(node) -> str:
    return " ".join(node.get_text(" ").split())


# --- the events API -----------------------------------------------------------------------------------------------

def test_events_list_the_fire_its_wake_the_change_the_quiet_span_and_the_baseline(client, owner, pages,
                                                                                   run_due_checks):
    monitor_id = through_the_fire(client, owner, pages, run_due_checks)
    body = timeline(client, owner[1], monitor_id)
    assert body["monitor_id"] == monitor_id and body["next_before"] is None
    items = body["items"]
    assert [item["kind"] for item in items] == ["wake", "fired", "changed", "quiet", "baseline"], items
    wake, fired, changed, quiet, baseline = items
    [message] = wakes(monitor_id)
    assert wake["message_id"] == message.id and wake["at"] >= fired["at"], "the wake just after its fire"
    assert fired["data"]["before"] == "91.30" and fired["data"]["after"] == "88.20"
    assert fired["data"]["reason"] == FIRE_REASON and fired["check_count"] == 6
    assert changed["data"]["reason"] == CHANGE_REASON
    assert (changed["data"]["before"], changed["data"]["after"]) == ("95.10", "91.30")
    assert quiet["count"] == 3 and quiet["from"] == baseline["at"] and quiet["to"] == changed["at"]
    assert baseline["check_count"] == 1 and "95.10" in baseline["data"]["reason"]
    assert body["why_not"] is None, "it fired after the change"


def test_why_not_is_set_after_a_change_that_did_not_fire_and_cleared_by_a_fire(client, owner, pages,
                                                                                run_due_checks):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    assert timeline(client, owner[1], monitor_id)["why_not"] is None, "a baseline is not a change"
    check_at(pages, run_due_checks, "91.30")
    body = timeline(client, owner[1], monitor_id)
    assert body["why_not"] == CHANGE_REASON
    check_at(pages, run_due_checks, "91.30", times=2)
    assert timeline(client, owner[1], monitor_id)["why_not"] == CHANGE_REASON, "quiet checks do not clear it"
    check_at(pages, run_due_checks, "88.20")
    assert timeline(client, owner[1], monitor_id)["why_not"] is None


def test_already_below_is_the_why_not_after_a_fire_and_a_change(client, owner, pages, run_due_checks):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")), max_wakes=3)
    check_at(pages, run_due_checks, "88.20")
    check_at(pages, run_due_checks, "87")
    assert timeline(client, owner[1], monitor_id)["why_not"] == (
        "Changed, but 87 was below 90 already: it fires when it crosses, not while it stays.")


#: a page whose newest event is a fire loses that fire's wake: it is newer than the fire, so outside this page's
#: [oldest, newest] range, and older than the last page's oldest event, so outside that one's (models/events._wakes)
@pytest.mark.parametrize("limit", [1, 2, 3])
def test_events_pages_walk_every_item_once_and_the_quiet_spans_add_up(client, owner, pages, run_due_checks, limit):
    """Quiet checks at the top, between events and below a pause: pages of `limit` events, each span counted once,
    and all of them together are the monitor's checks less the stored check events."""
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")), max_wakes=5)
    check_at(pages, run_due_checks, "95.10", times=3)
    check_at(pages, run_due_checks, "91.30")
    check_at(pages, run_due_checks, "91.30", times=2)
    check_at(pages, run_due_checks, "88.20")
    check_at(pages, run_due_checks, "88.20")
    auth = {"Authorization": f"Bearer {owner[1]}"}
    assert client.post(f"/api/monitors/{monitor_id}/pause", headers=auth).status_code == 200
    assert client.post(f"/api/monitors/{monitor_id}/resume", headers=auth).status_code == 200
    check_at(pages, run_due_checks, "95.00")
    check_at(pages, run_due_checks, "95.00", times=4)

    whole = timeline(client, owner[1], monitor_id, limit=200)
    assert whole["next_before"] is None
    walked, before, pages_seen = [], None, 0
    while True:
        params = {"limit": limit, **({"before": before} if before else {})}
        page = timeline(client, owner[1], monitor_id, **params)
        pages_seen += 1
        assert sum(1 for item in page["items"] if "id" in item) <= limit
        if pages_seen > 1:
            assert page["why_not"] is None, "why_not is the newest page's answer"
        walked += page["items"]
        before = page["next_before"]
        if before is None:
            break
    runs = stored_runs(monitor_id)
    ids = [item["id"] for item in walked if "id" in item]
    assert ids == [run.id for run in reversed(runs)], "every stored event once, newest first"
    assert pages_seen == -(-len(runs) // limit)
    assert [item["kind"] for item in walked if item["kind"] != "wake"] == \
        [item["kind"] for item in whole["items"] if item["kind"] != "wake"]
    quiet_in_pages = [item["count"] for item in walked if item["kind"] == "quiet"]
    quiet_in_whole = [item["count"] for item in whole["items"] if item["kind"] == "quiet"]
    true_quiet = monitor_row(monitor_id).check_count - stored_check_events(monitor_id)
    assert quiet_in_whole == [4, 1, 2, 3] and sum(quiet_in_whole) == true_quiet == 10
    assert quiet_in_pages == quiet_in_whole and sum(quiet_in_pages) == true_quiet
    walked_wakes = [item["message_id"] for item in walked if item["kind"] == "wake"]
    assert walked_wakes == [message.id for message in reversed(wakes(monitor_id))], \
        "each wake once, across the page boundaries"


def test_only_the_newest_events_kept_are_kept(client, owner, pages, run_due_checks, reconfigure):
    reconfigure(MONITOR_EVENTS_KEPT=5)
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    for price in ("95.00", "94.00", "93.00", "92.00", "91.00", "91.50", "92.50"):
        check_at(pages, run_due_checks, price)
    runs = stored_runs(monitor_id)
    assert len(runs) == 5 and [run.check_count for run in runs] == [4, 5, 6, 7, 8]
    assert [run.data["after"] for run in runs] == ["93", "92", "91", "91.50", "92.50"]
    body = timeline(client, owner[1], monitor_id)
    assert [item["kind"] for item in body["items"]] == ["changed"] * 5, "the baseline was pruned"
    assert body["why_not"] == "Changed, but 92.50 is not below 90."


def test_another_accounts_monitor_is_not_found_on_the_api_and_the_page(client, owner, stranger, pages):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    assert events(client, stranger[1], monitor_id).status_code == 404
    assert events(client, owner[1], "0" * 32).status_code == 404
    assert client.get(f"/api/monitors/{monitor_id}/events").status_code == 401
    login(client, "stranger@example.com", "stranger-password")
    assert client.get(f"/monitors/{monitor_id}").status_code == 404
    assert client.get(f"/monitors/{monitor_id}/evidence").status_code == 404
    assert client.get(f"/api/monitors/{monitor_id}/events").status_code == 404, "the stranger's session either"


def test_the_page_signed_out_redirects_to_login(client, owner, pages):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    response = client.get(f"/monitors/{monitor_id}", follow_redirects=False)
    assert response.status_code in (302, 303, 307)
    assert response.headers["location"] == f"/login?next=/monitors/{monitor_id}"
    assert client.get(f"/monitors/{monitor_id}/evidence").status_code == 404


@pytest.mark.parametrize("params", [{"before": "abc"}, {"before": ""}, {"before": "-1"}, {"before": "1" * 19},
                                    {"before": "1.5"}, {"before": "³"}, {"limit": 0}, {"limit": 201}, {"limit": -3},
                                    {"limit": "many"}])
def test_bad_before_or_limit_is_400(client, owner, pages, params):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    response = events(client, owner[1], monitor_id, **params)
    assert response.status_code == 400, response.text


# --- the page -----------------------------------------------------------------------------------------------------

def test_the_page_shows_why_not_then_the_fire_with_before_and_after(client, owner, pages, run_due_checks):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    check_at(pages, run_due_checks, "95.10", times=3)
    check_at(pages, run_due_checks, "91.30")
    login(client)
    page = client.get(f"/monitors/{monitor_id}")
    assert page.status_code == 200 and page.headers["cache-control"] == "no-store"
    section = soup(page.text).select_one(f"section#evidence-{monitor_id}")
    assert section is not None and section["hx-trigger"] == f"sse:monitor-{monitor_id}"
    assert section["hx-get"] == f"/monitors/{monitor_id}/evidence"
    assert text_of(section.select_one(".why-not")) == f"Why didn't it fire? {CHANGE_REASON}"
    [quiet] = section.select("li.event.quiet")
    assert text_of(quiet).startswith("3 quiet checks, ")
    changed = section.select_one("li.event.changed")
    assert text_of(changed.select_one(".reason")) == CHANGE_REASON
    assert text_of(changed.select_one(".before")) == "95.10" and text_of(changed.select_one(".after")) == "91.30"

    check_at(pages, run_due_checks, "88.20")
    section = soup(client.get(f"/monitors/{monitor_id}").text).select_one(f"section#evidence-{monitor_id}")
    assert section.select_one(".why-not") is None
    fired = section.select_one("li.event.fired")
    assert text_of(fired.select_one(".reason")) == FIRE_REASON
    assert text_of(fired.select_one(".before-after")) == "91.30 → 88.20"
    [message] = wakes(monitor_id)
    wake = section.select_one("li.event.wake")
    assert wake.select_one("a")["href"] == f"/conversations/{message.conversation_id}#message-{message.id}"
    kinds = [li["class"][1] for li in section.select("ol.timeline > li.event")]
    assert kinds == ["wake", "fired", "changed", "quiet", "baseline"]
    assert "6 checks · 1 fired · 0 wakes left" in text_of(section.select_one("dl.facts"))


def test_the_evidence_partial_is_the_pages_section(client, owner, pages, run_due_checks):
    monitor_id = through_the_fire(client, owner, pages, run_due_checks)
    login(client)
    page = soup(client.get(f"/monitors/{monitor_id}").text).select_one(f"section#evidence-{monitor_id}")
    partial = client.get(f"/monitors/{monitor_id}/evidence")
    assert partial.status_code == 200 and partial.headers["content-type"].startswith("text/html")
    assert partial.headers["cache-control"] == "no-store"
    root = soup(partial.text)
    [section] = root.find_all(recursive=False)
    assert section.name == "section" and section["id"] == f"evidence-{monitor_id}"
    assert str(section) == str(page), "one partial serves the page and the refresh"
    assert "<html" not in partial.text and "sidebar" not in partial.text


def test_the_wake_on_the_conversation_page_links_to_what_it_saw(client, owner, pages, run_due_checks):
    monitor_id = through_the_fire(client, owner, pages, run_due_checks)
    [message] = wakes(monitor_id)
    login(client)
    page = soup(client.get(f"/conversations/{message.conversation_id}").text)
    link = page.select_one(f"#message-{message.id} a.evidence-link")
    assert link is not None and link["href"] == f"/monitors/{monitor_id}" and text_of(link) == "what it saw"


@pytest.fixture()
def judge_server():
    with JudgeServer(mode="no_match") as server:
        yield server


def test_a_judged_no_shows_the_judges_verdict_and_tokens(client, owner, pages, run_due_checks, reconfigure,
                                                         judge_server):
    reconfigure(JUDGE_BASE_URL=judge_server.base_url, JUDGE_API_KEY="sk-test", JUDGE_MODEL="judge-mini")
    url = pages.set("/notes", "<li>1.0 first</li>")
    body = tool(client, owner[1], "monitor_create", {
        "description": "the release notes mention a security fix", "source": {"type": "page", "url": url},
        "condition": "a security fix is announced", "interval": "5m", "max_wakes": 5}).json()
    assert body["ok"], body
    monitor_id = body["result"]["monitor_id"]
    pages.set("/notes", "<li>1.1 typo fixes</li><li>1.0 first</li>")
    run_due_checks()
    assert wakes(monitor_id) == [] and len(judge_server.requests) == 1
    said = "The check matched, but the judge said no: The price is still $120.00."
    api = timeline(client, owner[1], monitor_id)
    changed = api["items"][0]
    assert changed["kind"] == "changed" and changed["data"]["reason"] == said
    assert changed["data"]["judge"] == {"match": False, "summary": "The price is still $120.00.",
                                        "model": changed["data"]["judge"]["model"], "tokens": 110}
    assert changed["data"]["diff"] == "+ 1.1 typo fixes"
    assert api["why_not"] == said

    login(client)
    section = soup(client.get(f"/monitors/{monitor_id}").text).select_one(f"section#evidence-{monitor_id}")
    assert text_of(section.select_one(".why-not")) == f"Why didn't it fire? {said}"
    event = section.select_one("li.event.changed")
    assert text_of(event.select_one(".reason")) == said
    judge_line = text_of(event.select_one(".judge"))
    assert judge_line == (f"Judge ({changed['data']['judge']['model']}): no match — The price is still $120.00. "
                          "· 110 tokens")
    assert "+ 1.1 typo fixes" in text_of(event.select_one("pre.diff"))
    assert "a security fix is announced" in text_of(section.select_one("dl.facts"))
    assert "110 judge tokens" in text_of(section.select_one("dl.facts"))


# --- what writes an event, and what does not ------------------------------------------------------------------------

def test_quiet_checks_write_no_rows(client, owner, pages, run_due_checks):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    with db():
        before = MonitorRun.select().count()
    check_at(pages, run_due_checks, "95.10", times=3)
    with db():
        assert MonitorRun.select().count() == before == 1
    assert monitor_row(monitor_id).check_count == 4
    [quiet, baseline] = timeline(client, owner[1], monitor_id)["items"]
    assert quiet["kind"] == "quiet" and quiet["count"] == 3 and quiet["from"] == baseline["at"]


def test_an_unreachable_source_records_a_skip(client, owner, pages, run_due_checks):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    pages.set("/q", "down for maintenance", status=503)
    run_due_checks()
    skipped, baseline = timeline(client, owner[1], monitor_id)["items"]
    assert skipped["kind"] == "unreachable" and baseline["kind"] == "baseline"
    assert "503" in skipped["data"]["reason"] and skipped["check_count"] == 2
    assert monitor_row(monitor_id).status == "active" and wakes(monitor_id) == []
    login(client)
    section = soup(client.get(f"/monitors/{monitor_id}").text).select_one(f"section#evidence-{monitor_id}")
    event = section.select_one("li.event.unreachable")
    assert "Skipped: unreachable" in text_of(event) and "503" in text_of(event.select_one(".reason"))


def test_a_trigger_delivery_records_a_fired_event(client, owner, drain):
    body = tool(client, owner[1], "monitor_create", {
        "description": "the deploy finishes", "source": {"type": "webhook", "signature": "none"},
        "max_wakes": 3}).json()
    assert body["ok"], body
    result = body["result"]
    path = result["url"][result["url"].index("/api/triggers/"):]
    assert client.post(path, json={"status": "deployed", "version": "1.2.3"}).status_code == 202
    drain()
    [message] = wakes(result["monitor_id"])
    items = timeline(client, owner[1], result["monitor_id"])["items"]
    assert [item["kind"] for item in items] == ["wake", "fired", "armed"], items
    assert items[0]["message_id"] == message.id
    assert items[1]["data"]["reason"] and "1.2.3" in items[1]["detail"]


def test_an_approval_decision_records_a_decision_event_with_the_comment(client, owner):
    body = tool(client, owner[1], "monitor_create", {
        "description": "Dana approves the Q3 draft", "expires_in": "2d",
        "source": {"type": "approval", "question": "Send the Q3 plan to the board?"}}).json()
    assert body["ok"], body
    result = body["result"]
    path = result["approval_url"][result["approval_url"].index("/approve/"):]
    nonce = re.search(r'name="nonce" value="([0-9a-f]+)"', client.get(path).text).group(1)
    decided = client.post(path, data={"decision": "Reject", "comment": "wait for legal", "nonce": nonce})
    assert decided.status_code == 200
    items = timeline(client, owner[1], result["monitor_id"])["items"]
    decision = next(item for item in items if item["kind"] == "decision")
    assert decision["detail"] == "Reject" and decision["data"]["decision"] == "Reject"
    assert decision["data"]["comment"] == "wait for legal"
    assert decision["data"]["reason"] == "Decided through the approval link: Reject."
    assert [item["kind"] for item in items] == ["wake", "decision", "armed"]
    login(client)
    section = soup(client.get(f"/monitors/{result['monitor_id']}").text)
    assert "Decided through the approval link: Reject." in text_of(section.select_one("li.event.decision"))


def test_the_check_that_pauses_the_monitor_is_not_a_quiet_check(client, owner, pages, run_due_checks):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    pages.set("/q", "gone", status=404)
    for _ in range(3):  # MONITOR_AUTOPAUSE_FAILURES: the third failure pauses instead of recording an error
        run_due_checks()
    assert monitor_row(monitor_id).status == "paused"
    items = timeline(client, owner[1], monitor_id)["items"]
    assert [item["kind"] for item in items] == ["wake", "paused", "error", "error", "baseline"], items


def test_pause_and_resume_are_events_and_do_not_count_as_checks(client, owner, pages, run_due_checks):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    check_at(pages, run_due_checks, "95.10", times=2)
    auth = {"Authorization": f"Bearer {owner[1]}"}
    assert client.post(f"/api/monitors/{monitor_id}/pause", headers=auth).status_code == 200
    assert client.post(f"/api/monitors/{monitor_id}/resume", headers=auth).status_code == 200
    check_at(pages, run_due_checks, "95.10")
    kinds = [(item["kind"], item.get("count")) for item in timeline(client, owner[1], monitor_id)["items"]]
    assert kinds == [("quiet", 1), ("resumed", None), ("paused", None), ("quiet", 2), ("baseline", None)]
