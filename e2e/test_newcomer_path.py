"""A newcomer's first minutes, as the README tells them, in Chromium against `vigil serve` (embedded: SQLite, no
services, what `./scripts/run` starts): open the URL, which leads to /setup; create the account; land on Settings
→ Tokens and create a token, shown once; run the README's own curl with it (its body read from README.md, only
the watched URL and interval swapped for a local page); open the conversation; the page changes and the wake
shows up live. Screenshots of setup and tokens at 375 and 1280 px."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from e2e.browser import LIVE, mark_event_stream_open, shoot
from tests.processes import VIGIL, serve_vigil, stop

pytestmark = pytest.mark.e2e

README = Path(__file__).resolve().parent.parent / "README.md"
EMAIL, PASSWORD = "newcomer@example.com", "a-newcomers-password"


@pytest.fixture()
def fresh_vigil(tmp_path):
    """`vigil serve` on an empty SQLite database: no account yet."""
    env = {"VIGIL_DATA_DIR": str(tmp_path / "data"), "DATABASE_URL": "", "REDIS_URL": "",
           "FETCH_ALLOW_LOOPBACK": "true", "MONITOR_MIN_INTERVAL_SECONDS": "1", "SCHEDULER_TICK_SECONDS": "0.2",
           "PYTHONUNBUFFERED": "1"}
    log = tmp_path / "serve.log"
    served = serve_vigil([VIGIL, "serve"], lambda port: {**env, "PUBLIC_API_BASE_URL": f"http://127.0.0.1:{port}"},
                         log)
    try:
        yield served.base, log
    finally:
        assert stop(served.process) == 0, log.read_text()[-3000:]


def readme_curl_body() -> dict:
    """The body of the README's first monitor_create curl, as a newcomer pastes it."""
    text = README.read_text()
    block = text[text.index("## Your agent's first monitor"):]
    return json.loads(re.search(r"-d '(\{.*?\})'", block, re.DOTALL).group(1))




def test_newcomer_goes_from_setup_to_a_token_to_the_readme_curl_to_a_live_wake(page: Page, fresh_vigil, pages,
                                                                                 screenshots):
    base, log = fresh_vigil
    assert "setup code" in log.read_text().lower(), "the banner prints the setup code while there is no account"

    page.goto(base)
    expect(page).to_have_url(f"{base}/setup")
    shoot(page, screenshots, "setup")
    page.locator('input[name="email"]').fill(EMAIL)
    page.locator('input[name="password"]').fill(PASSWORD)
    page.locator('input[name="password_again"]').fill(PASSWORD)
    page.get_by_role("button", name="Create the account").click()
    expect(page).to_have_url(f"{base}/settings/tokens")

    page.locator('input[name="label"]').fill("my laptop agent")
    page.get_by_role("button", name="Create a token").click()
    token = page.locator("#new-token-value").input_value()
    assert token.startswith("vgl_")
    expect(page.locator("table.tokens")).to_contain_text("my laptop agent")
    shoot(page, screenshots, "tokens")

    body = readme_curl_body()
    url = pages.set("/acmeb", '<html><body><span id="price">95.10</span></body></html>')
    body["arguments"]["source"]["url"] = url
    body["arguments"]["interval"] = "1s"
    conversation = body["context"]["conversation_id"]
    answer = subprocess.run(["curl", "-s", f"{base}/api/tool/monitor", "-H", f"Authorization: Bearer {token}",
                             "-H", "Content-Type: application/json", "-d", json.dumps(body)],
                            capture_output=True, text=True, timeout=30, check=True)
    created = json.loads(answer.stdout)
    assert created["ok"] and created["result"]["baseline"] == "currently 95.10", created

    mark_event_stream_open(page)
    page.goto(f"{base}/settings/monitors")
    page.locator("aside.sidebar li a", has_text=conversation).click()
    page.wait_for_function("() => window.__sseOpen === true", timeout=LIVE)
    pages.set("/acmeb", '<html><body><span id="price">88.20</span></body></html>')
    wake = page.locator("li.message.wake").first
    expect(wake).to_contain_text("88.20 is below 90 (was 95.10)", timeout=LIVE)
    expect(page.locator("li.message.wake")).to_have_count(1)
    assert token not in log.read_text(), "the token never reaches the log"
