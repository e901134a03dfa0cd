"""A newcomer's first minutes without a stumble (issue 30, item 9): Vigil's own icon instead of a 404 on every
page, a nav that marks the page you are on in plain words, Tools and Connections saying what to do when empty, a
wake that reads as words with the source's untrusted text folded away, and a log line when a monitor is created
and when it wakes, naming ids only."""

from __future__ import annotations

import json
import logging
import time

import pytest
import requests
from bs4 import BeautifulSoup

from engine.signatures import sign
from models.tables import Message
from tests.integration.helpers import db, login, tool, wait_for, wakes
from tests.integration.test_triggers import path_of, stored_secret
from tests.processes import VIGIL, serve_vigil, stop, vigil

SETTINGS_PAGES = {"/settings/monitors": "Monitors", "/settings/devices": "Devices", "/settings/tools": "Tools",
                  "/settings/connections": "Connections", "/settings/wake-endpoints": "Wake endpoints",
                  "/settings/tokens": "Tokens", "/settings/models": "Models"}


def soup(response) -> BeautifulSoup:
    assert response.status_code == 200, response.text
    return BeautifulSoup(response.text, "html.parser")


def test_favicon_is_vigils_own_svg_where_browsers_look(client):
    for path in ("/favicon.ico", "/static/favicon.svg"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert response.headers["content-type"].startswith("image/svg+xml"), path
        assert response.text.lstrip().startswith("<svg") and "<script" not in response.text


def test_favicon_linked_from_every_page(client, owner):
    assert soup(client.get("/login")).select_one('link[rel="icon"]')["href"] == "/static/favicon.svg"
    login(client)
    assert soup(client.get("/settings/tools")).select_one('link[rel="icon"]')["href"] == "/static/favicon.svg"


@pytest.mark.parametrize("path", sorted(SETTINGS_PAGES))
def test_nav_marks_the_current_page_in_plain_words(client, owner, path):
    login(client)
    nav = soup(client.get(path)).select_one("header.top nav")
    assert [link.get_text() for link in nav.select("a")] == list(SETTINGS_PAGES.values())
    [current] = nav.select('a[aria-current="page"]')
    assert current["href"] == path and "current" in current["class"]
    assert "Settings →" not in nav.get_text()


def test_nav_marks_monitors_on_a_monitors_page_and_nothing_on_a_conversation(client, owner):
    login(client)
    monitor = tool(client, owner[1], "monitor_create", {"description": "the deploy finishes",
                                                        "source": {"type": "webhook"}}).json()["result"]
    page = soup(client.get(f"/monitors/{monitor['monitor_id']}"))
    [current] = page.select('header.top nav a[aria-current="page"]')
    assert current["href"] == "/settings/monitors"
    conversation = page.select_one("aside.sidebar li a")["href"]
    assert soup(client.get(conversation)).select('header.top nav a[aria-current="page"]') == []


@pytest.mark.parametrize("path, words", [("/settings/tools", "No tools yet: your agent's runtime registers one"),
                                         ("/settings/connections", "No connections yet: add an MCP server")])
def test_empty_tools_and_connections_say_what_to_do(client, owner, path, words):
    login(client)
    page = soup(client.get(path))
    table = page.select_one("table.listing")
    [row] = table.select("tbody tr")
    cell = row.select_one("td.empty")
    assert row["id"] == path.rsplit("/", 1)[1] + "-empty" and cell["colspan"] == "5"
    assert cell.get_text(" ", strip=True).startswith(words) and cell.select_one(".hint")


def test_settings_forms_share_one_layout(client, owner):
    login(client)
    for path, form in (("/settings/tokens", 'form[action="/settings/tokens"]'),
                       ("/settings/models", 'form[action="/settings/models"]'),
                       ("/settings/devices", 'form[action="/settings/devices/pair-code"]'),
                       ("/settings/connections", 'form[action="/settings/connections"]')):
        found = soup(client.get(path)).select_one(form)
        assert "settings-form" in found["class"], path
        assert all(label.select_one("input") for label in found.select("label")), path


def signed_link_wakes(client, owner, drain, payload: dict) -> tuple[dict, str]:
    """A signed trigger link created, then called once: its result and its secret."""
    body = tool(client, owner[1], "monitor_create", {"description": "the deploy finishes", "max_wakes": 5,
                                                     "source": {"type": "webhook", "signature": "hmac_sha256"}})
    result = body.json()["result"]
    secret = stored_secret(result["monitor_id"])
    content = json.dumps(payload).encode()
    response = client.post(path_of(result["url"]), content=content, headers=sign("hmac_sha256", secret, content,
                                                                                  time.time()))
    assert response.status_code == 202, response.text
    drain()
    return result, secret


def test_log_lines_when_a_monitor_is_created_and_wakes_without_its_secrets(client, owner, drain, caplog):
    caplog.set_level(logging.INFO)
    result, secret = signed_link_wakes(client, owner, drain, {"status": "deployed"})
    monitor_id = result["monitor_id"]
    [wake] = wakes(monitor_id)
    with db():
        conversation = Message.get_by_id(wake.id).conversation_id
    # Vigil's own lines (the test client's httpx logs the URLs it calls, the link's among them)
    lines = [record.getMessage() for record in caplog.records if not record.name.startswith("httpx")]
    assert f"monitor {monitor_id} created: webhook/every_call, conversation {conversation}" in lines, lines
    [woke] = [line for line in lines if line.startswith(f"monitor {monitor_id} woke")]
    assert woke.startswith(f"monitor {monitor_id} woke its conversation: wake ") and woke.endswith("(trigger)")
    link_token = path_of(result["url"]).rsplit("/", 1)[1]
    for kept in (link_token, secret, owner[1], "deployed"):
        assert not [line for line in lines if kept in line], kept


def test_a_wake_reads_as_words_with_the_untrusted_part_folded(client, owner, drain):
    login(client)
    result, _ = signed_link_wakes(client, owner, drain, {"status": "deployed", "version": "1.2.3"})
    page = soup(client.get(soup(client.get("/settings/monitors")).select_one("aside.sidebar li a")["href"]))
    wake = page.select_one("li.message.wake.wake-trigger")
    summary = wake.select_one(".content .wake-summary").get_text()
    assert summary.startswith("the deploy finishes: ") and "1.2.3" in summary
    [folded] = wake.select("details.untrusted")
    assert "open" not in folded.attrs and '"version": "1.2.3"' in folded.select_one("pre").get_text()
    words = [part.get_text() for part in wake.select("p.wake-text")]
    assert words[0].startswith("Monitor fired: the deploy finishes") and "<<<" not in wake.get_text()
    assert wake.select("pre.content") == []  # the raw prompt text is not shown whole in monospace any more


def test_embedded_serve_logs_a_monitor_created_and_its_wake_without_the_link(tmp_path):
    """What `./scripts/run` prints (`vigil serve` on SQLite): the two lines, and never the link's token."""
    env = {"VIGIL_DATA_DIR": str(tmp_path / "data"), "DATABASE_URL": "", "REDIS_URL": "",
           "SCHEDULER_TICK_SECONDS": "0.2"}
    log = tmp_path / "serve.log"
    served = serve_vigil([VIGIL, "serve"], env, log)
    try:
        vigil("user", "create", "me@example.com", "--password", "a-good-password", env=env)
        token = vigil("token", "create", "--user", "me@example.com", env=env).strip().splitlines()[-1]
        auth = {"Authorization": f"Bearer {token}"}
        created = requests.post(f"{served.base}/api/tool/monitor", headers=auth, json={
            "action": "monitor_create", "context": {"conversation_id": "laptop-1", "channel": "chat"},
            "arguments": {"description": "the deploy webhook fires", "source": {"type": "webhook"}}}).json()
        assert created["ok"], created
        monitor_id, link = created["result"]["monitor_id"], path_of(created["result"]["url"])
        assert requests.post(served.base + link, json={"status": "deployed"}).status_code == 202
        wait_for(lambda: f"monitor {monitor_id} woke its conversation: wake " in log.read_text())
    finally:
        stop(served.process)
    text = log.read_text()
    assert f"INFO models.monitors: monitor {monitor_id} created: webhook/every_call, conversation " in text
    assert link.rsplit("/", 1)[1] not in text and token not in text
