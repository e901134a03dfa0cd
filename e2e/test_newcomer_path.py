"""A newcomer's first minutes, as the README tells them, in Chromium against `vigil serve` (embedded: SQLite, no
services, what `./scripts/run` starts): open the URL, which leads to /setup; create the account; land on Settings
→ Tokens and create a token, shown once; run the README's own curls with it (their bodies read from README.md):
the trigger link, fired with its own example_curl, whose wake is on the page (the time from the first visit to it
is reported), then the page monitor (only the watched URL and interval swapped for a local page), whose wake shows
up live when the page changes. Screenshots of setup and tokens at 375 and 1280 px."""

from __future__ import annotations

import json
import re
import subprocess
import time
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
    """`vigil serve` on an empty SQLite database, on a port that is not 8000: no account yet."""
    env = {"VIGIL_DATA_DIR": str(tmp_path / "data"), "DATABASE_URL": "", "REDIS_URL": "",
           "FETCH_ALLOW_LOOPBACK": "true", "MONITOR_MIN_INTERVAL_SECONDS": "1", "SCHEDULER_TICK_SECONDS": "0.2",
           "PYTHONUNBUFFERED": "1"}
    log = tmp_path / "serve.log"
    # no PUBLIC_API_BASE_URL: on its picked port (not 8000) the links it hands out must name that port by themselves
    served = serve_vigil([VIGIL, "serve"], {**env, "PUBLIC_API_BASE_URL": "", "API_URL": ""}, log)
    try:
        yield served.base, log
    finally:
        assert stop(served.process) == 0, log.read_text()[-3000:]


def readme_curl_bodies() -> list[dict]:
    """The bodies of the README's monitor_create curls under "Your agent's first wake", as a newcomer pastes them:
    the trigger link, then the page."""
    text = README.read_text()
    block = text[text.index("## Your agent's first wake"):]
    block = block[:block.index("\n## ", 1)]
    return [json.loads(body) for body in re.findall(r"-d '(\{.*?\})'", block, re.DOTALL)]


def api(base: str, token: str, body: dict) -> dict:
    """The README's curl with `body`, run as the newcomer runs it."""
    answer = subprocess.run(["curl", "-s", f"{base}/api/tool/monitor", "-H", f"Authorization: Bearer {token}",
                             "-H", "Content-Type: application/json", "-d", json.dumps(body)],
                            capture_output=True, text=True, timeout=30, check=True)
    return json.loads(answer.stdout)




def test_newcomer_goes_from_setup_to_a_token_to_the_readme_curl_to_a_live_wake(page: Page, fresh_vigil, pages,
                                                                                 screenshots, record_property):
    base, log = fresh_vigil
    assert "setup code" in log.read_text().lower(), "the banner prints the setup code while there is no account"

    visited = time.monotonic()
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

    # The first wake: the README's trigger link, fired with the example_curl its answer carries.
    link_body, page_body = readme_curl_bodies()
    conversation = link_body["context"]["conversation_id"]
    link = api(base, token, link_body)
    assert link["ok"] and link["result"]["url"].startswith(f"{base}/api/triggers/"), link
    subprocess.run(["bash", "-c", link["result"]["example_curl"]], capture_output=True, text=True, timeout=30,
                   check=True)
    mark_event_stream_open(page)
    page.goto(f"{base}/settings/monitors")
    page.locator("aside.sidebar li a", has_text=conversation).click()
    first = page.locator("li.message.wake").first
    expect(first).to_contain_text("the deploy webhook fires", timeout=LIVE)
    to_first_wake = time.monotonic() - visited
    record_property("seconds_from_first_visit_to_first_wake", round(to_first_wake, 1))
    print(f"\nnewcomer: first visit to first wake on the page in {to_first_wake:.1f} s")

    # Then the README's page monitor (only the watched URL and interval swapped for a local page).
    url = pages.set("/acmeb", '<html><body><span id="price">95.10</span></body></html>')
    page_body["arguments"]["source"]["url"] = url
    page_body["arguments"]["interval"] = "1s"
    created = api(base, token, page_body)
    assert created["ok"] and created["result"]["baseline"] == "currently 95.10", created
    page.wait_for_function("() => window.__sseOpen === true", timeout=LIVE)
    pages.set("/acmeb", '<html><body><span id="price">88.20</span></body></html>')
    expect(page.locator("li.message.wake", has_text="88.20 is below 90 (was 95.10)")).to_have_count(1,
                                                                                                  timeout=LIVE)
    expect(page.locator("li.message.wake")).to_have_count(2)
    assert token not in log.read_text(), "the token never reaches the log"
