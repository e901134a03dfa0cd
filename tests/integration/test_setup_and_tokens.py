"""The owner's first minutes in a browser: /setup creates the first account (from this machine, or with the setup
code the web process prints), then Settings → Tokens and /api/tokens make, list and revoke runtime tokens.

The TestClient's requests come from "testclient", not a loopback address, so they play a visitor from another
machine; the loopback rule is tested through real `vigil serve` and `vigil web` processes on 127.0.0.1."""

from __future__ import annotations

import re
import threading
from datetime import datetime, timedelta

import pytest
import requests

from app.first_run import NO_CODE, WRONG_CODE, setup_code
from models.accounts import SetupDone, create_first_user, user_for_token
from models.tables import ApiToken, User
from tests.conftest import TEST_DATABASE_URL, TEST_REDIS_URL
from tests.integration.helpers import db, login
from tests.processes import VIGIL, serve_vigil, stop, vigil

EMAIL, PASSWORD = "first@example.com", "a-good-password"
CODE_LINE = re.compile(r"setup code: ([A-Z0-9]{4}-[A-Z0-9]{4}-[A-Z0-9]{4}-[A-Z0-9]{4})")


def csrf_of(html: str) -> str:
    return re.search(r'name="_csrf" value="([^"]+)"', html).group(1)


def page_csrf(client) -> str:
    """The CSRF token of a signed-in page (what htmx sends as X-CSRF-Token)."""
    return re.search(r'"X-CSRF-Token": "([^"]+)"', client.get("/settings/tokens").text).group(1)


def users() -> list[str]:
    with db():
        return [u.email for u in User.select()]


def setup_form(client, **fields):
    """GET /setup for its CSRF token, then POST the form with `fields` over the defaults."""
    form = client.get("/setup")
    assert form.status_code == 200, form.text
    data = {"email": EMAIL, "password": PASSWORD, "password_again": PASSWORD, "_csrf": csrf_of(form.text), **fields}
    return client.post("/setup", data={k: v for k, v in data.items() if v is not None}, follow_redirects=False)


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


# --- first run, as a visitor from another machine (the TestClient) ---------------------------------------------

def test_setup_home_and_login_lead_to_setup_without_an_account(client):
    assert client.get("/", follow_redirects=False).headers["location"] == "/setup"
    assert client.get("/login", follow_redirects=False).headers["location"] == "/setup"
    form = client.get("/setup")
    assert form.status_code == 200 and 'name="code"' in form.text and "Create your account" in form.text


def test_setup_home_leads_to_login_once_an_account_exists(client, owner):
    assert client.get("/", follow_redirects=False).headers["location"] == "/login"
    assert client.get("/login", follow_redirects=False).status_code == 200


def test_setup_from_another_machine_without_the_code_is_403_and_creates_nothing(client):
    missing = setup_form(client)
    assert missing.status_code == 403 and "creating the first account needs the setup code" in missing.text
    assert NO_CODE.startswith("From another machine, creating the first account needs the setup code.")
    wrong = setup_form(client, code="ABCD-EFGH-JKLM-NPQR")
    assert wrong.status_code == 403 and "That setup code is wrong; nothing was created." in wrong.text
    assert WRONG_CODE.startswith("That setup code is wrong")
    assert users() == []
    assert client.get("/settings/tokens", follow_redirects=False).status_code in (302, 303)


def test_setup_with_the_code_creates_the_owner_and_signs_them_in(client, settings):
    code = setup_code(settings.SECRET_KEY)
    created = setup_form(client, code=code.lower().replace("-", " "), email="  First@Example.com ")
    assert created.status_code == 303 and created.headers["location"] == "/settings/tokens"
    assert users() == [EMAIL]
    page = client.get("/settings/tokens")
    assert page.status_code == 200 and EMAIL in page.text and "No tokens yet" in page.text
    # the password was stored as `vigil user create` stores it: it signs in
    client.post("/logout", data={"_csrf": page_csrf(client)})
    assert login(client, EMAIL, PASSWORD)


def test_setup_applies_the_account_rules_and_creates_nothing(client, settings):
    code = setup_code(settings.SECRET_KEY)
    differ = setup_form(client, code=code, password_again="another-password")
    assert differ.status_code == 400 and "The two passwords differ" in differ.text
    short = setup_form(client, code=code, password="short", password_again="short")
    assert short.status_code == 400 and "at least 8 characters" in short.text
    bad = setup_form(client, code=code, email="not-an-email")
    assert bad.status_code == 400 and "is not an email address" in bad.text
    assert users() == []


def test_setup_without_csrf_is_403(client, settings):
    client.get("/setup")
    refused = client.post("/setup", data={"email": EMAIL, "password": PASSWORD, "password_again": PASSWORD,
                                          "code": setup_code(settings.SECRET_KEY)}, follow_redirects=False)
    assert refused.status_code == 403 and users() == []


def test_setup_is_404_once_an_account_exists_even_with_the_code(client, settings, owner):
    assert client.get("/setup").status_code == 404
    csrf = csrf_of(client.get("/login").text)
    fields = {"email": EMAIL, "password": PASSWORD, "password_again": PASSWORD,
              "code": setup_code(settings.SECRET_KEY), "_csrf": csrf}
    assert client.post("/setup", data=fields, follow_redirects=False).status_code == 404
    assert client.post("/setup", data={}, follow_redirects=False).status_code == 404
    assert users() == ["owner@example.com"]


def test_setup_waits_for_an_account_being_created_and_then_refuses(postgres):
    """The check and the insert are one locked transaction: while another transaction is inserting a user (a
    second setup, or `vigil user create`), setup waits for it, then sees the account and creates none. Without
    the lock it would not see the uncommitted row and would make a second owner."""
    outcome: list[str] = []

    def setup() -> None:
        with postgres.connection_context():
            try:
                create_first_user(EMAIL, PASSWORD)
                outcome.append("created")
            except SetupDone:
                outcome.append("refused")

    waiting = threading.Thread(target=setup)
    with postgres.connection_context(), postgres.atomic():
        User.create(email="cli@example.com", password_hash="x")
        waiting.start()
        waiting.join(1.5)
        assert outcome == [] and waiting.is_alive(), "setup did not wait for the other transaction"
    waiting.join(30)
    assert outcome == ["refused"] and users() == ["cli@example.com"]


def test_setup_concurrent_creates_make_one_owner(postgres):
    barrier, outcomes = threading.Barrier(8), []

    def attempt(n: int) -> None:
        barrier.wait()
        with postgres.connection_context():
            try:
                create_first_user(f"owner{n}@example.com", PASSWORD)
                outcomes.append("created")
            except SetupDone:
                outcomes.append("refused")

    threads = [threading.Thread(target=attempt, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes) == ["created"] + ["refused"] * 7
    assert len(users()) == 1


# --- first run through real processes on 127.0.0.1 --------------------------------------------------------------

@pytest.fixture()
def served(tmp_path):
    """`vigil serve` on an empty SQLite file, as `./scripts/run` starts it."""
    env = {"VIGIL_DATA_DIR": str(tmp_path / "data"), "DATABASE_URL": "", "REDIS_URL": ""}
    log = tmp_path / "serve.log"
    server = serve_vigil([VIGIL, "serve"], env, log)
    yield server.base, env, log
    assert stop(server.process) == 0


def post_setup(session: requests.Session, base: str, headers: dict | None = None, **fields) -> requests.Response:
    form = session.get(f"{base}/setup", headers=headers, timeout=10)
    data = {"email": EMAIL, "password": PASSWORD, "password_again": PASSWORD, "_csrf": csrf_of(form.text), **fields}
    return session.post(f"{base}/setup", data=data, headers=headers, allow_redirects=False, timeout=10)


def test_setup_from_loopback_needs_no_code_and_ends_on_tokens(served):
    """The README's first minutes: open the URL, create the account, copy a token, call the API with it."""
    base, env, log = served
    banner = log.read_text()
    assert f"No account yet: open {base} in a browser" in banner and "vigil token create" in banner
    session = requests.Session()
    home = session.get(base, timeout=10)
    assert home.url == f"{base}/setup" and 'name="code"' not in home.text
    created = post_setup(session, base)
    assert created.status_code == 303 and created.headers["location"] == "/settings/tokens"
    page = session.get(f"{base}/settings/tokens", timeout=10).text
    made = session.post(f"{base}/settings/tokens", data={"label": "laptop agent", "_csrf": csrf_of(page)}, timeout=10)
    assert made.status_code == 200 and "Copy" in made.text and made.headers["Cache-Control"] == "no-store"
    token = re.search(r'id="new-token-value" value="(vgl_[^"]+)"', made.text).group(1)
    assert requests.get(f"{base}/api/monitors", headers=bearer(token), timeout=10).json() == {"monitors": []}
    assert token not in session.get(f"{base}/settings/tokens", timeout=10).text
    # the first account exists now: /setup is gone, and the CLI path works on the same account
    assert session.get(f"{base}/setup", timeout=10).status_code == 404
    cli_token = vigil("token", "create", "--user", EMAIL, env=env).strip().splitlines()[-1]
    assert requests.get(f"{base}/api/monitors", headers=bearer(cli_token), timeout=10).status_code == 200


@pytest.mark.parametrize("proxy", [{"X-Forwarded-For": "203.0.113.9"}, {"Forwarded": "for=203.0.113.9"},
                                   {"X-Real-IP": "203.0.113.9"}])
def test_setup_through_a_proxy_on_loopback_needs_the_banner_code(served, proxy):
    base, env, log = served
    code = CODE_LINE.search(log.read_text()).group(1)
    session = requests.Session()
    assert 'name="code"' in session.get(f"{base}/setup", headers=proxy, timeout=10).text
    assert post_setup(session, base, proxy).status_code == 403
    assert post_setup(session, base, proxy, code="WRNG-CODE-WRNG-CODE").status_code == 403
    assert session.get(f"{base}/setup", timeout=10).status_code == 200  # nothing was created
    created = post_setup(session, base, proxy, code=code)
    assert created.status_code == 303 and created.headers["location"] == "/settings/tokens"
    assert EMAIL in session.get(f"{base}/settings/tokens", timeout=10).text
    assert post_setup_after(session, base, code) == 404


def post_setup_after(session: requests.Session, base: str, code: str) -> int:
    """POST /setup once an account exists (with the code and a valid CSRF token): its status."""
    csrf = re.search(r'"X-CSRF-Token": "([^"]+)"', session.get(f"{base}/settings/tokens", timeout=10).text).group(1)
    return session.post(f"{base}/setup", data={"email": "second@example.com", "password": PASSWORD,
                                               "password_again": PASSWORD, "code": code, "_csrf": csrf},
                        allow_redirects=False, timeout=10).status_code


@pytest.fixture()
def two_webs(postgres, tmp_path):
    """Two `vigil web` processes of one deployment (one SECRET_KEY) on the integration database (emptied by
    `clean`, an autouse fixture, before they start); the second does not trust loopback (SETUP_TRUST_LOOPBACK=false)."""
    env = {"DATABASE_URL": TEST_DATABASE_URL, "REDIS_URL": TEST_REDIS_URL, "SECRET_KEY": "two-webs-secret",
           "VIGIL_DATA_DIR": str(tmp_path)}
    webs = []
    for name, extra in (("a", {}), ("b", {"SETUP_TRUST_LOOPBACK": "false"})):
        log = tmp_path / f"web-{name}.log"
        served = serve_vigil([VIGIL, "web"], {**env, **extra}, log)
        webs.append((served.process, served.base, log))
    yield [(base, log) for _, base, log in webs]
    for process, _, _ in webs:
        assert stop(process) == 0


def test_setup_code_is_the_same_in_every_web_process_and_one_owner_is_made(two_webs):
    (base_a, log_a), (base_b, log_b) = two_webs
    codes = {CODE_LINE.search(log.read_text()).group(1) for log in (log_a, log_b)}
    assert codes == {setup_code("two-webs-secret")}
    code = codes.pop()
    session = requests.Session()
    assert 'name="code"' in session.get(f"{base_b}/setup", timeout=10).text
    assert post_setup(session, base_b).status_code == 403  # loopback is not trusted there
    # the same form POSTed to both processes at once, with the code each printed: one owner
    sessions, answers = [requests.Session() for _ in range(6)], []
    forms = [(s, csrf_of(s.get(f"{(base_a, base_b)[i % 2]}/setup", timeout=10).text)) for i, s in enumerate(sessions)]
    barrier = threading.Barrier(len(forms))

    def post(i: int, session: requests.Session, csrf: str) -> None:
        barrier.wait()
        answers.append(session.post(f"{(base_a, base_b)[i % 2]}/setup", allow_redirects=False, timeout=30, data={
            "email": f"owner{i}@example.com", "password": PASSWORD, "password_again": PASSWORD, "code": code,
            "_csrf": csrf}).status_code)

    threads = [threading.Thread(target=post, args=(i, s, c)) for i, (s, c) in enumerate(forms)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(answers) == [303] + [404] * 5
    assert len(users()) == 1
    assert requests.get(f"{base_a}/setup", timeout=10).status_code == 404
    assert requests.get(f"{base_b}/setup", timeout=10).status_code == 404


# --- Settings → Tokens and /api/tokens ----------------------------------------------------------------------------

def test_tokens_created_once_then_listed_without_the_token(client, owner):
    login(client)
    csrf = page_csrf(client)
    made = client.post("/api/tokens", json={"label": "laptop"}, headers={"X-CSRF-Token": csrf})
    assert made.status_code == 201 and made.headers["Cache-Control"] == "no-store"
    body = made.json()
    assert set(body) == {"id", "label", "token", "created_at"} and body["label"] == "laptop"
    assert body["token"].startswith("vgl_") and body["created_at"].endswith("Z")
    listed = client.get("/api/tokens")
    assert body["token"] not in listed.text and body["token"] not in client.get("/settings/tokens").text
    rows = {t["label"]: t for t in listed.json()["tokens"]}
    assert set(rows) == {"", "laptop"}
    assert rows["laptop"] == {"id": body["id"], "label": "laptop", "created_at": body["created_at"],
                              "last_used_at": None}
    with db():
        assert ApiToken.get_by_id(body["id"]).digest not in listed.text


def test_tokens_last_used_moves_on_use_at_most_once_a_minute(client, owner):
    login(client)
    token = client.post("/api/tokens", json={"label": "busy"}, headers={"X-CSRF-Token": page_csrf(client)}).json()

    def last_used() -> datetime | None:
        row = next(t for t in client.get("/api/tokens").json()["tokens"] if t["id"] == token["id"])
        return row["last_used_at"] and datetime.fromisoformat(row["last_used_at"].replace("Z", "+00:00"))

    assert client.get("/api/monitors", headers=bearer(token["token"])).status_code == 200
    first = last_used()
    assert first is not None
    assert client.get("/api/monitors", headers=bearer(token["token"])).status_code == 200
    assert last_used() == first  # a second call within the minute writes nothing
    with db():
        row = ApiToken.get_by_id(token["id"])
        ApiToken.update(last_used_at=row.last_used_at - timedelta(minutes=2)).where(ApiToken.id == row.id).execute()
    assert client.get("/api/monitors", headers=bearer(token["token"])).status_code == 200
    assert last_used() > first
    with db():  # with `now` passed in: within the minute nothing moves, past it it does
        row = ApiToken.get_by_id(token["id"])
        user_for_token(token["token"], row.last_used_at + timedelta(seconds=59))
        assert ApiToken.get_by_id(token["id"]).last_used_at == row.last_used_at
        later = row.last_used_at + timedelta(seconds=61)
        user_for_token(token["token"], later)
        assert ApiToken.get_by_id(token["id"]).last_used_at == later


def test_tokens_form_shows_the_new_token_once_with_a_copy_button(client, owner):
    login(client)
    page = client.get("/settings/tokens")
    assert '<a href="/settings/tokens" class="current" aria-current="page">Tokens</a>' in page.text  # the nav's
    made = client.post("/settings/tokens", data={"label": "ci box", "_csrf": csrf_of(page.text)},
                       follow_redirects=False)
    assert made.status_code == 303 and made.headers["location"] == "/settings/tokens" and "vgl_" not in made.text
    shown = client.get("/settings/tokens")  # the redirect's view: the token, once
    assert 'data-copy-from="#new-token-value"' in shown.text and shown.headers["cache-control"] == "no-store"
    assert '<script src="/static/vigil.js"' in shown.text and "<script>" not in shown.text  # no inline script (CSP)
    token = re.search(r'id="new-token-value" value="(vgl_[^"]+)"', shown.text).group(1)
    again = client.get("/settings/tokens").text  # a reload: no token shown, none made
    assert token not in again and "ci box" in again and 'id="new-token-value"' not in again
    with db():
        assert sorted(t.label for t in ApiToken.select()) == ["", "ci box"]
    assert client.get("/api/monitors", headers=bearer(token)).status_code == 200


def test_tokens_form_keeps_the_typed_label_on_an_error_and_refuses_a_5000_character_one(client, owner):
    login(client)
    csrf = page_csrf(client)
    refused = client.post("/settings/tokens", data={"label": "a" * 5000, "_csrf": csrf}, follow_redirects=False)
    assert refused.status_code == 400 and "the label must be text of at most 100 characters" in refused.text
    assert f'value="{"a" * 5000}"' in refused.text and "vgl_" not in refused.text
    with db():
        assert [t.label for t in ApiToken.select()] == [""]


def test_tokens_revoked_token_is_401_at_once_another_still_works(client, owner):
    login(client)
    csrf = page_csrf(client)
    doomed, kept = (client.post("/api/tokens", json={"label": name}, headers={"X-CSRF-Token": csrf}).json()
                    for name in ("doomed", "kept"))
    assert client.get("/api/monitors", headers=bearer(doomed["token"])).status_code == 200
    assert client.delete(f"/api/tokens/{doomed['id']}", headers={"X-CSRF-Token": csrf}).status_code == 204
    assert client.get("/api/monitors", headers=bearer(doomed["token"])).status_code == 401
    assert client.get("/api/monitors", headers=bearer(kept["token"])).status_code == 200
    assert client.get("/api/monitors", headers=bearer(owner[1])).status_code == 200
    assert client.delete(f"/api/tokens/{doomed['id']}", headers={"X-CSRF-Token": csrf}).status_code == 404
    # the page's Revoke button does the same
    revoked = client.post(f"/settings/tokens/{kept['id']}/revoke", data={"_csrf": csrf}, follow_redirects=False)
    assert revoked.status_code == 303 and revoked.headers["location"] == "/settings/tokens"
    assert client.get("/api/monitors", headers=bearer(kept["token"])).status_code == 401
    assert [t["label"] for t in client.get("/api/tokens").json()["tokens"]] == [""]


def test_tokens_a_runtime_token_gets_403(client, owner):
    token = bearer(owner[1])
    assert client.get("/api/tokens", headers=token).status_code == 403
    assert client.post("/api/tokens", json={"label": "mine now"}, headers=token).status_code == 403
    with db():
        own_id = ApiToken.get().id
    assert client.delete(f"/api/tokens/{own_id}", headers=token).status_code == 403
    page = client.get("/settings/tokens", headers=token)
    assert page.status_code == 403 and "a runtime token never can" in page.text
    assert client.post("/settings/tokens", data={"label": "x"}, headers=token).status_code == 403
    # even with a session beside it, a call that carries a token is the token's
    login(client)
    assert client.get("/api/tokens", headers=token).status_code == 403
    with db():
        assert ApiToken.select().count() == 1
    # and with neither, nothing: 401 before anything is looked at (app/gate.py)
    client.cookies.clear()
    assert client.get("/api/tokens").status_code == 401
    assert client.get("/settings/tokens", follow_redirects=False).headers["location"] == "/login?next=/settings/tokens"


def test_tokens_another_accounts_token_is_404(client, owner, stranger):
    login(client)
    csrf = page_csrf(client)
    with db():
        theirs = ApiToken.get(ApiToken.user == stranger[0]).id
    assert client.delete(f"/api/tokens/{theirs}", headers={"X-CSRF-Token": csrf}).status_code == 404
    assert client.post(f"/settings/tokens/{theirs}/revoke", data={"_csrf": csrf}).status_code == 404
    assert client.get("/api/monitors", headers=bearer(stranger[1])).status_code == 200
    assert theirs not in [t["id"] for t in client.get("/api/tokens").json()["tokens"]]


def test_tokens_label_over_100_characters_is_400_and_nothing_is_created(client, owner):
    login(client)
    csrf = page_csrf(client)
    long = client.post("/api/tokens", json={"label": "x" * 101}, headers={"X-CSRF-Token": csrf})
    assert long.status_code == 400 and "at most 100 characters" in long.json()["detail"]
    assert client.post("/api/tokens", json={"label": 7}, headers={"X-CSRF-Token": csrf}).status_code == 400
    for not_an_object in ([1], "s", 3):
        refused = client.post("/api/tokens", json=not_an_object, headers={"X-CSRF-Token": csrf})
        assert refused.status_code == 400 and "JSON object" in refused.json()["detail"], refused.text
    form = client.post("/settings/tokens", data={"label": "y" * 101, "_csrf": csrf})
    assert form.status_code == 400 and "at most 100 characters" in form.text and "vgl_" not in form.text
    exactly = client.post("/api/tokens", json={"label": "z" * 100}, headers={"X-CSRF-Token": csrf})
    assert exactly.status_code == 201
    with db():
        assert sorted(t.label for t in ApiToken.select()) == ["", "z" * 100]


def test_tokens_changes_without_csrf_are_403(client, owner):
    login(client)
    with db():
        own_id = ApiToken.get().id
    assert client.post("/api/tokens", json={"label": "sneaky"}).status_code == 403
    assert client.post("/api/tokens", json={"label": "sneaky"}, headers={"X-CSRF-Token": "forged"}).status_code == 403
    assert client.delete(f"/api/tokens/{own_id}").status_code == 403
    assert client.post("/settings/tokens", data={"label": "sneaky"}).status_code == 403
    assert client.post(f"/settings/tokens/{own_id}/revoke", data={}).status_code == 403
    with db():
        assert [t.label for t in ApiToken.select()] == [""]
    assert client.get("/api/monitors", headers=bearer(owner[1])).status_code == 200
