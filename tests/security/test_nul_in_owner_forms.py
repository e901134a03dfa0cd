"""A NUL character (\\x00) typed into an owner's form or sent in a JSON field is refused with a 400 that names the
field, never a 500: PostgreSQL text can't hold one, so it must be stopped before the query (found by fuzzing)."""

from __future__ import annotations

import pytest
from schemathesis.python import asgi

from app import create_app
from tests.security.fuzz_support import BASE, sign_in

NUL = "a\x00b"


@pytest.fixture()
def owner_browser(settings, broker, owner):
    """An in-process client into the app, and the owner's session cookie and CSRF token."""
    from tasks.runtime import current

    with asgi.get_client(create_app(current().settings)) as client:
        session, csrf = sign_in(client)
        yield client, session, csrf


@pytest.mark.parametrize("path, form, named", [
    ("/settings/tokens", {"label": NUL}, "label"),
    ("/settings/models", {"name": "judge", "base_url": "https://models.example.com/v1", "model": NUL}, "Model"),
    ("/settings/models", {"name": "judge", "base_url": "https://models.example.com/v1", "model": "gpt-4o-mini",
                          "api_version": NUL}, "API version"),
], ids=["token label", "model", "api version"])
def test_owner_form_field_with_nul_is_refused_by_name(owner_browser, path, form, named):
    client, session, csrf = owner_browser
    answer = client.post(f"{BASE}{path}", data={"_csrf": csrf, **form}, cookies=session, allow_redirects=False)
    assert answer.status_code == 400, answer.text
    assert named in answer.text and "NUL" in answer.text


def test_runtime_token_label_with_nul_is_refused_by_name(owner_browser):
    client, session, csrf = owner_browser
    answer = client.post(f"{BASE}/api/tokens", json={"label": NUL}, cookies=session, headers={"X-CSRF-Token": csrf})
    assert answer.status_code == 400, answer.text
    assert "label" in answer.json()["detail"] and "NUL" in answer.json()["detail"]


def test_model_delete_with_nul_in_its_name_is_not_found(owner_browser):
    client, session, csrf = owner_browser
    answer = client.post(f"{BASE}/settings/models/a%00b/delete", data={"_csrf": csrf}, cookies=session,
                         allow_redirects=False)
    assert answer.status_code == 404, answer.text


def test_sign_in_with_nul_in_the_email_is_a_wrong_password(owner_browser):
    client, _, _ = owner_browser
    client.cookies.clear()
    page = client.get(f"{BASE}/login")
    visitor = {"vigil_session": page.cookies["vigil_session"]}
    csrf = page.text.split('name="_csrf" value="', 1)[1].split('"', 1)[0]
    answer = client.post(f"{BASE}/login", data={"_csrf": csrf, "email": "owner\x00@example.com", "password": "x"},
                         cookies=visitor, allow_redirects=False)
    assert answer.status_code == 400 and "Wrong email or password" in answer.text


@pytest.mark.parametrize("password", ["\x00" * 12, "good-pass\x00word", "tab\tin-the-middle", "new\nline-here"])
def test_a_new_password_with_control_characters_is_refused_and_nothing_changes(owner, password):
    """No login form can type a NUL or a newline, so such a password could never be used to sign in."""
    from models import database
    from models.accounts import AccountError, change_password, create_user
    from models.tables import User

    with database.connection_context():
        with pytest.raises(AccountError, match="control characters"):
            create_user("nul@example.com", password)
        before = User.get_by_id(owner[0].id).password_hash
        with pytest.raises(AccountError, match="control characters"):
            change_password(owner[0], password)
        assert User.get_by_id(owner[0].id).password_hash == before
        assert not User.select().where(User.email == "nul@example.com").exists()
