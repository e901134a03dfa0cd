"""`vigil web` on PostgreSQL and Redis, as a hostile agent would load it: slow sources must not stall trigger
links, approval pages, login and everyone else's calls; the API is rate limited, bodies capped, slowloris
clients cut off. Asserted on behaviour (who answers, with what, what got stored), not on timings."""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from models.tables import Conversation, Monitor
from tests.conftest import TEST_DATABASE_URL, TEST_REDIS_URL
from tests.httpd import Handler, serve
from tests.integration.conftest import _account
from tests.integration.helpers import db
from tests.processes import VIGIL, serve_vigil, stop

#: the bounds the server under test runs with (small, so a test needs few calls to reach them)
TOTAL, PER_ACCOUNT, DEADLINE, HEADER_TIMEOUT, RATE, BODY_CAP = 4, 2, 3, 2, 40, 4096
BUSY = "busy taking other first checks"


class SlowSource(Handler):
    """GET /slow/<who> answers after `hold` seconds (or when released); counts who is in flight at once."""

    lock = threading.Lock()
    released = threading.Event()
    in_flight: dict[str, int] = {}
    most: dict[str, int] = {}
    hold = 25.0

    def route_slow(self, who: str) -> None:
        with self.lock:
            self.in_flight[who] = self.in_flight.get(who, 0) + 1
            self.in_flight["*"] = self.in_flight.get("*", 0) + 1
            for key in (who, "*"):
                self.most[key] = max(self.most.get(key, 0), self.in_flight[key])
        try:
            self.released.wait(self.hold)
            self.send(200, b"<p>slow but fine: 42</p>", (("Content-Type", "text/html"),))
        except OSError:
            pass  # Vigil gave up on us, as it should
        finally:
            with self.lock:
                self.in_flight[who] -= 1
                self.in_flight["*"] -= 1

    def route_fast(self, _: str) -> None:
        self.send(200, b"<p>fast: 7</p>", (("Content-Type", "text/html"),))

    @classmethod
    def reset(cls) -> None:
        cls.released.clear()
        cls.in_flight.clear()
        cls.most.clear()


@pytest.fixture(scope="module")
def web(postgres, tmp_path_factory):
    log = tmp_path_factory.mktemp("web") / "web.log"
    env = {"DATABASE_URL": TEST_DATABASE_URL, "REDIS_URL": TEST_REDIS_URL, "SECRET_KEY": "load-test-secret",
           "FETCH_ALLOW_LOOPBACK": "true", "CREATE_CONCURRENCY": str(TOTAL),
           "CREATE_CONCURRENCY_PER_ACCOUNT": str(PER_ACCOUNT), "CREATE_FETCH_TIMEOUT_SECONDS": str(DEADLINE),
           "WEB_HEADER_TIMEOUT_SECONDS": str(HEADER_TIMEOUT), "API_RATE_PER_MINUTE": str(RATE),
           "API_MAX_BODY_BYTES": str(BODY_CAP), "VIGIL_DATA_DIR": str(log.parent)}
    served = serve_vigil([VIGIL, "web"], env, log)
    yield served.base, log
    stop(served.process)


@pytest.fixture()
def source():
    SlowSource.reset()
    with serve(SlowSource) as base:
        yield base
        SlowSource.released.set()


def create(base: str, token: str, url: str, conversation: str = "conv-1", timeout: float = 30) -> dict:
    body = {"action": "monitor_create", "context": {"conversation_id": conversation},
            "arguments": {"description": "the slow page changes", "source": {"type": "page", "url": url}}}
    return requests.post(f"{base}/api/tool/monitor", json=body, headers={"Authorization": f"Bearer {token}"},
                         timeout=timeout).json()


def link_monitors(base: str, token: str) -> tuple[str, str]:
    """A trigger link and an approval page of this account (neither takes a first check)."""
    hook = create_raw(base, token, {"description": "deploy done", "source": {"type": "webhook"}})
    approval = create_raw(base, token, {"description": "ship?", "source": {"type": "approval",
                                                                            "question": "Ship it?"}})
    return hook["url"], approval["approval_url"]


def create_raw(base: str, token: str, arguments: dict) -> dict:
    body = {"action": "monitor_create", "context": {"conversation_id": "links"}, "arguments": arguments}
    reply = requests.post(f"{base}/api/tool/monitor", json=body, headers={"Authorization": f"Bearer {token}"},
                          timeout=10).json()
    assert reply["ok"] is True, reply
    return reply["result"]


def wait_for(predicate, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "the slow source never saw the expected calls"
        time.sleep(0.05)


def monitors_of(*users) -> int:
    with db():
        return Monitor.select().where(Monitor.user.in_([u.id for u in users])).count()


def test_slow_first_checks_leave_every_other_path_answering(web, source, postgres):
    base, log = web
    owner, owner_token = _account(postgres, "links@example.com", "a-password")
    hook, approval = link_monitors(base, owner_token)
    accounts = [_account(postgres, f"agent{i}@example.com", "a-password") for i in range(6)]
    with ThreadPoolExecutor(24) as pool:
        calls = [pool.submit(create, base, token, f"{source}/slow/{user.id}", f"c{n}")
                 for user, token in accounts for n in range(4)]
        wait_for(lambda: SlowSource.in_flight.get("*", 0) == TOTAL)
        # the storm is on: every create slot of the process is taken by a source that won't answer
        assert requests.get(f"{base}/login", timeout=5).status_code == 200
        assert requests.get(f"{base}/readyz", timeout=5).status_code == 200
        assert requests.get(approval.replace("http://127.0.0.1:8000", base), timeout=5).status_code == 200
        assert requests.post(hook.replace("http://127.0.0.1:8000", base), json={"n": 1}, timeout=5).status_code == 202
        listed = requests.get(f"{base}/api/monitors", headers={"Authorization": f"Bearer {owner_token}"}, timeout=5)
        assert listed.status_code == 200 and len(listed.json()["monitors"]) == 2
        replies = [call.result(timeout=DEADLINE + 20) for call in calls]
    assert all(reply["ok"] is False for reply in replies)
    busy = [r for r in replies if BUSY in r["error"]]
    timed_out = [r for r in replies if "timed out after 3 seconds" in r["error"]]
    assert len(busy) + len(timed_out) == len(replies), replies
    assert len(busy) >= len(replies) - TOTAL * 2 and timed_out
    assert SlowSource.most["*"] <= TOTAL
    assert all(SlowSource.most.get(str(user.id), 0) <= PER_ACCOUNT for user, _ in accounts)
    assert monitors_of(*(user for user, _ in accounts)) == 0  # nothing half-created
    text = log.read_text()
    assert "MaxConnectionsExceeded" not in text and "Traceback" not in text


def test_one_account_gets_two_first_checks_and_others_still_create(web, source, postgres):
    base, _ = web
    greedy, greedy_token = _account(postgres, "greedy@example.com", "a-password")
    other, other_token = _account(postgres, "other@example.com", "a-password")
    with ThreadPoolExecutor(5) as pool:
        calls = [pool.submit(create, base, greedy_token, f"{source}/slow/greedy", f"g{n}") for n in range(5)]
        wait_for(lambda: SlowSource.in_flight.get("greedy", 0) == PER_ACCOUNT)
        wait_for(lambda: sum(call.done() for call in calls) == 5 - PER_ACCOUNT)
        busy = [call.result() for call in calls if call.done()]
        assert all(reply == {"ok": False, "error": "Vigil is busy taking other first checks; try again in a few "
                                                   "seconds."} for reply in busy)
        created = create(base, other_token, f"{source}/fast/x")
        assert created["ok"] is True and created["result"]["baseline"]
        SlowSource.released.set()  # the two admitted first checks now answer in time
        admitted = [call.result(timeout=DEADLINE + 5) for call in calls if call.result() not in busy]
    assert len(admitted) == PER_ACCOUNT and all(reply["ok"] is True for reply in admitted)
    assert SlowSource.most["greedy"] == PER_ACCOUNT
    assert monitors_of(greedy) == PER_ACCOUNT and monitors_of(other) == 1


def test_api_rate_limit_answers_429_with_retry_after(web, postgres):
    base, _ = web
    _, token = _account(postgres, "chatty@example.com", "a-password")
    _, calm_token = _account(postgres, "calm@example.com", "a-password")
    headers = {"Authorization": f"Bearer {token}"}
    body = {"action": "monitor_list", "context": {"conversation_id": "conv-1"}}
    answers = [requests.post(f"{base}/api/tool/monitor", json=body, headers=headers, timeout=5)
               for _ in range(RATE // 2)]
    answers += [requests.get(f"{base}/api/monitors", headers=headers, timeout=5) for _ in range(RATE // 2)]
    assert all(answer.status_code == 200 for answer in answers)
    refused = requests.post(f"{base}/api/tool/monitor", json=body, headers=headers, timeout=5)
    assert refused.status_code == 429
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert f"Over {RATE} calls a minute" in refused.json()["detail"]
    assert requests.get(f"{base}/api/monitors", headers=headers, timeout=5).status_code == 429
    calm = requests.post(f"{base}/api/tool/monitor", json=body, headers={"Authorization": f"Bearer {calm_token}"},
                         timeout=5)
    assert calm.status_code == 200 and calm.json()["ok"] is True


def raw_request(base: str, head: bytes, body: bytes = b"", timeout: float = 5) -> bytes:
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(head + body)
        answer = b""
        while chunk := sock.recv(65536):  # the server closes after a 413
            answer += chunk
        return answer


def test_body_over_the_cap_is_413_before_it_is_read(web, postgres):
    base, _ = web
    _, token = _account(postgres, "big@example.com", "a-password")
    head = (f"POST /api/tool/monitor HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {50 * 1024 * 1024}\r\n\r\n").encode()
    answer = raw_request(base, head)  # no body sent at all: the answer can't have waited for it
    assert answer.startswith(b"HTTP/1.1 413")
    assert b"API_MAX_BODY_BYTES" in answer
    filler = "x" * BODY_CAP
    chunked = requests.post(f"{base}/api/tool/monitor", headers={"Authorization": f"Bearer {token}"},
                            data=iter([b'{"action": "monitor_create", "description": "', filler.encode(), b'"}']),
                            timeout=5)
    assert chunked.status_code == 413
    with db():
        assert Conversation.select().count() == 0 and Monitor.select().count() == 0


def test_slowloris_client_is_cut_off_at_the_header_deadline(web):
    base, _ = web
    host, port = base.removeprefix("http://").split(":")
    request = b"GET /login HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: " + b"s" * 200
    with socket.create_connection((host, int(port)), timeout=1) as sock:
        closed = False
        for byte in request:
            try:
                sock.sendall(bytes([byte]))
                if sock.recv(1) == b"":
                    closed = True
                    break
            except socket.timeout:
                continue  # still open, one more byte
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
        assert closed, "the server kept a connection whose headers never finished"
    assert requests.get(f"{base}/login", timeout=5).status_code == 200
