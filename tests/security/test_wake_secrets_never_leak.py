"""Wake endpoint secrets stay secret: a real `vigil serve` (SQLite, DEBUG logging) registers a wake endpoint, pushes
wakes of a webhook monitor to a receiver on 127.0.0.1 that fails the first attempt and takes the retry, rotates
the secret and pushes again; the receiver's requests verify with the secrets, and afterwards neither `whsec_`
secret, nor its base64 key, nor the key's hex, shows up in the log, in GET /api/wake-endpoints, in the attempts
API, in the conversation's messages or in the Settings → Wake endpoints page. The registration and rotation
answers are the one place each secret is shown."""

from __future__ import annotations

import base64
import re

import pytest
import requests
from standardwebhooks import Webhook

from tests.integration.test_embedded_smoke import wait_for
from tests.integration.test_wake_push import Receiver
from tests.processes import stop, vigil

CONVERSATION = "wake-push-leak-check"
CSRF = re.compile(r'name="_csrf" value="([^"]+)"')


@pytest.fixture()
def serve(serve_debug):
    return serve_debug


@pytest.fixture()
def receiver():
    server = Receiver().start()
    yield server
    server.stop()


def forms_of(secret: str) -> list[str]:
    """The ways a secret could show: whole, its base64 key, a good part of that key, the key's bytes in hex."""
    key = secret.removeprefix("whsec_")
    return [secret, key, key[:16], key[-16:-2], base64.b64decode(key).hex()]


def test_wake_endpoint_secrets_never_leak(serve, receiver):
    base, env, process, log = serve
    vigil("user", "create", "owner@example.com", "--password", "a-good-password", env=env)
    token = vigil("token", "create", "--user", "owner@example.com", env=env).strip().splitlines()[-1]
    auth = {"Authorization": f"Bearer {token}"}

    registered = requests.post(f"{base}/api/wake-endpoints", headers=auth, timeout=10,
                               json={"url": receiver.url, "description": "the runtime"})
    assert registered.status_code == 201, registered.text
    endpoint_id, first_secret = registered.json()["id"], registered.json()["secret"]
    created = requests.post(f"{base}/api/tool/monitor", headers=auth, timeout=20, json={
        "action": "monitor_create", "context": {"conversation_id": CONVERSATION, "channel": "chat"},
        "arguments": {"description": "the job calls back", "source": {"type": "webhook"}, "max_wakes": 5}}).json()
    assert created["ok"], created
    trigger = created["result"]["url"]

    receiver.answer(500)  # the first attempt fails; the retry, 5 s later, is taken
    assert requests.post(trigger, json={"fact": "first"}, headers={"Idempotency-Key": "first"},
                         timeout=10).status_code == 202
    wait_for(lambda: len(receiver.requests) >= 2, timeout=40)
    assert len(set(receiver.ids())) == 1
    receiver.verified(first_secret)

    rotated = requests.post(f"{base}/api/wake-endpoints/{endpoint_id}/rotate", headers=auth, timeout=10)
    assert rotated.status_code == 200, rotated.text
    second_secret = rotated.json()["secret"]
    assert requests.post(trigger, json={"fact": "second"}, headers={"Idempotency-Key": "second"},
                         timeout=10).status_code == 202
    wait_for(lambda: len(receiver.requests) >= 3, timeout=30)
    receiver.verified(first_secret)  # the third is signed with both secrets, during the rotation's overlap
    _, headers, raw = receiver.requests[2]
    Webhook(second_secret).verify(raw, headers)

    def attempts_shown() -> list[dict]:
        return requests.get(f"{base}/api/wake-endpoints/{endpoint_id}/attempts", headers=auth,
                            timeout=10).json()["attempts"]

    wait_for(lambda: len(attempts_shown()) == 3, timeout=10)  # the last answer is recorded after it was sent
    browser = requests.Session()
    csrf = CSRF.search(browser.get(f"{base}/login", timeout=10).text).group(1)
    signed_in = browser.post(f"{base}/login", timeout=10, data={"email": "owner@example.com",
                                                                 "password": "a-good-password", "_csrf": csrf})
    assert signed_in.ok
    listed = requests.get(f"{base}/api/wake-endpoints", headers=auth, timeout=10)
    attempts = requests.get(f"{base}/api/wake-endpoints/{endpoint_id}/attempts", headers=auth, timeout=10)
    page = browser.get(f"{base}/settings/wake-endpoints", timeout=10)
    listed_by_session = browser.get(f"{base}/api/wake-endpoints", timeout=10)
    messages = requests.get(f"{base}/api/conversations/{CONVERSATION}/messages?after=0", headers=auth, timeout=10)
    assert page.status_code == 200 and receiver.url in page.text and "500" in page.text
    assert [a["status_code"] for a in attempts.json()["attempts"]] == [200, 200, 500]
    assert listed.json()["endpoints"][0]["previous_secret_until"] is not None
    assert len(messages.json()["messages"]) == 2

    assert stop(process) == 0
    places = {"serve log": log.read_text(errors="replace"), "endpoint list": listed.text,
              "endpoint list (session)": listed_by_session.text, "attempts": attempts.text,
              "settings page": page.text, "messages": messages.text}
    assert "wake push" in places["serve log"] or "POST /hook" in places["serve log"], "the log saw the pushes"
    for place, text in places.items():
        for secret in (first_secret, second_secret):
            for form in forms_of(secret):
                assert form not in text, f"a wake endpoint secret (or its key) is in the {place}"
        assert "whsec_" not in text, f"something like a secret is in the {place}"
