"""New rows reach the owner's open pages (issue 30): a monitor created while Settings → Monitors is open, the
conversation the same call created, a token made in another tab or with `vigil token create` — as the events on
/api/events and the partials on /ui/events, against a real `vigil web` on Redis; another account's streams get
none of them."""

from __future__ import annotations

import re
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
            for line in self.response.iter_lines(decode_unicode=True):
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

    def named(self, name: str) -> list[str]:
        return [data for event, data in self.events if event == name]

    def wait(self, name: str, containing: str = "") -> str:
        return wait_for(lambda: next((d for d in self.named(name) if containing in d), None), 15,
                        f"no {name} event containing {containing!r}; got {[e for e, _ in self.events]}")

    def text(self) -> str:
        return "\n".join(f"{name} {data}" for name, data in self.events)

    def close(self) -> None:
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
    assert re.search(r'<tr id="token-\d+">', cli_row)

    for secret in (made.json()["token"], from_cli):
        assert secret not in ui.text() and secret not in opened["stranger_ui"].text()
    vigil("token", "create", "--user", "stranger@example.com", "--label", "the stranger's", env=stack.env)
    opened["stranger_ui"].wait("tokens", "the stranger&#39;s")
    assert [name for name, _ in opened["stranger_ui"].events if name == "tokens"] == ["tokens"]


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
    assert result["monitor_id"] not in opened["stranger_ui"].text()
