"""Settings → Wake endpoints against a real Vigil (web, worker, scheduler): a runtime registers an endpoint whose
receiver fails the first push and takes the retry; the owner's page shows both attempts (status, latency, the
retry's time) and the push delivered, and the receiver got the wake twice under one webhook-id, verified with the
standardwebhooks library."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from playwright.sync_api import Page, expect
from standardwebhooks import Webhook

from tests.integration.helpers import wait_for
from tests.processes import vigil

pytestmark = pytest.mark.e2e

EMAIL, PASSWORD = "wake-pages@example.com", "a-good-wake-page-password"


class Receiver:
    """Answers the scripted statuses in order (then 200), keeping each request."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses, self.got = list(statuses), []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.got.append(({k.lower(): v for k, v in self.headers.items()}, body))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"no" if status >= 300 else b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/webhooks/vigil"


@pytest.fixture()
def account(vigil_stack):
    """An account of this test's own: the stack's owner account must not push its other tests' wakes here."""
    vigil("user", "create", EMAIL, "--password", PASSWORD, env=vigil_stack.env)
    token = vigil("token", "create", "--user", EMAIL, env=vigil_stack.env).strip().splitlines()[-1]
    return {"Authorization": f"Bearer {token}"}


def fire_a_wake(stack, auth: dict) -> None:
    created = requests.post(f"{stack.base}/api/tool/monitor", headers=auth, timeout=15, json={
        "action": "monitor_create", "context": {"conversation_id": "e2e-wake-push"},
        "arguments": {"description": "the deploy webhook fires (e2e)", "source": {"type": "webhook"}}}).json()
    assert created["ok"], created
    sent = requests.post(created["result"]["url"], json={"event": "deployed"}, timeout=15)
    assert sent.status_code == 202, sent.text


def test_wake_endpoints_page_shows_a_failed_attempt_its_retry_and_the_delivery(page: Page, vigil_stack, account,
                                                                               screenshots):
    stack = vigil_stack
    receiver = Receiver([503])
    try:
        registered = requests.post(f"{stack.base}/api/wake-endpoints", headers=account, timeout=15,
                                   json={"url": receiver.url, "description": "e2e runtime"})
        assert registered.status_code == 201, registered.text
        endpoint = registered.json()
        fire_a_wake(stack, account)
        # the first attempt is refused (503); Svix's schedule tries again about 5 s later
        wait_for(lambda: len(receiver.got) >= 2, timeout=40)

        [first, second] = receiver.got[:2]
        assert first[0]["webhook-id"] == second[0]["webhook-id"]
        for headers, body in (first, second):
            Webhook(endpoint["secret"]).verify(body, headers)
        wake = json.loads(second[1])["data"]["message"]
        assert second[0]["webhook-id"] == f"wake_{wake['id']}"

        page.goto(f"{stack.base}/login")
        page.locator('input[name="email"]').fill(EMAIL)
        page.locator('input[name="password"]').fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        page.goto(f"{stack.base}/settings/wake-endpoints")
        section = page.locator(f"section#wake-endpoint-{endpoint['id']}")
        expect(section.locator("h2")).to_have_text(receiver.url)
        expect(section.locator(".state")).to_have_text("enabled")
        rows = section.locator("tr.attempt")
        expect(rows).to_have_count(2)
        newest, oldest = rows.nth(0), rows.nth(1)
        expect(oldest).to_have_class("attempt failed")
        expect(oldest).to_contain_text("503")
        expect(oldest).to_contain_text(f"#{wake['id']}")
        expect(newest).to_have_class("attempt ok")
        expect(newest).to_contain_text("200: ok")
        expect(newest).to_contain_text("delivered")
        assert endpoint["secret"] not in page.content()
        page.set_viewport_size({"width": 1280, "height": 800})
        page.screenshot(path=str(screenshots / "wake-endpoints-1280.png"), full_page=True)
    finally:
        receiver.server.shutdown()
