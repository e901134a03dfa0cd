"""Login throttling (issue 28): after LOGIN_FAILURES_PER_ACCOUNT wrong passwords for an email, or
LOGIN_FAILURES_PER_ADDRESS from an address, signing in is answered 429 with Retry-After, the right password too,
and the same whether the account exists or not; the owner's success elsewhere resets nothing.

The TestClient's requests all come from one address ("testclient"); the per-address tests run `vigil serve` (on
SQLite, its limits in memory) and call it from several loopback addresses (127.0.0.1, 127.0.0.2, …)."""

from __future__ import annotations

import html
import re

import pytest
import requests
from requests.adapters import HTTPAdapter

from tests.integration.helpers import login
from tests.processes import VIGIL, serve_vigil, stop, vigil

OWNER, PASSWORD = "owner@example.com", "owner-password"
LOCKED = re.compile(r"Too many failed sign-ins for this email or from this address; wait (\d+ (?:second|minute)s?) "
                    r"and try again\.")


def csrf_of(text: str) -> str:
    return re.search(r'name="_csrf" value="([^"]+)"', text).group(1)


def sign_in(client, email: str, password: str):
    form = client.get("/login")
    return client.post("/login", data={"email": email, "password": password, "_csrf": csrf_of(form.text)},
                       follow_redirects=False)


def error_of(answer) -> str:
    return html.unescape(re.search(r'<p class="error" role="alert">([^<]*)</p>', answer.text).group(1))


def assert_locked(answer, window: int = 900) -> None:
    assert answer.status_code == 429, answer.text
    assert 1 <= int(answer.headers["Retry-After"]) <= window
    assert LOCKED.fullmatch(error_of(answer)), error_of(answer)


def test_login_locked_after_five_wrong_passwords_even_for_the_right_one(client, owner):
    for _ in range(4):
        wrong = sign_in(client, OWNER, "not-the-password")
        assert wrong.status_code == 400 and error_of(wrong) == "Wrong email or password."
    assert sign_in(client, OWNER, PASSWORD).status_code == 303  # four are allowed; the success resets nothing
    client.cookies.clear()
    assert sign_in(client, OWNER, "not-the-password").status_code == 400
    right = sign_in(client, OWNER, PASSWORD)
    assert_locked(right)
    assert "location" not in right.headers
    assert client.get("/settings/tokens", follow_redirects=False).status_code == 302  # not signed in


def test_login_unknown_email_is_locked_with_the_same_answer(client, owner):
    for _ in range(5):
        assert sign_in(client, OWNER, "not-the-password").status_code == 400
        assert sign_in(client, "nobody@example.com", "not-the-password").status_code == 400
    known, unknown = sign_in(client, OWNER, PASSWORD), sign_in(client, "nobody@example.com", PASSWORD)
    assert_locked(known)
    assert_locked(unknown)
    assert error_of(known) == error_of(unknown)
    assert known.headers.get("content-type") == unknown.headers.get("content-type")


def test_login_email_counted_however_it_is_typed(client, owner):
    for spelling in ("owner@example.com", "Owner@Example.com", " OWNER@example.com", "owner@EXAMPLE.com"):
        assert sign_in(client, spelling, "not-the-password").status_code == 400
    assert sign_in(client, OWNER, "not-the-password").status_code == 400
    assert_locked(sign_in(client, "OWNER@EXAMPLE.COM", PASSWORD))


def test_login_limits_are_settings(client, owner, stranger, reconfigure):
    reconfigure(LOGIN_FAILURES_PER_ACCOUNT=2, LOGIN_FAILURES_PER_ADDRESS=3, LOGIN_FAILURE_WINDOW_SECONDS=60)
    assert sign_in(client, OWNER, "wrong").status_code == 400
    assert sign_in(client, OWNER, "wrong").status_code == 400
    assert_locked(sign_in(client, OWNER, PASSWORD), window=60)
    # a third failure from this address (another account) locks the address: the stranger too
    assert sign_in(client, "stranger@example.com", "wrong").status_code == 400
    assert_locked(sign_in(client, "stranger@example.com", "stranger-password"), window=60)


def test_login_password_change_counts_wrong_current_passwords(client, owner):
    login(client)
    csrf = re.search(r'"X-CSRF-Token": "([^"]+)"', client.get("/settings/tokens").text).group(1)
    change = {"password": "a-new-password", "password_again": "a-new-password", "_csrf": csrf}
    for _ in range(5):
        wrong = client.post("/settings/password", data={**change, "current_password": "guess"})
        assert wrong.status_code == 400
    locked = client.post("/settings/password", data={**change, "current_password": PASSWORD})
    assert locked.status_code == 429 and 1 <= int(locked.headers["Retry-After"]) <= 900
    client.cookies.clear()
    assert_locked(sign_in(client, OWNER, PASSWORD))


# --- per client address, through a real `vigil serve` -----------------------------------------------------------

class FromAddress(HTTPAdapter):
    """Connections from one loopback address of the many Linux answers on (127.0.0.0/8)."""

    def __init__(self, address: str) -> None:
        self.address = address
        super().__init__()

    def init_poolmanager(self, *args, **kwargs) -> None:
        kwargs["source_address"] = (self.address, 0)
        super().init_poolmanager(*args, **kwargs)


def browser(address: str) -> requests.Session:
    session = requests.Session()
    session.mount("http://", FromAddress(address))
    return session


def post_login(session: requests.Session, base: str, email: str, password: str) -> requests.Response:
    form = session.get(f"{base}/login", timeout=10)
    return session.post(f"{base}/login", data={"email": email, "password": password, "_csrf": csrf_of(form.text)},
                        allow_redirects=False, timeout=30)


@pytest.fixture()
def served(tmp_path):
    env = {"VIGIL_DATA_DIR": str(tmp_path / "data"), "DATABASE_URL": "", "REDIS_URL": "",
           "LOGIN_FAILURES_PER_ADDRESS": "6"}
    server = serve_vigil([VIGIL, "serve"], env, tmp_path / "serve.log")
    vigil("user", "create", OWNER, "--password", PASSWORD, env=env)
    yield server.base
    assert stop(server.process) == 0


def test_login_address_and_account_limits_from_several_addresses(served):
    base = served
    guesser, owner, spreader = browser("127.0.0.2"), browser("127.0.0.1"), browser("127.0.0.3")
    # one address trying many emails: locked after LOGIN_FAILURES_PER_ADDRESS, the right password too
    for n in range(6):
        assert post_login(spreader, base, f"guess{n}@example.com", "wrong-password").status_code == 400
    locked = post_login(spreader, base, OWNER, PASSWORD)
    assert locked.status_code == 429 and int(locked.headers["Retry-After"]) >= 1
    assert LOCKED.search(html.unescape(locked.text))
    # …which locks that address only
    assert post_login(owner, base, OWNER, PASSWORD).status_code == 303
    # the owner's success from one address resets nothing another address counted
    for _ in range(4):
        assert post_login(guesser, base, OWNER, "wrong-password").status_code == 400
    assert post_login(browser("127.0.0.1"), base, OWNER, PASSWORD).status_code == 303
    assert post_login(guesser, base, OWNER, "wrong-password").status_code == 400
    assert post_login(guesser, base, OWNER, PASSWORD).status_code == 429
    assert post_login(browser("127.0.0.1"), base, OWNER, PASSWORD).status_code == 429  # the account is locked
    # the browser signed in before the lock stays signed in
    assert owner.get(f"{base}/settings/tokens", allow_redirects=False, timeout=10).status_code == 200
