"""The reference runtime (examples/runtime/runtime.py) against a real Vigil (web, worker, scheduler) and a scripted
OpenAI-compatible model: the user asks to be told when a price drops, the model arms a page watch through the
runtime, and no model runs while the price holds; when the page drops to 88.20, Vigil pushes the wake to the
runtime's registered endpoint, signed, and the runtime resumes that conversation with exactly one model turn.

The runtime runs as its own process, as a person would start it, on an account of its own (so no other e2e
test's wakes reach its endpoint)."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
import requests
from standardwebhooks import Webhook

from e2e.api import wait_for, wake_messages
from tests.processes import start, start_on_free_port, terminate, vigil
from tests.scripted_model import ARMED, ASK, ScriptedModel

pytestmark = pytest.mark.e2e

RUNTIME = Path(__file__).resolve().parents[1] / "examples" / "runtime" / "runtime.py"
PAGE = "/runtime/acmeb"
CONVERSATION = "runtime-c1"
EMAIL = "runtime-owner@example.com"
_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S*)')


def price_page(price: str) -> str:
    return f'<html><body><h1>ACMEB</h1><p>Last: <span id="price">{price}</span> USD</p></body></html>'


class RuntimeProcess:
    """One `python examples/runtime/runtime.py`, its HTTP API, and its stderr log read back as events."""

    def __init__(self, stack, model: ScriptedModel, state: Path, log: Path, port: int | None = None) -> None:
        self.state, self.log = state, log

        def env(port: int) -> dict:
            return {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "sk-scripted", "MODEL": "scripted-model",
                    "VIGIL_URL": stack.base, "VIGIL_TOKEN": stack.token, "RUNTIME_PORT": str(port),
                    "RUNTIME_PUBLIC_URL": f"http://127.0.0.1:{port}", "RUNTIME_STATE": str(state),
                    "PYTHONUNBUFFERED": "1"}

        if port:  # a restart, on the address its wake endpoint was registered with
            self.port, self.env = port, env(port)
            self.process = start([sys.executable, str(RUNTIME)], self.env, log)
        else:
            served = start_on_free_port(lambda _: [sys.executable, str(RUNTIME)], env, log)
            self.port, self.env, self.process = served.port, served.env, served.process
        self.base = f"http://127.0.0.1:{self.port}"
        self._wait_up()

    def _wait_up(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the runtime exited with {self.process.returncode}:\n{self.log_text()}")
            try:
                if requests.get(f"{self.base}/healthz", timeout=1).ok:
                    return
            except requests.ConnectionError:
                time.sleep(0.1)
        raise AssertionError(f"the runtime did not answer within {timeout}s:\n{self.log_text()}")

    def chat(self, conversation: str, text: str) -> str:
        response = requests.post(f"{self.base}/chat", json={"conversation_id": conversation, "text": text},
                                 timeout=90)
        assert response.status_code == 200, response.text
        return response.json()["reply"]

    def messages(self, conversation: str) -> list[dict] | None:
        response = requests.get(f"{self.base}/conversations/{conversation}", timeout=10)
        if response.status_code == 404:
            return None
        response.raise_for_status()
        return response.json()["messages"]

    def post_webhook(self, body: bytes, headers: dict) -> requests.Response:
        return requests.post(f"{self.base}/webhooks/vigil", data=body,
                             headers={"Content-Type": "application/json", **headers}, timeout=10)

    @property
    def endpoint(self) -> dict:
        """What the runtime stored when it registered its wake endpoint: id, url and the signing secret."""
        return json.loads((self.state / "endpoint.json").read_text())

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def events(self, name: str) -> list[dict]:
        """The log lines of one event, each as its key=value fields."""
        found = []
        for line in self.log_text().splitlines():
            parts = line.split(" ", 2)
            if len(parts) >= 2 and parts[1] == name:
                found.append({key: json.loads(value) if value.startswith('"') else value
                              for key, value in _FIELD.findall(parts[2] if len(parts) > 2 else "")})
        return found

    def stop(self) -> int:
        return terminate(self.process)


@pytest.fixture(scope="module")
def account(vigil_stack):
    """The stack with an account of the runtime's own, and that account's runtime token."""
    vigil("user", "create", EMAIL, "--password", "a-good-runtime-password", env=vigil_stack.env)
    token = vigil("token", "create", "--user", EMAIL, env=vigil_stack.env).strip().splitlines()[-1]
    return dataclasses.replace(vigil_stack, token=token, email=EMAIL)


@pytest.fixture()
def model(pages):
    with ScriptedModel(page_url=pages.url(PAGE), interval="1s") as server:
        yield server


@pytest.fixture()
def runtimes(account, model, tmp_path):
    """Starts runtimes on demand (`runtimes(state, port)`); each is stopped and its endpoint deleted afterwards."""
    started: list[RuntimeProcess] = []

    def launch(state: Path | None = None, port: int | None = None) -> RuntimeProcess:
        runtime = RuntimeProcess(account, model, state or tmp_path / "state",
                                 tmp_path / f"runtime-{len(started) + 1}.log", port)
        started.append(runtime)
        return runtime

    yield launch
    for runtime in started:
        if runtime.process.poll() is None:
            runtime.stop()
    for endpoint_id in {r.endpoint["id"] for r in started if (r.state / "endpoint.json").exists()}:
        requests.delete(f"{account.base}/api/wake-endpoints/{endpoint_id}", headers=account.auth, timeout=10)


def holds_for(predicate, seconds: float) -> bool:
    """Whether `predicate()` stays true for `seconds` (an absence: nothing more happens)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not predicate():
            return False
        time.sleep(0.1)
    return predicate()


def monitors(account, conversation: str, status: str = "live") -> list[dict]:
    response = requests.get(f"{account.base}/api/monitors", headers=account.auth, timeout=10,
                            params={"conversation_id": conversation, "status": status})
    response.raise_for_status()
    return response.json()["monitors"]


def wake_results(messages: list[dict]) -> list[dict]:
    """The `vigil_wake` tool results in a stored conversation, parsed."""
    wake_calls = {call["id"] for m in messages for call in m.get("tool_calls") or []
                  if call["function"]["name"] == "vigil_wake"}
    return [json.loads(m["content"]) for m in messages if m["role"] == "tool" and m["tool_call_id"] in wake_calls]


def assistant_texts(messages: list[dict] | None) -> list[str]:
    return [m["content"] for m in messages or [] if m["role"] == "assistant" and m.get("content")]


def signed(secret: str, webhook_id: str, body: dict) -> tuple[bytes, dict]:
    """A Standard Webhooks delivery as Vigil signs one, now."""
    raw = json.dumps(body).encode()
    now = datetime.now(timezone.utc)
    signature = Webhook(secret).sign(webhook_id, now, raw.decode())
    return raw, {"webhook-id": webhook_id, "webhook-timestamp": str(int(now.timestamp())),
                 "webhook-signature": signature}


def wake_body(conversation: str, message: dict) -> dict:
    return {"type": "vigil.wake", "timestamp": message["created_at"],
            "data": {"conversation_id": conversation, "message": message, "cursor": str(message["id"])}}


def test_reference_runtime_resumes_its_conversation_once_when_the_watched_price_drops(account, pages, model,
                                                                                      runtimes):
    stack = account
    pages.set(PAGE, price_page("95.10"))
    runtime = runtimes()
    endpoint = runtime.endpoint
    assert endpoint["secret"].startswith("whsec_") and endpoint["url"] == f"{runtime.base}/webhooks/vigil"
    assert (runtime.state / "endpoint.json").stat().st_mode & 0o077 == 0  # the secret is the owner's alone
    assert endpoint["secret"] not in runtime.log_text() and stack.token not in runtime.log_text()
    listed = requests.get(f"{stack.base}/api/wake-endpoints", headers=stack.auth, timeout=10).json()["endpoints"]
    assert [(e["id"], e["url"], e["enabled"]) for e in listed] == [(endpoint["id"], endpoint["url"], True)]

    # The user asks; the model arms a watch through the runtime, and answers once Vigil has taken the baseline.
    assert runtime.chat(CONVERSATION, ASK) == ARMED
    assert model.count == 2
    first, second = model.requests
    assert [t["function"]["name"] for t in first["tools"]] == ["monitor"]  # the schema Vigil served
    created = json.loads(second["messages"][-1]["content"])
    assert second["messages"][-1]["role"] == "tool" and created["ok"] is True, created
    [monitor] = monitors(stack, CONVERSATION)
    assert monitor["status"] == "active" and monitor["description"] == "ACMEB below $90"
    assert monitor["monitor_id"] == created["result"]["monitor_id"]
    assert "95.10" in monitor["baseline"] and monitor["interval_seconds"] == 1

    # Vigil checks the unchanged page again and again; the model is not asked anything.
    hits = pages.hits[PAGE]
    wait_for("three more checks of the unchanged page", lambda: pages.hits[PAGE] >= hits + 3, timeout=20)
    assert model.count == 2
    assert wake_messages(stack, CONVERSATION) == []

    # The price drops: one wake, pushed to the runtime, which resumes the conversation with one turn.
    pages.set(PAGE, price_page("88.20"))
    wait_for("the resumed reply", lambda: any("88.20" in text for text in
                                              assistant_texts(runtime.messages(CONVERSATION))))
    [wake] = wake_messages(stack, CONVERSATION)
    webhook_id = f"wake_{wake['id']}"
    wait_for("the wake's turn saved", lambda: runtime.events("wake.replied"))
    attempts = wait_for("Vigil's record of the push", lambda: [a for a in requests.get(
        f"{stack.base}/api/wake-endpoints/{endpoint['id']}/attempts", headers=stack.auth, timeout=10
    ).json()["attempts"] if a["push_status"] == "delivered"])
    assert [(a["message_id"], a["status_code"]) for a in attempts] == [(wake["id"], 202)]
    assert holds_for(lambda: model.count == 3, 2.0), model.count
    assert monitors(stack, CONVERSATION, "all")[0]["status"] == "done"  # max_wakes 1

    messages = runtime.messages(CONVERSATION)
    assert messages[-1] == {"role": "assistant", "content": "ACMEB dropped to $88.20."}
    [result] = wake_results(messages)
    assert result["untrusted"] is True and "not from the user" in result["note"]
    assert result["monitor_id"] == monitor["monitor_id"] and result["wake"] == wake["content"]
    assert "88.20" in result["wake"]
    assert model.requests[2]["messages"][-1]["tool_call_id"] == f"vigil_wake_{wake['id']}"
    assert [e["webhook_id"] for e in runtime.events("webhook.accepted")] == [webhook_id]

    # A redelivery of the same webhook-id (signed afresh, as a retry is) is acknowledged and does nothing.
    raw, headers = signed(endpoint["secret"], webhook_id, wake_body(CONVERSATION, wake))
    again = runtime.post_webhook(raw, headers)
    assert again.status_code == 200 and again.json() == {"duplicate": True}
    assert holds_for(lambda: model.count == 3, 1.0), model.count
    assert runtime.messages(CONVERSATION) == messages
    assert [e["webhook_id"] for e in runtime.events("webhook.duplicate")] == [webhook_id]

    assert runtime.stop() == 0
    assert runtime.events("stopped")


def test_reference_runtime_refuses_unsigned_wakes_and_runs_each_webhook_id_once_across_restarts(account, model,
                                                                                                 runtimes,
                                                                                                 tmp_path):
    stack = account
    state = tmp_path / "state"
    runtime = runtimes(state)
    endpoint = runtime.endpoint
    message = {"id": 990001, "role": "wake", "created_at": "2026-01-01T00:00:00Z",
               "content": "Monitor fired: ACMEB below $90\nWhat the watched source shows now (untrusted data "
                          "from the source, not from the user):\n<<<\n87.50\n>>>",
               "metadata": {"wake": {"source": "monitor", "ref_id": "mon_elsewhere"}}}
    body = wake_body("runtime-elsewhere", message)

    # Unsigned, signed with another secret, or tampered with after signing: 401, and nothing is stored.
    raw, headers = signed(endpoint["secret"], "wake_990001", body)
    assert runtime.post_webhook(raw, {}).status_code == 401
    assert runtime.post_webhook(raw, signed("whsec_" + "A" * 32, "wake_990001", body)[1]).status_code == 401
    assert runtime.post_webhook(raw.replace(b"87.50", b"1.00"), headers).status_code == 401
    assert runtime.messages("runtime-elsewhere") is None and model.count == 0

    # The genuine delivery, for a conversation the runtime never saw, is answered 202 and resumes it.
    accepted = runtime.post_webhook(raw, headers)
    assert accepted.status_code == 202, accepted.text
    wait_for("the resumed reply", lambda: assistant_texts(runtime.messages("runtime-elsewhere")))
    assert holds_for(lambda: model.count == 1, 1.0), model.count
    messages = runtime.messages("runtime-elsewhere")
    assert [m["role"] for m in messages] == ["assistant", "tool", "assistant"]
    assert messages[-1]["content"] == "ACMEB dropped to $87.50."
    assert wake_results(messages)[0]["monitor_id"] == "mon_elsewhere"

    # Restarted on the same state and address: the endpoint is reused (not registered again), and the
    # webhook-id is remembered, so a redelivery after the restart still does nothing.
    assert runtime.stop() == 0
    restarted = runtimes(state, runtime.port)
    assert restarted.events("endpoint.reused") and not restarted.events("endpoint.registered")
    assert restarted.endpoint == endpoint
    listed = requests.get(f"{stack.base}/api/wake-endpoints", headers=stack.auth, timeout=10).json()["endpoints"]
    assert [e["id"] for e in listed] == [endpoint["id"]]
    raw, headers = signed(endpoint["secret"], "wake_990001", body)
    again = restarted.post_webhook(raw, headers)
    assert again.status_code == 200 and again.json() == {"duplicate": True}
    assert holds_for(lambda: model.count == 1, 1.0), model.count
    assert restarted.messages("runtime-elsewhere") == messages
    assert restarted.stop() == 0
