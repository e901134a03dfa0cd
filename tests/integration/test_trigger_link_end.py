"""A trigger link tells the truth about when it ends (issue 30): the create result gives its max_wakes (default 1)
and says so, the row and the card say "ends after N wakes", and once used up the card shows it ended, without
Copy, the example or Reveal secret."""

from __future__ import annotations

import re
import time

from engine.signatures import sign
from models.tables import TriggerLink
from tests.integration.helpers import db, login, tool


def create(client, token: str, **arguments) -> dict:
    body = tool(client, token, "monitor_create", {"description": "the nightly build calls back", "source": {
        "type": "webhook", "signature": "github"}, **arguments}, conversation="c-links").json()
    assert body["ok"], body
    return body["result"]


def card_of(client, monitor_id: str) -> str:
    page = client.get("/settings/monitors").text
    conversation_id = re.search(r'href="/conversations/(\d+)"', page).group(1)
    conversation = client.get(f"/conversations/{conversation_id}").text
    return re.search(rf'<section class="trigger-card[^"]*" id="trigger-{monitor_id}">.*?</section>', conversation,
                     re.S).group(0)


def signed(monitor_id: str, body: bytes) -> dict[str, str]:
    import tasks.runtime as runtime

    with db():
        secret = runtime.current().keyring.decrypt(TriggerLink.get(TriggerLink.monitor == monitor_id).secret_encrypted)
    return sign("github", secret, body, time.time())


def row_of(client, monitor_id: str) -> str:
    page = client.get("/settings/monitors").text
    return re.search(rf'<tr id="monitor-{monitor_id}".*?</tr>', page, re.S).group(0)


def test_trigger_link_result_says_it_ends_after_one_wake_by_default(client, owner):
    result = create(client, owner[1])
    assert result["max_wakes"] == 1 and result["wakes_left"] == 1
    assert any("ends after 1 wake" in note and "max_wakes" in note for note in result["notes"]), result["notes"]
    progress = create(client, owner[1], max_wakes=20)
    assert progress["max_wakes"] == 20 and not any("ends after" in note for note in progress["notes"])


def test_trigger_link_card_and_row_say_when_it_ends_and_show_it_ended(client, owner, drain):
    result = create(client, owner[1])
    monitor_id, path = result["monitor_id"], result["url"][result["url"].index("/api/triggers/"):]
    login(client)
    card = card_of(client, monitor_id)
    assert "ends after 1 wake" in card and ">Copy</button>" in card and "Reveal secret" in card
    assert "ends after 1 wake" in row_of(client, monitor_id)

    body = b'{"status": "done"}'
    assert client.post(path, content=body, headers=signed(monitor_id, body)).status_code == 202
    drain()
    assert client.post(path, content=body, headers=signed(monitor_id, body)).status_code == 404
    card = card_of(client, monitor_id)
    assert 'class="trigger-card ended"' in card and "ended: a POST now gets 404" in card
    assert ">Copy</button>" not in card and "Reveal secret" not in card and "Example curl" not in card
    assert "ends after 1 wake" in row_of(client, monitor_id)
