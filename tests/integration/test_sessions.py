"""Browser sessions are server-side (issue 28): a cookie replayed after signing out is signed out; "Sign out
everywhere" ends every browser's session; a password change ends the other browsers' sessions but not its own; an
unused session ends after SESSION_IDLE_SECONDS, any session SESSION_MAX_SECONDS after its sign-in.

Two browsers are one TestClient whose session cookie the test swaps, as a stolen cookie would be replayed."""

from __future__ import annotations

import re
from datetime import timedelta

from models.sessions import Lifetime, find_session
from models.tables import ApiToken, BrowserSession
from tests.conftest import TEST_DATABASE_URL, TEST_REDIS_URL
from tests.integration.helpers import db, login, tool
from tests.processes import vigil

COOKIE = "vigil_session"


def cookie_of(client) -> str:
    return client.cookies[COOKIE]


def as_browser(client, cookie: str) -> None:
    """Make `client` the browser that holds `cookie`."""
    client.cookies.clear()
    client.cookies.set(COOKIE, cookie)


def two_browsers(client) -> tuple[str, str]:
    """The owner signed in twice: each browser's cookie (the client is left as the second)."""
    login(client)
    first = cookie_of(client)
    client.cookies.clear()
    login(client)
    return first, cookie_of(client)


def signed_in(client) -> bool:
    page = client.get("/settings/tokens", follow_redirects=False)
    assert page.status_code in (200, 302), page.text
    return page.status_code == 200


def page_csrf(client) -> str:
    return re.search(r'"X-CSRF-Token": "([^"]+)"', client.get("/settings/tokens").text).group(1)


def tokens() -> int:
    with db():
        return ApiToken.select().count()


def webhook_monitor(client, token: str) -> str:
    body = tool(client, token, "monitor_create", {"description": "the deploy finishes", "max_wakes": 1,
                                                  "source": {"type": "webhook", "signature": "hmac_sha256"}}).json()
    assert body["ok"], body
    return body["result"]["monitor_id"]


def test_sessions_cookie_replayed_after_logout_opens_nothing(client, owner):
    monitor_id = webhook_monitor(client, owner[1])
    login(client)
    cookie, csrf = cookie_of(client), page_csrf(client)
    assert client.get(f"/api/monitors/{monitor_id}/secret").status_code == 200  # the session could, before
    out = client.post("/logout", data={"_csrf": csrf}, follow_redirects=False)
    assert out.status_code == 303 and out.headers["location"] == "/login"
    as_browser(client, cookie)  # the cookie as it was before signing out, replayed
    page = client.get("/settings/tokens", follow_redirects=False)
    assert page.status_code == 302 and page.headers["location"] == "/login?next=/settings/tokens"
    assert client.get(f"/api/monitors/{monitor_id}/secret").status_code == 404
    assert client.post("/api/tokens", json={"label": "replayed"}, headers={"X-CSRF-Token": csrf}).status_code == 403
    assert client.post("/settings/tokens", data={"label": "replayed", "_csrf": csrf}).status_code == 403
    assert client.get("/api/tokens").status_code in (401, 403)
    assert tokens() == 1  # the owner's own, from the fixture
    with db():
        assert BrowserSession.select().count() == 0


def test_sessions_cookie_holds_only_a_random_id(client, owner):
    login(client)
    cookie = cookie_of(client)
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", cookie), cookie
    with db():
        [row] = BrowserSession.select()
    assert cookie not in (row.digest, row.csrf) and row.user_id == owner[0].id
    client.cookies.clear()
    login(client)
    assert cookie_of(client) != cookie  # every sign-in starts a new id


def test_sessions_sign_out_everywhere_ends_every_browser(client, owner, stranger):
    first, second = two_browsers(client)
    as_browser(client, first)
    ended = client.post("/settings/sign-out-everywhere", data={"_csrf": page_csrf(client)}, follow_redirects=False)
    assert ended.status_code == 303 and ended.headers["location"] == "/login"
    assert not signed_in(client)
    as_browser(client, first)
    assert not signed_in(client)
    as_browser(client, second)
    assert not signed_in(client)
    # another account's session, and the runtime tokens, are not touched
    client.cookies.clear()
    login(client, "stranger@example.com", "stranger-password")
    assert signed_in(client)
    assert client.get("/api/monitors", headers={"Authorization": f"Bearer {owner[1]}"}).status_code == 200


def test_sessions_sign_out_everywhere_needs_the_csrf_token(client, owner):
    login(client)
    assert client.post("/settings/sign-out-everywhere", data={}).status_code == 403
    assert signed_in(client)


def test_sessions_password_change_ends_the_other_sessions_and_keeps_its_own(client, owner):
    first, second = two_browsers(client)
    as_browser(client, first)
    changed = client.post("/settings/password", data={
        "current_password": "owner-password", "password": "a-new-password", "password_again": "a-new-password",
        "_csrf": page_csrf(client)})
    assert changed.status_code == 200 and "Password changed; 1 other browser session signed out." in changed.text
    assert signed_in(client)
    as_browser(client, second)
    assert not signed_in(client)
    client.cookies.clear()
    form = client.get("/login")
    csrf = re.search(r'name="_csrf" value="([^"]+)"', form.text).group(1)
    old = client.post("/login", data={"email": "owner@example.com", "password": "owner-password", "_csrf": csrf})
    assert old.status_code == 400
    login(client, password="a-new-password")


def test_sessions_password_change_refused_changes_nothing(client, owner):
    first, second = two_browsers(client)
    csrf = page_csrf(client)
    wrong = client.post("/settings/password", data={"current_password": "not-it", "password": "a-new-password",
                                                    "password_again": "a-new-password", "_csrf": csrf})
    assert wrong.status_code == 400 and "The current password is wrong; nothing was changed." in wrong.text
    differ = client.post("/settings/password", data={"current_password": "owner-password", "password": "a-new-password",
                                                     "password_again": "another-password", "_csrf": csrf})
    assert differ.status_code == 400 and "The two new passwords differ" in differ.text
    short = client.post("/settings/password", data={"current_password": "owner-password", "password": "short",
                                                    "password_again": "short", "_csrf": csrf})
    assert short.status_code == 400 and "at least 8 characters" in short.text
    assert client.post("/settings/password", data={"current_password": "owner-password", "password": "a-new-password",
                                                   "password_again": "a-new-password"}).status_code == 403
    as_browser(client, first)
    assert signed_in(client)
    client.cookies.clear()
    login(client)  # the old password still signs in


def test_sessions_password_set_with_the_cli_ends_every_session(client, owner, tmp_path):
    login(client)
    env = {"DATABASE_URL": TEST_DATABASE_URL, "REDIS_URL": TEST_REDIS_URL, "VIGIL_DATA_DIR": str(tmp_path)}
    said = vigil("user", "password", "owner@example.com", "--password", "a-new-password", env=env)
    assert "changed the password of owner@example.com; 1 browser session signed out" in said
    assert not signed_in(client)
    login(client, password="a-new-password")


def test_sessions_unused_for_the_idle_time_end(client, owner, reconfigure):
    reconfigure(SESSION_IDLE_SECONDS=3600)
    login(client)
    with db():
        BrowserSession.update(last_seen_at=BrowserSession.last_seen_at - timedelta(seconds=3540)).execute()
    assert signed_in(client)  # 59 minutes unused: still on, and seen now
    with db():
        BrowserSession.update(last_seen_at=BrowserSession.last_seen_at - timedelta(seconds=3601)).execute()
    assert not signed_in(client)
    with db():
        assert BrowserSession.select().count() == 0


def test_sessions_end_at_their_longest_however_busy(client, owner, reconfigure):
    reconfigure(SESSION_MAX_SECONDS=86400)
    login(client)
    with db():
        BrowserSession.update(created_at=BrowserSession.created_at - timedelta(seconds=86401)).execute()
    assert not signed_in(client)


def test_sessions_last_seen_is_written_at_most_once_a_minute(client, owner):
    login(client)
    with db():
        [row] = BrowserSession.select()
    assert signed_in(client) and signed_in(client)
    with db():
        assert BrowserSession.get_by_id(row.id).last_seen_at == row.last_seen_at  # no write within the minute
        BrowserSession.update(last_seen_at=row.last_seen_at - timedelta(seconds=61)).execute()
    assert signed_in(client)
    with db():
        assert BrowserSession.get_by_id(row.id).last_seen_at > row.last_seen_at


def test_sessions_found_until_idle_with_now_passed_in(client, owner):
    login(client)
    cookie, lifetime = cookie_of(client), Lifetime(idle=timedelta(hours=1), longest=timedelta(days=1))
    with db():
        [row] = BrowserSession.select()
        assert find_session(cookie, lifetime, row.last_seen_at + timedelta(minutes=59)).id == row.id
        later = row.last_seen_at + timedelta(hours=1, minutes=59, seconds=1)
        assert find_session(cookie, lifetime, later) is None
        assert find_session(cookie[:-1], lifetime, row.last_seen_at) is None
        assert BrowserSession.select().count() == 0
