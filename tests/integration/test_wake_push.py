"""Wake pushes end to end: /api/wake-endpoints and the pushes to a real receiver on 127.0.0.1, every request it
gets verified with the Standard Webhooks reference library. A wake is pushed once per endpoint, signed, with
`webhook-id: wake_<message id>`; failed attempts are retried at Svix's times (the scheduler ticked ahead) with the
same webhook-id, so deduping on it gives one wake; 410 disables an endpoint until it is enabled again; Retry-After
is honoured; redirects are not followed; private addresses are refused at send time and bad URLs at registration;
a rotated secret signs beside the new one for 24 hours; accounts never see each other's endpoints nor wakes; bad
input stores nothing; a deleted endpoint gets nothing more; and a push whose message was lost is sent by the
scheduler's sweep.

The push actor reads the time itself (tasks.pushes.utcnow); the `clock` fixture points it at the test's clock, so
ticking the scheduler ahead makes a retry due for the actor too.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

import tasks.pushes as pushes
from engine.pushes import SCHEDULE
from models import utcnow
from models.tables import WakeAttempt, WakeEndpoint, WakePush
from tests.integration.helpers import db, login, tool, wakes


# --- the receiver -----------------------------------------------------------------------------------------

class Receiver:
    """A runtime's wake receiver: answers each POST with the next answer of its script (then 200), recording every
    request (path, lowercased headers, raw body) as it arrives. `hold()` makes the next request wait for
    `release()` before it is answered (a push in flight)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.script: list[int | tuple[int, dict]] = []
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.delay = delay
        self._held = 0
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _receiver_handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/hook"

    def answer(self, *answers: int | tuple[int, dict]) -> "Receiver":
        """The next answers, in order: a status, or (status, headers)."""
        with self._lock:
            self.script.extend(answers)
        return self

    def hold(self) -> None:
        with self._lock:
            self._held += 1
            self._release.clear()

    def release(self) -> None:
        self._release.set()

    def start(self) -> "Receiver":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()

    def take(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, dict, bool]:
        with self._lock:
            self.requests.append((path, headers, raw))
            held = self._held > 0
            if held:
                self._held -= 1
            answer = self.script.pop(0) if self.script else 200
        status, extra = answer if isinstance(answer, tuple) else (answer, {})
        return status, extra, held

    def wait_released(self) -> None:
        self._release.wait(120)

    def verified(self, secret: str) -> list[dict]:
        """Every request received, verified with `secret` (raises on any that does not verify)."""
        return [Webhook(secret).verify(raw, headers) for _, headers, raw in self.requests]

    def ids(self) -> list[str]:
        return [headers["webhook-id"] for _, headers, _ in self.requests]


class _Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        """A sender that went away (its worker killed, its timeout) is not worth a traceback."""


def _receiver_handler(receiver: Receiver):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, extra, held = receiver.take(self.path, {k.lower(): v for k, v in self.headers.items()}, raw)
            if held:
                receiver.wait_released()
            if receiver.delay:
                time.sleep(receiver.delay)
            answer = b"received" if status < 300 else f"not now ({status})".encode()
            self.send_response(status)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        do_GET = do_POST

        def log_message(self, *args) -> None:
            pass

    return Handler


@pytest.fixture()
def receiver():
    server = Receiver().start()
    yield server
    server.stop()


@pytest.fixture()
def other_receiver():
    server = Receiver().start()
    yield server
    server.stop()


@pytest.fixture()
def clock(run_due_checks, monkeypatch):
    """The test's clock for the scheduler and the push actor alike: `clock(seconds)` ticks that much ahead."""
    monkeypatch.setattr(pushes, "utcnow", run_due_checks.now)
    return run_due_checks


# --- helpers ---------------------------------------------------------------------------------------------

def auth(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def register(client, token: str, url: str, description: str = "my runtime") -> dict:
    answer = client.post("/api/wake-endpoints", headers=auth(token), json={"url": url, "description": description})
    assert answer.status_code == 201, answer.text
    assert answer.headers["cache-control"] == "no-store"
    return answer.json()


def listed(client, token: str) -> list[dict]:
    answer = client.get("/api/wake-endpoints", headers=auth(token))
    assert answer.status_code == 200, answer.text
    return answer.json()["endpoints"]


def attempts(client, token: str, endpoint_id: int) -> list[dict]:
    """The endpoint's attempts, oldest first."""
    answer = client.get(f"/api/wake-endpoints/{endpoint_id}/attempts", headers=auth(token))
    assert answer.status_code == 200, answer.text
    return answer.json()["attempts"][::-1]


def webhook_monitor(client, token: str, conversation: str = "conv-1") -> str:
    """A webhook monitor; the path of its trigger link."""
    created = tool(client, token, "monitor_create", {"description": "the job calls back",
                                                     "source": {"type": "webhook"}, "max_wakes": 20},
                   conversation=conversation).json()
    assert created["ok"], created
    url = created["result"]["url"]
    return url[url.index("/api/triggers/"):]


def wake_once(client, drain, path: str, fact: str):
    """POST a fact to the trigger link and process it: the wake message it wrote (and pushed)."""
    before = {m.id for m in wakes()}
    answer = client.post(path, json={"fact": fact}, headers={"Idempotency-Key": fact})
    assert answer.status_code == 202, answer.text
    drain()
    [wake] = [m for m in wakes() if m.id not in before]
    assert fact in wake.content
    return wake


def push_rows(endpoint_id: int | None = None) -> list[WakePush]:
    with db():
        query = WakePush.select().order_by(WakePush.id)
        if endpoint_id is not None:
            query = query.where(WakePush.endpoint == endpoint_id)
        return list(query)


def stored_endpoints() -> int:
    with db():
        return WakeEndpoint.select().count()


def parse(value: str) -> datetime:
    return datetime.fromisoformat(value.rstrip("Z"))


def waited(attempt: dict) -> float:
    """Seconds from an attempt to the next one it scheduled."""
    return (parse(attempt["next_attempt_at"]) - parse(attempt["attempted_at"])).total_seconds()


def tick_to(clock, when: datetime, past: float) -> None:
    """Tick the scheduler at `past` seconds after `when` (negative: before it)."""
    clock(max(0.0, (when - clock.now()).total_seconds() + past))


# --- delivery ---------------------------------------------------------------------------------------------

def test_wake_push_is_delivered_once_signed_with_the_wake_id(client, owner, drain, clock):
    receiver = Receiver(delay=0.05).start()
    try:
        endpoint = register(client, owner[1], receiver.url)
        assert endpoint["secret"].startswith("whsec_") and endpoint["enabled"] is True
        assert endpoint["url"] == receiver.url and endpoint["description"] == "my runtime"
        wake = wake_once(client, drain, webhook_monitor(client, owner[1]), "deployed-1.2.3")

        [(path, headers, raw)] = receiver.requests
        [payload] = receiver.verified(endpoint["secret"])
        assert path == "/hook" and headers["content-type"] == "application/json"
        assert headers["webhook-id"] == f"wake_{wake.id}" == f"wake_{payload['data']['message']['id']}"
        assert headers["user-agent"].startswith("Vigil/")
        assert abs(int(headers["webhook-timestamp"]) - time.time()) < 60
        assert payload["type"] == "vigil.wake" and payload["timestamp"] == payload["data"]["message"]["created_at"]
        assert payload["data"]["conversation_id"] == "conv-1" and payload["data"]["cursor"] == str(wake.id)
        message = payload["data"]["message"]
        assert message["role"] == "wake" and message["content"] == wake.content
        assert message["metadata"]["wake"]["source"] == "trigger"

        [attempt] = attempts(client, owner[1], endpoint["id"])
        assert attempt["status_code"] == 200 and attempt["message_id"] == wake.id
        assert attempt["push_status"] == "delivered" and attempt["next_attempt_at"] is None
        assert attempt["answer"] == "200: received" and attempt["latency_ms"] >= 50
        [push] = push_rows()
        assert (push.status, push.attempts, push.delivered_at is not None) == ("delivered", 1, True)

        for seconds in (5, 60, 3600):  # the sweep leaves a delivered push alone
            clock(seconds)
        assert len(receiver.requests) == 1
    finally:
        receiver.stop()


def test_wake_push_goes_to_every_endpoint_of_the_account(client, owner, drain, receiver, other_receiver):
    first = register(client, owner[1], receiver.url)
    second = register(client, owner[1], other_receiver.url + "?runtime=2", "a second runtime")
    wake = wake_once(client, drain, webhook_monitor(client, owner[1]), "fact-both")
    assert receiver.ids() == other_receiver.ids() == [f"wake_{wake.id}"]
    receiver.verified(first["secret"])
    other_receiver.verified(second["secret"])
    assert other_receiver.requests[0][0] == "/hook?runtime=2"
    with pytest.raises(WebhookVerificationError):  # each endpoint has its own secret
        receiver.verified(second["secret"])


def test_wake_push_retries_at_svix_times_and_is_delivered_once(client, owner, drain, clock, receiver):
    receiver.answer(503, 500, 503)
    endpoint = register(client, owner[1], receiver.url)
    wake = wake_once(client, drain, webhook_monitor(client, owner[1]), "fact-retried")
    assert len(receiver.requests) == 1

    for attempt_number in (1, 2, 3):
        [push] = push_rows()
        assert (push.status, push.attempts) == ("pending", attempt_number)
        due = push.next_attempt_at
        ahead = (due - clock.now()).total_seconds()
        assert SCHEDULE[attempt_number] * 0.9 - 1 <= ahead <= SCHEDULE[attempt_number] * 1.1, ahead
        [shown] = listed(client, owner[1])
        assert shown["enabled"] is True and shown["failing_since"] is not None
        tick_to(clock, due, -1)  # not yet: nothing is sent early
        assert len(receiver.requests) == attempt_number
        tick_to(clock, due, 3)
        assert len(receiver.requests) == attempt_number + 1

    seen = attempts(client, owner[1], endpoint["id"])
    assert [a["status_code"] for a in seen] == [503, 500, 503, 200]
    for number, attempt in enumerate(seen[:3], start=1):
        assert SCHEDULE[number] * 0.9 <= waited(attempt) <= SCHEDULE[number] * 1.1, (number, attempt)
        assert attempt["answer"].startswith(f"{attempt['status_code']}: not now")
    assert seen[3]["next_attempt_at"] is None and {a["push_status"] for a in seen} == {"delivered"}

    # every attempt is the same message: one webhook-id, one body, each verifying; deduped, one wake
    payloads = receiver.verified(endpoint["secret"])
    assert receiver.ids() == [f"wake_{wake.id}"] * 4
    assert len({raw for _, _, raw in receiver.requests}) == 1
    deduped = {headers["webhook-id"]: payload for (_, headers, _), payload in zip(receiver.requests, payloads)}
    assert list(deduped) == [f"wake_{wake.id}"] and deduped[f"wake_{wake.id}"]["data"]["cursor"] == str(wake.id)
    [push] = push_rows()
    assert (push.status, push.attempts) == ("delivered", 4)
    [shown] = listed(client, owner[1])
    assert shown["failing_since"] is None and shown["enabled"] is True
    clock(11 * 3600)
    assert len(receiver.requests) == 4


def test_wake_push_answered_410_disables_the_endpoint_until_enabled(client, owner, drain, clock, receiver):
    receiver.answer(410)
    endpoint = register(client, owner[1], receiver.url)
    path = webhook_monitor(client, owner[1])
    gone = wake_once(client, drain, path, "fact-gone")
    [shown] = listed(client, owner[1])
    assert shown["enabled"] is False and "410" in shown["disabled_reason"]
    [attempt] = attempts(client, owner[1], endpoint["id"])
    assert (attempt["status_code"], attempt["push_status"], attempt["next_attempt_at"]) == (410, "failed", None)

    skipped = wake_once(client, drain, path, "fact-while-disabled")
    clock(10)
    clock(3600)
    assert receiver.ids() == [f"wake_{gone.id}"]
    assert [p.message_id for p in push_rows()] == [gone.id], "a disabled endpoint queues no pushes"

    enabled = client.post(f"/api/wake-endpoints/{endpoint['id']}/enable", headers=auth(owner[1]))
    assert enabled.status_code == 200, enabled.text
    assert enabled.json()["enabled"] is True and enabled.json()["disabled_reason"] == ""
    back = wake_once(client, drain, path, "fact-after-enable")
    clock(3600)
    assert receiver.ids() == [f"wake_{gone.id}", f"wake_{back.id}"]
    assert f"wake_{skipped.id}" not in receiver.ids()
    receiver.verified(endpoint["secret"])


def test_wake_push_answered_429_waits_for_retry_after(client, owner, drain, clock, receiver):
    receiver.answer((429, {"Retry-After": "3600"}))
    endpoint = register(client, owner[1], receiver.url)
    wake = wake_once(client, drain, webhook_monitor(client, owner[1]), "fact-throttled")
    [attempt] = attempts(client, owner[1], endpoint["id"])
    assert attempt["status_code"] == 429 and attempt["push_status"] == "pending"
    assert 3600 <= waited(attempt) <= 3601, attempt
    [push] = push_rows()
    assert 3590 <= (push.next_attempt_at - utcnow()).total_seconds() <= 3600

    clock(5 * 60)  # past Svix's 5 s, well short of the hour: nothing
    clock(30 * 60)
    assert len(receiver.requests) == 1
    tick_to(clock, push.next_attempt_at, 3)
    assert receiver.ids() == [f"wake_{wake.id}"] * 2
    assert [a["status_code"] for a in attempts(client, owner[1], endpoint["id"])] == [429, 200]


def test_wake_push_redirect_is_not_followed_and_counts_as_a_failure(client, owner, drain, receiver):
    receiver.answer((302, {"Location": receiver.url.replace("/hook", "/moved")}))
    endpoint = register(client, owner[1], receiver.url)
    wake_once(client, drain, webhook_monitor(client, owner[1]), "fact-redirected")
    assert [path for path, _, _ in receiver.requests] == ["/hook"]
    [attempt] = attempts(client, owner[1], endpoint["id"])
    assert attempt["status_code"] == 302 and attempt["push_status"] == "pending"
    assert "redirect" in attempt["answer"] and "not followed" in attempt["answer"]
    assert SCHEDULE[1] * 0.9 <= waited(attempt) <= SCHEDULE[1] * 1.1
    [shown] = listed(client, owner[1])
    assert shown["failing_since"] is not None


# --- addresses ---------------------------------------------------------------------------------------------

def test_wake_push_to_a_private_address_is_refused_at_send_time(client, owner, drain, receiver, reconfigure):
    literal = register(client, owner[1], receiver.url)  # both registered while loopback was allowed
    named = register(client, owner[1], receiver.url.replace("127.0.0.1", "localhost"))
    reconfigure(FETCH_ALLOW_LOOPBACK=False)
    refused = client.post("/api/wake-endpoints", headers=auth(owner[1]), json={"url": receiver.url})
    assert refused.status_code == 400 and "FETCH_ALLOW_LOOPBACK" in refused.json()["detail"], refused.text
    assert stored_endpoints() == 2
    wake_once(client, drain, webhook_monitor(client, owner[1]), "fact-blocked")
    assert receiver.requests == []
    for endpoint in (literal, named):
        [attempt] = attempts(client, owner[1], endpoint["id"])
        assert attempt["status_code"] is None and "a loopback address" in attempt["answer"], attempt
        assert "only public internet addresses" in attempt["answer"]
        assert attempt["push_status"] == "pending" and attempt["next_attempt_at"] is not None
    assert {p.status for p in push_rows()} == {"pending"}


@pytest.mark.parametrize("url", [
    "ftp://example.com/hook", "http:///hook", "https://", "example.com/hook", "//example.com/hook",
    "https://user:password@example.com/hook", "http://exa mple.com/hook", "https://example.com:0/hook",
    "https://example.com:99999/hook", "javascript:alert(1)", "", "   ", "https://" + "a" * 2000 + ".com/",
])
def test_wake_endpoint_registration_refuses_bad_urls(client, owner, url):
    answer = client.post("/api/wake-endpoints", headers=auth(owner[1]), json={"url": url})
    assert answer.status_code == 400, (url, answer.text)
    assert answer.json()["detail"].startswith("url"), answer.json()
    assert "secret" not in answer.json()
    assert stored_endpoints() == 0


@pytest.mark.parametrize("url", [
    "http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/", "http://100.100.100.200/",
    "http://10.0.0.1/hook", "https://192.168.1.10/hook", "http://0.0.0.0:8080/", "http://[::ffff:169.254.169.254]/",
])
def test_wake_endpoint_registration_refuses_internal_address_literals(client, owner, url):
    """An address that no push could ever reach is refused when it is given, not on every wake after."""
    answer = client.post("/api/wake-endpoints", headers=auth(owner[1]), json={"url": url})
    assert answer.status_code == 400, (url, answer.text)
    assert answer.json()["detail"].startswith("url") and "secret" not in answer.json()
    assert stored_endpoints() == 0


# --- rotation ----------------------------------------------------------------------------------------------

def test_wake_push_after_rotation_is_signed_with_both_secrets_for_a_day(client, owner, drain, clock, receiver):
    endpoint = register(client, owner[1], receiver.url)
    path = webhook_monitor(client, owner[1])
    wake_once(client, drain, path, "fact-before")
    assert receiver.requests[-1][1]["webhook-signature"].count("v1,") == 1

    rotated = client.post(f"/api/wake-endpoints/{endpoint['id']}/rotate", headers=auth(owner[1]))
    assert rotated.status_code == 200, rotated.text
    old, new = endpoint["secret"], rotated.json()["secret"]
    assert new.startswith("whsec_") and new != old
    until = parse(rotated.json()["previous_secret_until"])
    assert abs((until - utcnow()).total_seconds() - 24 * 3600) < 60
    assert [e["previous_secret_until"] for e in listed(client, owner[1])] == [rotated.json()["previous_secret_until"]]

    wake_once(client, drain, path, "fact-during")
    _, headers, raw = receiver.requests[-1]
    signatures = headers["webhook-signature"].split(" ")
    assert len(signatures) == 2 and all(s.startswith("v1,") for s in signatures)
    Webhook(old).verify(raw, headers)
    Webhook(new).verify(raw, headers)
    verifies_with = []
    for signature in signatures:
        alone = {**headers, "webhook-signature": signature}
        verifies_with.append([name for name, secret in (("old", old), ("new", new)) if _verifies(secret, raw, alone)])
    assert sorted(verifies_with) == [["new"], ["old"]]

    clock(25 * 3600)  # the overlap is over: the new secret alone
    wake_once(client, drain, path, "fact-after")
    _, headers, raw = receiver.requests[-1]
    assert headers["webhook-signature"].count("v1,") == 1
    Webhook(new).verify(raw, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(old).verify(raw, headers)


def _verifies(secret: str, raw: bytes, headers: dict) -> bool:
    try:
        Webhook(secret).verify(raw, headers)
    except WebhookVerificationError:
        return False
    return True


# --- accounts ----------------------------------------------------------------------------------------------

def test_wake_push_of_one_account_never_reaches_another(client, owner, stranger, drain, receiver, other_receiver):
    mine = register(client, owner[1], receiver.url)
    theirs = register(client, stranger[1], other_receiver.url)
    my_wake = wake_once(client, drain, webhook_monitor(client, owner[1], "mine"), "fact-mine")
    their_wake = wake_once(client, drain, webhook_monitor(client, stranger[1], "theirs"), "fact-theirs")
    assert receiver.ids() == [f"wake_{my_wake.id}"] and other_receiver.ids() == [f"wake_{their_wake.id}"]
    receiver.verified(mine["secret"])
    other_receiver.verified(theirs["secret"])
    assert [e["id"] for e in listed(client, owner[1])] == [mine["id"]]
    assert [e["id"] for e in listed(client, stranger[1])] == [theirs["id"]]


def test_wake_endpoint_of_another_account_is_not_found(client, owner, stranger, drain, receiver):
    mine = register(client, owner[1], receiver.url)
    wake_once(client, drain, webhook_monitor(client, owner[1]), "fact-first")
    for method, path in (("GET", f"/api/wake-endpoints/{mine['id']}/attempts"),
                         ("POST", f"/api/wake-endpoints/{mine['id']}/rotate"),
                         ("POST", f"/api/wake-endpoints/{mine['id']}/enable"),
                         ("DELETE", f"/api/wake-endpoints/{mine['id']}"),
                         ("GET", "/api/wake-endpoints/999/attempts"), ("DELETE", "/api/wake-endpoints/999")):
        answer = client.request(method, path, headers=auth(stranger[1]))
        assert answer.status_code == 404, (method, path, answer.text)
        assert "whsec_" not in answer.text and receiver.url not in answer.text
    assert listed(client, stranger[1]) == []
    [shown] = listed(client, owner[1])
    assert shown["previous_secret_until"] is None, "the stranger's rotate changed nothing"
    wake = wake_once(client, drain, webhook_monitor(client, owner[1], "conv-2"), "fact-second")
    assert receiver.ids()[-1] == f"wake_{wake.id}"
    receiver.verified(mine["secret"])  # still the one secret, still delivered


# --- input -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("content", [
    b"{not json", b"", b"[]", b'"https://example.com/hook"', b"{}", b'{"description": "no url"}',
    b'{"url": null}', b'{"url": 42}', b'{"url": ["https://example.com/hook"]}',
    json.dumps({"url": "https://example.com/hook", "description": "d" * 201}).encode(),
    json.dumps({"url": "https://example.com/hook", "description": 7}).encode(),
    json.dumps({"url": "https://example.com/hook", "description": "nul\u0000byte"}).encode(),
])
def test_wake_endpoint_bad_input_is_400_and_stores_nothing(client, owner, content):
    answer = client.post("/api/wake-endpoints", headers={**auth(owner[1]), "Content-Type": "application/json"},
                         content=content)
    assert answer.status_code == 400, (content, answer.text)
    assert "secret" not in answer.json()
    assert stored_endpoints() == 0


def test_wake_endpoint_description_of_200_chars_is_accepted(client, owner):
    created = register(client, owner[1], "https://example.com/hook", "d" * 200)
    assert created["description"] == "d" * 200 and stored_endpoints() == 1


def test_wake_endpoint_eleventh_is_refused_with_409(client, owner):
    for n in range(10):
        register(client, owner[1], f"https://runtime{n}.example.com/hook")
    answer = client.post("/api/wake-endpoints", headers=auth(owner[1]), json={"url": "https://eleven.example.com/"})
    assert answer.status_code == 409, answer.text
    assert "10" in answer.json()["detail"] and "secret" not in answer.json()
    assert stored_endpoints() == 10 and len(listed(client, owner[1])) == 10


def test_wake_endpoint_needs_a_token_or_the_owner_session_with_csrf(client, owner):
    assert client.post("/api/wake-endpoints", json={"url": "https://example.com/hook"}).status_code == 401
    assert client.get("/api/wake-endpoints").status_code == 401
    assert client.post("/api/wake-endpoints", headers={"Authorization": "Bearer vgl_not-a-token"},
                       json={"url": "https://example.com/hook"}).status_code == 401
    csrf = login(client)
    assert client.post("/api/wake-endpoints", json={"url": "https://example.com/hook"}).status_code == 403
    assert stored_endpoints() == 0
    added = client.post("/api/wake-endpoints", headers={"X-CSRF-Token": csrf}, json={"url": "https://example.com/h"})
    assert added.status_code == 201, added.text
    page = client.get("/settings/wake-endpoints")
    assert page.status_code == 200 and "https://example.com/h" in page.text
    assert added.json()["secret"] not in page.text and added.json()["secret"][6:] not in page.text
    assert client.delete(f"/api/wake-endpoints/{added.json()['id']}").status_code == 403  # no CSRF token
    assert client.delete(f"/api/wake-endpoints/{added.json()['id']}", headers={"X-CSRF-Token": csrf}).status_code == 204
    assert stored_endpoints() == 0


# --- deletion ----------------------------------------------------------------------------------------------

def test_wake_endpoint_deleted_gets_nothing_more(client, owner, drain, clock, receiver):
    receiver.answer(200, 500)
    endpoint = register(client, owner[1], receiver.url)
    path = webhook_monitor(client, owner[1])
    first = wake_once(client, drain, path, "fact-delivered")
    failing = wake_once(client, drain, path, "fact-failing")  # answered 500: a retry is pending
    assert receiver.ids() == [f"wake_{first.id}", f"wake_{failing.id}"]
    assert [p.status for p in push_rows()] == ["delivered", "pending"]

    deleted = client.delete(f"/api/wake-endpoints/{endpoint['id']}", headers=auth(owner[1]))
    assert deleted.status_code == 204 and deleted.content == b""
    assert listed(client, owner[1]) == [] and push_rows() == []
    with db():
        assert WakeAttempt.select().count() == 0
    assert client.get(f"/api/wake-endpoints/{endpoint['id']}/attempts", headers=auth(owner[1])).status_code == 404
    assert client.delete(f"/api/wake-endpoints/{endpoint['id']}", headers=auth(owner[1])).status_code == 404

    later = wake_once(client, drain, path, "fact-after-delete")
    for seconds in (10, 600, 3 * 3600):
        clock(seconds)
    assert receiver.ids() == [f"wake_{first.id}", f"wake_{failing.id}"]
    assert later.id not in {p.message_id for p in push_rows()}


# --- a lost message ----------------------------------------------------------------------------------------

def test_wake_push_whose_message_was_lost_is_sent_by_the_sweep(client, owner, drain, clock, receiver, monkeypatch):
    endpoint = register(client, owner[1], receiver.url)
    lost: list[int] = []
    monkeypatch.setattr(pushes.push_message, "send", lambda message_id: lost.append(message_id))
    wake = wake_once(client, drain, webhook_monitor(client, owner[1]), "fact-lost")
    assert lost == [wake.id], "the wake's push message was dropped, as a lost enqueue would"
    assert receiver.requests == []
    [push] = push_rows()
    assert (push.status, push.attempts) == ("pending", 0)

    clock(3)  # past the sweep's grace
    assert receiver.ids() == [f"wake_{wake.id}"]
    receiver.verified(endpoint["secret"])
    [push] = push_rows()
    assert (push.status, push.attempts) == ("delivered", 1)

    with db():  # the lost message turning up after all changes nothing
        pushes.push_message.fn(wake.id)
        pushes.push_due.fn([push.id])
    clock(3)
    assert Counter(receiver.ids()) == {f"wake_{wake.id}": 1}
    assert [a["status_code"] for a in attempts(client, owner[1], endpoint["id"])] == [200]


# --- enabling again, with what it gave up on ------------------------------------------------------------

def test_wake_endpoint_enabled_with_resend_pushes_again_what_it_gave_up_on(client, owner, drain, clock, receiver):
    receiver.answer(200, 410)
    endpoint = register(client, owner[1], receiver.url)
    path = webhook_monitor(client, owner[1])
    delivered = wake_once(client, drain, path, "fact-delivered-first")
    gone = wake_once(client, drain, path, "fact-answered-gone")
    assert listed(client, owner[1])[0]["enabled"] is False
    assert [p.status for p in push_rows()] == ["delivered", "failed"]

    bad = client.post(f"/api/wake-endpoints/{endpoint['id']}/enable", headers=auth(owner[1]), json={"resend": "yes"})
    assert bad.status_code == 400 and "resend must be true" in bad.json()["detail"]
    assert listed(client, owner[1])[0]["enabled"] is False

    enabled = client.post(f"/api/wake-endpoints/{endpoint['id']}/enable", headers=auth(owner[1]),
                          json={"resend": True})
    assert enabled.status_code == 200, enabled.text
    assert enabled.json()["enabled"] is True and enabled.json()["resent"] == 1
    drain()
    clock(3)
    assert receiver.ids() == [f"wake_{delivered.id}", f"wake_{gone.id}", f"wake_{gone.id}"]
    assert [p.status for p in push_rows()] == ["delivered", "delivered"]
    receiver.verified(endpoint["secret"])
    again = client.post(f"/api/wake-endpoints/{endpoint['id']}/enable", headers=auth(owner[1]), json={"resend": True})
    assert again.json()["resent"] == 0, "nothing is given up any more"


def test_wake_endpoint_enable_button_on_settings_resends_what_it_gave_up_on(client, owner, drain, clock, receiver):
    receiver.answer(410)
    endpoint = register(client, owner[1], receiver.url)
    gone = wake_once(client, drain, webhook_monitor(client, owner[1]), "fact-gone-before-the-button")
    login(client)
    page = client.get("/settings/wake-endpoints").text
    assert 'name="resend" value="true"' in page
    csrf = re.search(r'name="_csrf" value="([^"]+)"', page).group(1)
    pressed = client.post(f"/settings/wake-endpoints/{endpoint['id']}/enable",
                          data={"_csrf": csrf, "resend": "true"}, follow_redirects=False)
    assert pressed.status_code == 303, pressed.text
    drain()
    clock(3)
    assert receiver.ids() == [f"wake_{gone.id}", f"wake_{gone.id}"]
    assert [p.status for p in push_rows()] == ["delivered"]


def test_wake_push_of_a_monitor_without_a_condition_says_nothing_of_one(client, owner, drain, receiver):
    endpoint = register(client, owner[1], receiver.url)
    wake = wake_once(client, drain, webhook_monitor(client, owner[1]), "fact-no-condition")
    [payload] = receiver.verified(endpoint["secret"])
    metadata = payload["data"]["message"]["metadata"]
    assert metadata["wake"]["source"] == "trigger" and "checked_against_condition" not in metadata
    assert "checked_against_condition" not in wake.metadata
