"""New rows reach the owner's open pages (issue 30): a monitor created while Settings → Monitors is open, the
conversation the same call created, a token made in another tab or with `vigil token create` — as the events on
/api/events and the partials on /ui/events, against a real `vigil web` on Redis; another account's streams get
none of them."""

from __future__ import annotations

import re
import socket
import subprocess
import threading

import pytest
import requests

from tests.integration.helpers import running_stack, wait_for
from tests.processes import VIGIL, vigil


class Stream:
    """One open event stream, read on a thread: its events as (name, data text), in order."""

    def __init__(self, url: str, session: requests.Session | None = None, headers: dict | None = None) -> None:
        self.events: list[tuple[str, str]] = []
        self.ready = threading.Event()
        self.response = (session or requests).get(url, headers=headers or {}, stream=True, timeout=(5, 120))
        assert self.response.status_code == 200, self.response.text
        threading.Thread(target=self._read, daemon=True).start()
        assert self.ready.wait(10), f"{url} never said it was connected"

    def _read(self) -> None:
        name, data = None, []
        try:
            for line in self._lines():
                if line.startswith(": connected"):
                    self.ready.set()
                elif line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    data.append(line[6:])
                elif line == "" and name:
                    self.events.append((name, "\n".join(data)))
                    name, data = None, []
        except (requests.RequestException, AttributeError):  # closed by the test (AttributeError: while reading)
            pass

    def _lines(self):
        """The stream's lines, split at Litestar's CRLF only: requests' iter_lines makes an empty line of a CRLF
        that a chunk boundary cuts in two, which ended a long event early."""
        buffer = ""
        for chunk in self.response.iter_content(chunk_size=None, decode_unicode=True):
            buffer += chunk
            *lines, buffer = buffer.split("\r\n")
            yield from lines

    def named(self, name: str) -> list[str]:
        return [data for event, data in self.events if event == name]

    def wait(self, name: str, containing: str = "") -> str:
        return wait_for(lambda: next((d for d in self.named(name) if containing in d), None), 15,
                        f"no {name} event containing {containing!r}; got {[e for e, _ in self.events]}")

    def text(self) -> str:
        return "\n".join(f"{name} {data}" for name, data in self.events)

    def close(self) -> None:
        """Shut the socket down first: the reading thread is blocked in recv, and closing the response under it
        waits until the server's next keepalive comment (15 s) before it returns."""
        connection = getattr(self.response.raw, "_connection", None)
        sock = getattr(connection, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.response.close()


def signed_in(base: str, email: str, password: str) -> tuple[requests.Session, str]:
    """A browser session and the CSRF token of its pages."""
    session = requests.Session()
    form = session.get(f"{base}/login", timeout=30).text
    csrf = re.search(r'name="_csrf" value="([^"]+)"', form).group(1)
    session.post(f"{base}/login", data={"email": email, "password": password, "_csrf": csrf}, timeout=30)
    page = session.get(f"{base}/settings/monitors", timeout=30).text
    return session, re.search(r'"X-CSRF-Token": "([^"]+)"', page).group(1)


def webhook_monitor(base: str, token: str, conversation: str, description: str) -> str:
    answer = requests.post(f"{base}/api/tool/monitor", headers={"Authorization": f"Bearer {token}"}, timeout=30,
                           json={"action": "monitor_create", "context": {"conversation_id": conversation},
                                 "arguments": {"description": description, "source": {"type": "webhook"}}}).json()
    assert answer["ok"], answer
    return answer["result"]["monitor_id"]


@pytest.fixture()
def stack(postgres, tmp_path, owner, stranger):
    with running_stack(tmp_path, worker=False) as running:
        yield running


@pytest.fixture()
def streams(stack):
    """The owner's page stream and API stream, and the stranger's, all open."""
    owner_session, owner_csrf = signed_in(stack.base, "owner@example.com", "owner-password")
    stranger_session, _ = signed_in(stack.base, "stranger@example.com", "stranger-password")
    opened = {"owner_ui": Stream(f"{stack.base}/ui/events", owner_session),
              "stranger_ui": Stream(f"{stack.base}/ui/events", stranger_session)}
    yield opened, owner_session, owner_csrf
    for stream in opened.values():
        stream.close()


def test_live_rows_new_monitor_and_its_new_conversation_reach_only_the_owners_pages(stack, streams, owner,
                                                                                   stranger):
    opened, _, _ = streams
    owner_api = Stream(f"{stack.base}/api/events", headers={"Authorization": f"Bearer {owner[1]}"})
    stranger_api = Stream(f"{stack.base}/api/events", headers={"Authorization": f"Bearer {stranger[1]}"})
    ui = opened["owner_ui"]

    first = webhook_monitor(stack.base, owner[1], "live-new-conversation", "the deploy hook (live)")

    created = owner_api.wait("conversation.created")
    conversation = requests.get(f"{stack.base}/api/conversations/live-new-conversation/messages",
                                headers={"Authorization": f"Bearer {owner[1]}"}, timeout=30)
    assert conversation.status_code == 200
    item = ui.wait("conversations", "live-new-conversation")
    pk = re.search(r'<li id="conversation-(\d+)"', item).group(1)
    assert created == ('{"conversation_id": "live-new-conversation", "id": %s, "title": "live-new-conversation", '
                       '"watching": false}' % pk)  # announced when the call named it, before the monitor existed
    assert f'href="/conversations/{pk}"' in item

    assert first in owner_api.wait("monitor.created", first)
    names = [name for name, _ in owner_api.events]
    assert names.index("conversation.created") < names.index("monitor.created")
    row = ui.wait("monitors", first)
    assert row.lstrip().startswith(f'<tr id="monitor-{first}"') and "the deploy hook (live)" in row
    assert ui.wait(f"monitors-{pk}", first) == row  # the conversation page's table takes it too
    table = ui.wait("monitor-table", first)  # a page still showing "No monitors yet" takes the whole table
    assert '<tbody id="monitors" sse-swap="monitors"' in table and f'<tr id="monitor-{first}"' in table
    assert ui.wait("conversation-" + pk, 'class="watching"')  # then its watching mark, as any change sends

    # A second monitor in the same conversation: a row, and no second sidebar entry.
    second = webhook_monitor(stack.base, owner[1], "live-new-conversation", "the rollback hook (live)")
    ui.wait("monitors", second)
    assert len(owner_api.named("conversation.created")) == 1 and len(ui.named("conversations")) == 1

    # The stranger's streams: their own monitor arrives, and nothing of the owner's came before it.
    theirs = webhook_monitor(stack.base, stranger[1], "live-new-conversation", "the stranger's hook")
    opened["stranger_ui"].wait("monitors", theirs)
    stranger_api.wait("monitor.created", theirs)
    for stream in (opened["stranger_ui"], stranger_api):
        assert first not in stream.text() and second not in stream.text()
        assert f"conversation-{pk}" not in stream.text()
    assert theirs not in ui.text() and theirs not in owner_api.text()
    owner_api.close()
    stranger_api.close()


def test_live_rows_new_token_reaches_the_owners_pages_without_its_secret(stack, streams, stranger):
    opened, session, csrf = streams
    ui = opened["owner_ui"]

    made = session.post(f"{stack.base}/api/tokens", json={"label": "another tab"}, headers={"X-CSRF-Token": csrf},
                        timeout=30)
    assert made.status_code == 201, made.text
    row = ui.wait("tokens", f'id="token-{made.json()["id"]}"')
    assert "another tab" in row and f'name="_csrf" value="{csrf}"' in row  # its Revoke form works on this page

    printed = vigil("token", "create", "--user", "owner@example.com", "--label", "from the CLI", env=stack.env)
    from_cli = printed.strip().splitlines()[-1]
    cli_row = ui.wait("tokens", "from the CLI")
    assert re.search(r'<tr id="token-\d+" sse-swap="token-\d+"', cli_row)

    for secret in (made.json()["token"], from_cli):
        assert secret not in ui.text() and secret not in opened["stranger_ui"].text()
    vigil("token", "create", "--user", "stranger@example.com", "--label", "the stranger's", env=stack.env)
    opened["stranger_ui"].wait("tokens", "the stranger&#39;s")
    assert [name for name, _ in opened["stranger_ui"].events if name == "tokens"] == ["tokens"]


def test_live_rows_revoked_token_leaves_only_the_owners_pages(stack, streams):
    opened, session, csrf = streams
    made = session.post(f"{stack.base}/api/tokens", json={"label": "to revoke"}, headers={"X-CSRF-Token": csrf},
                        timeout=30).json()
    page = session.get(f"{stack.base}/settings/tokens", timeout=30).text
    assert f'<tr id="token-{made["id"]}" sse-swap="token-{made["id"]}" hx-swap="delete">' in page

    gone = session.delete(f"{stack.base}/api/tokens/{made['id']}", headers={"X-CSRF-Token": csrf}, timeout=30)
    assert gone.status_code == 204, gone.text
    assert opened["owner_ui"].wait(f"token-{made['id']}") == "revoked"  # the row deletes itself (hx-swap delete)

    # The stranger's stream: their own revoke arrives, and the owner's never came before it.
    theirs, their_csrf = signed_in(stack.base, "stranger@example.com", "stranger-password")
    their_token = theirs.post(f"{stack.base}/api/tokens", json={"label": "theirs"},
                              headers={"X-CSRF-Token": their_csrf}, timeout=30).json()["id"]
    theirs.delete(f"{stack.base}/api/tokens/{their_token}", headers={"X-CSRF-Token": their_csrf}, timeout=30)
    opened["stranger_ui"].wait(f"token-{their_token}")
    assert f"token-{made['id']}" not in [name for name, _ in opened["stranger_ui"].events]
    assert f"token-{their_token}" not in [name for name, _ in opened["owner_ui"].events]


def test_live_rows_command_waiting_for_the_owner_brings_its_approval_card(stack, streams, owner, tmp_path):
    opened, _, _ = streams
    code = vigil("device", "pair-code", "--user", "owner@example.com", "--name", "live-box", env=stack.env).split()[-1]
    paired = subprocess.run([VIGIL, "runner", "pair", "--server", stack.base, "--code", code, "--state-dir",
                             str(tmp_path / "runner")], capture_output=True, text=True, timeout=60)
    assert paired.returncode == 0, paired.stdout + paired.stderr
    answer = requests.post(f"{stack.base}/api/tool/monitor", headers={"Authorization": f"Bearer {owner[1]}"},
                           timeout=30, json={"action": "monitor_create", "context": {"conversation_id": "live-cmd"},
                                             "arguments": {"description": "the tests pass (live)", "source": {
                                                 "type": "command", "device": "live-box", "command": "make test"}}})
    result = answer.json()["result"]
    assert result["status"] == "awaiting_approval", result
    card = opened["owner_ui"].wait("awaiting", f'id="command-{result["monitor_id"]}"')
    assert "make test" in card and 'hx-post="/api/monitors/%s/approve"' % result["monitor_id"] in card
    opened["owner_ui"].wait("monitors", result["monitor_id"])
    pk = re.search(r'<li id="conversation-(\d+)"', opened["owner_ui"].wait("conversations", "live-cmd")).group(1)
    assert opened["owner_ui"].wait(f"command-cards-{pk}", result["monitor_id"]) == card  # its conversation's page
    assert result["monitor_id"] not in opened["stranger_ui"].text()


def named_conversation(base: str, token: str, ui: Stream, conversation: str) -> str:
    """A conversation an agent's tool call just named (and so created), with no monitor: its page's id."""
    requests.post(f"{base}/api/tool/monitor", headers={"Authorization": f"Bearer {token}"}, timeout=30,
                  json={"action": "monitor_list", "context": {"conversation_id": conversation}}).raise_for_status()
    return re.search(r'<li id="conversation-(\d+)"', ui.wait("conversations", conversation)).group(1)


def test_live_rows_conversation_page_takes_its_own_table_and_cards_only(stack, streams, owner, stranger):
    opened, session, _ = streams
    ui = opened["owner_ui"]
    here = named_conversation(stack.base, owner[1], ui, "live-cards-here")
    elsewhere = named_conversation(stack.base, owner[1], ui, "live-cards-elsewhere")
    page = session.get(f"{stack.base}/conversations/{here}", timeout=30).text
    assert f'<div id="monitor-table-{here}" sse-swap="monitor-table-{here}"' in page and "None." in page

    hook = webhook_monitor(stack.base, owner[1], "live-cards-here", "the deploy hook (cards)")
    table = ui.wait(f"monitor-table-{here}", hook)  # "None." turns into the table, its rows named for this page
    assert f'<tbody id="monitors-{here}" sse-swap="monitors-{here}"' in table and f'<tr id="monitor-{hook}"' in table
    card = ui.wait(f"trigger-cards-{here}", hook)
    assert card.lstrip().startswith(f'<section class="trigger-card" id="trigger-{hook}">') and "/api/triggers/" in card

    arguments = {"description": "ship it? (cards)", "source": {"type": "approval", "question": "Ship the release?"}}
    asked = requests.post(f"{stack.base}/api/tool/monitor", headers={"Authorization": f"Bearer {owner[1]}"},
                          timeout=30, json={"action": "monitor_create", "arguments": arguments,
                                            "context": {"conversation_id": "live-cards-here"}}).json()
    approval = asked["result"]["monitor_id"]
    card = ui.wait(f"approval-cards-{here}", approval)
    assert f'id="approval-{approval}" sse-swap="approval-{approval}"' in card
    assert asked["result"]["approval_url"] in card and "Ship the release?" in card
    ui.wait(f"monitors-{here}", approval)  # the table the first one brought takes the second row

    # Another conversation's page takes nothing of these; the stranger's stream gets only their own.
    assert not [name for name, _ in ui.events if name.endswith(f"-{elsewhere}") and name != f"conversation-{elsewhere}"]
    theirs = webhook_monitor(stack.base, stranger[1], "live-cards-here", "the stranger's hook")
    opened["stranger_ui"].wait("monitors", theirs)
    assert hook not in opened["stranger_ui"].text() and approval not in opened["stranger_ui"].text()
    assert not [name for name, _ in opened["stranger_ui"].events if name.endswith(f"-{here}")]
