"""Judge models belong to an account (issue 28): two accounts, real judge servers on 127.0.0.1, the Models page,
monitor_create and the judge step. And an account's base URL goes through the SSRF guard, at save and at call."""

from __future__ import annotations

import re
from importlib import import_module

import pytest

from models import database
from models.tables import JudgeModel, Monitor
from tests.integration.helpers import db, login, tool, wakes
from tests.judge_server import JudgeServer

CONDITION = "a security fix is announced"
A_KEY, B_KEY = "sk-account-A-secret", "sk-account-B-secret"


@pytest.fixture()
def servers():
    """A's judge server and B's listener."""
    with JudgeServer(mode="match") as a_server, JudgeServer(mode="match") as b_server:
        yield a_server, b_server


@pytest.fixture()
def local_models(reconfigure):
    """The judge servers are on 127.0.0.1: the operator lets accounts' models be local."""
    return reconfigure(JUDGE_ALLOW_PRIVATE_URLS=True)


def sign_in_as(client, email: str, password: str) -> str:
    """Sign `client` in as another account; returns the Models page's form CSRF token."""
    client.cookies.clear()
    login(client, email, password)
    return form_csrf(client)


def form_csrf(client) -> str:
    return re.search(r'name="_csrf" value="([^"]+)"', client.get("/settings/models").text).group(1)


def save(client, csrf: str, name: str, base_url: str, api_key: str = "", model: str = "judge-mini"):
    return client.post("/settings/models", follow_redirects=False, data={
        "_csrf": csrf, "name": name, "base_url": base_url, "model": model, "api_key": api_key, "api_version": ""})


def judged_monitor(client, token: str, pages, path: str, **arguments) -> str:
    """A page monitor with a condition, and a change of its page that the check fires on; returns its id."""
    url = pages.set(path, "<li>1.0 first</li>")
    body = tool(client, token, "monitor_create", {
        "description": "the release notes mention a security fix", "source": {"type": "page", "url": url},
        "interval": "5m", "max_wakes": 5, "condition": CONDITION, **arguments}).json()
    assert body["ok"], body
    pages.set(path, "<li>1.1 fixes CVE-2026-1</li><li>1.0 first</li>")
    return body["result"]["monitor_id"]


def test_models_page_lists_only_the_accounts_own_models(client, owner, stranger, servers, local_models):
    a_server, _ = servers
    csrf = sign_in_as(client, "owner@example.com", "owner-password")
    assert save(client, csrf, "a-private-judge", a_server.base_url, A_KEY).status_code == 303
    assert 'id="model-a-private-judge"' in client.get("/settings/models").text
    sign_in_as(client, "stranger@example.com", "stranger-password")
    page = client.get("/settings/models").text
    assert "a-private-judge" not in page and a_server.base_url not in page


def test_saving_default_in_another_account_never_reaches_the_owners_judge(client, owner, stranger, pages, servers,
                                                                          local_models, run_due_checks):
    """B re-saves `default` pointing at its own listener with an empty key: that is B's own new entry, with no key.
    A's judge still goes to A's server with A's key, and B's listener receives nothing."""
    a_server, b_listener = servers
    csrf = sign_in_as(client, "owner@example.com", "owner-password")
    assert save(client, csrf, "default", a_server.base_url, A_KEY).status_code == 303
    csrf = sign_in_as(client, "stranger@example.com", "stranger-password")
    assert save(client, csrf, "default", b_listener.base_url, api_key="").status_code == 303
    monitor_id = judged_monitor(client, owner[1], pages, "/a-notes")
    run_due_checks()
    assert b_listener.requests == []
    [request] = a_server.requests
    assert request.headers["authorization"] == f"Bearer {A_KEY}"
    [wake] = wakes(monitor_id)
    assert wake.metadata["checked_against_condition"] is True
    with db():
        entries = {(m.user_id, m.base_url, bool(m.api_key_encrypted)) for m in JudgeModel.select()}
    assert entries == {(owner[0].id, a_server.base_url, True), (stranger[0].id, b_listener.base_url, False)}


def test_saving_default_never_changes_the_operators_default(client, owner, stranger, pages, servers, reconfigure,
                                                             run_due_checks):
    """The instance default (JUDGE_* settings) is the operator's: an account's `default` is its own entry, and
    another account's monitors still go to the operator's model with the operator's key."""
    operator, b_listener = servers
    reconfigure(JUDGE_BASE_URL=operator.base_url, JUDGE_API_KEY="sk-operator", JUDGE_MODEL="judge-mini",
                JUDGE_ALLOW_PRIVATE_URLS=True)
    csrf = sign_in_as(client, "stranger@example.com", "stranger-password")
    assert operator.base_url not in client.get("/settings/models").text
    assert save(client, csrf, "default", b_listener.base_url, B_KEY).status_code == 303
    monitor_id = judged_monitor(client, owner[1], pages, "/a-notes")
    run_due_checks()
    assert b_listener.requests == []
    [request] = operator.requests
    assert request.headers["authorization"] == "Bearer sk-operator"
    assert len(wakes(monitor_id)) == 1


def test_another_accounts_model_cannot_be_deleted(client, owner, stranger, servers, local_models):
    a_server, _ = servers
    csrf = sign_in_as(client, "owner@example.com", "owner-password")
    assert save(client, csrf, "default", a_server.base_url, A_KEY).status_code == 303
    csrf = sign_in_as(client, "stranger@example.com", "stranger-password")
    deleted = client.post("/settings/models/default/delete", data={"_csrf": csrf}, follow_redirects=False)
    assert deleted.status_code == 404
    with db():
        assert [(m.user_id, m.name) for m in JudgeModel.select()] == [(owner[0].id, "default")]


def test_a_monitor_naming_another_accounts_model_is_refused(client, owner, stranger, pages, servers, local_models):
    _, b_server = servers
    csrf = sign_in_as(client, "stranger@example.com", "stranger-password")
    assert save(client, csrf, "b-paid-model", b_server.base_url, B_KEY).status_code == 303
    url = pages.set("/notes", "<li>1.0</li>")
    body = tool(client, owner[1], "monitor_create", {
        "description": "d", "source": {"type": "page", "url": url}, "condition": CONDITION,
        "judge_model": "b-paid-model"}).json()
    assert body["ok"] is False
    assert "There is no judge model named 'b-paid-model' in this account's Settings → Models" in body["error"]
    with db():
        assert Monitor.select().count() == 0
    assert b_server.requests == []


@pytest.mark.parametrize(("base_url", "reason"), [
    ("http://127.0.0.1:{port}/v1", "a loopback address"),
    ("http://localhost:{port}/v1", "a loopback address"),
    ("http://10.1.2.3:11434/v1", "a private address"),
    ("http://169.254.169.254/latest", "the cloud metadata address"),
])
def test_a_local_or_metadata_base_url_is_refused_at_save(client, owner, servers, base_url, reason):
    csrf = sign_in_as(client, "owner@example.com", "owner-password")
    refused = save(client, csrf, "local", base_url.format(port=servers[0].port), A_KEY)
    assert refused.status_code == 400
    assert "Base URL" in refused.text and reason in refused.text and "JUDGE_ALLOW_PRIVATE_URLS" in refused.text
    with db():
        assert JudgeModel.select().count() == 0


def test_the_operator_setting_lets_a_local_model_server_through_but_never_metadata(client, owner, servers,
                                                                                    local_models):
    csrf = sign_in_as(client, "owner@example.com", "owner-password")
    assert save(client, csrf, "ollama", servers[0].base_url).status_code == 303
    assert save(client, csrf, "lan", "http://10.1.2.3:11434/v1").status_code == 303
    refused = save(client, csrf, "metadata", "http://169.254.169.254/latest", A_KEY)
    assert refused.status_code == 400 and "the cloud metadata address" in refused.text
    with db():
        assert sorted(m.name for m in JudgeModel.select()) == ["lan", "ollama"]


def test_a_model_without_a_key_judges_and_is_sent_no_credential(client, owner, pages, servers, local_models,
                                                                 run_due_checks):
    local, _ = servers
    csrf = sign_in_as(client, "owner@example.com", "owner-password")
    assert save(client, csrf, "ollama", local.base_url, api_key="").status_code == 303
    assert 'id="model-ollama"' in client.get("/settings/models").text
    monitor_id = judged_monitor(client, owner[1], pages, "/notes", judge_model="ollama")
    run_due_checks()
    [request] = local.requests
    assert "authorization" not in request.headers
    [wake] = wakes(monitor_id)
    assert wake.metadata["checked_against_condition"] is True


def test_an_accounts_model_is_guarded_again_when_it_is_called(client, owner, pages, servers, local_models,
                                                              reconfigure, run_due_checks):
    """Saved while the operator allowed local models, then disallowed (as a name that resolves elsewhere later):
    the call is refused by address, nothing reaches the server, and the match wakes marked unchecked."""
    local, _ = servers
    csrf = sign_in_as(client, "owner@example.com", "owner-password")
    assert save(client, csrf, "default", local.base_url, A_KEY).status_code == 303
    reconfigure(JUDGE_ALLOW_PRIVATE_URLS=False, SCHEDULE_AUTOPAUSE_FAILURES=1)
    monitor_id = judged_monitor(client, owner[1], pages, "/notes")
    run_due_checks()
    assert local.requests == []
    [wake] = wakes(monitor_id)
    assert wake.metadata["checked_against_condition"] is False


def test_migration_gives_existing_models_to_the_first_account(tmp_path, postgres):
    """m0024 on a database that had the shared catalog: its entries go to the lowest user id."""
    from models.db import bind
    from models.migrate import available
    from tests.conftest import TEST_DATABASE_URL

    bind(f"sqlite:///{tmp_path}/vigil.db")
    try:
        with db():
            names = available()
            cut = names.index("m0024_judge_models_per_account")
            for name in names[:cut]:
                import_module(f"models.migrations.{name}").up(database.obj)
            database.execute_sql("INSERT INTO users (email, password_hash, created_at) VALUES "
                                 "('gone@example.com', 'x', '2026-01-01'), ('first@example.com', 'x', '2026-01-01'), "
                                 "('later@example.com', 'x', '2026-01-02')")
            database.execute_sql("DELETE FROM users WHERE email = 'gone@example.com'")
            database.execute_sql("INSERT INTO judge_models (name, base_url, api_key_encrypted, model, api_version, "
                                 "created_at, updated_at) VALUES ('default', 'https://api.example.com/v1', 'k', "
                                 "'m', '', '2026-01-01', '2026-01-01')")
            for name in names[cut:]:
                import_module(f"models.migrations.{name}").up(database.obj)
            [(user_id, email)] = database.execute_sql(
                "SELECT judge_models.user_id, users.email FROM judge_models JOIN users ON users.id = user_id")
            assert email == "first@example.com"
            # and names are per account now: the later account may have its own `default`
            database.execute_sql("INSERT INTO judge_models (user_id, name, base_url, api_key_encrypted, model, "
                                 "api_version, created_at, updated_at) SELECT id, 'default', 'https://b.example/v1', "
                                 "'', 'm', '', '2026-01-01', '2026-01-01' FROM users WHERE email = 'later@example.com'")
            assert JudgeModel.select().count() == 2
    finally:
        database.close()
        bind(TEST_DATABASE_URL)
