"""Schemathesis over Vigil's own OpenAPI: every API operation and every Settings form, fed generated and
schema-breaking input, answers without a server error and with a status, content type and body its schema declares.

Each operation runs a bounded number of examples in-process (ASGI) against the real app, PostgreSQL and Redis.
About half the examples carry a real token, monitor id, action, nonce, device or model instead of a random one, so
the fuzzing reaches past the "not found" answers into the handlers' own validation. The owner's operations (runtime
tokens, the Settings forms) run with a signed-in session, the real CSRF token in about half the cases; and once more
with only a runtime token, which none of them may obey.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.python import asgi
from schemathesis.specs.openapi.checks import (
    content_type_conformance, negative_data_rejection, response_schema_conformance, status_code_conformance,
)

from app import create_app
from tests.security.fuzz_support import Api, BASE, approval_nonce, create_monitor, owner_things, sign_in

#: The API an agent, a script, a sender or an approver calls with a runtime token or a link (pages, the owner's
#: operations and the SSE streams are not in it).
OPERATIONS = [
    ("POST", "/api/tool/monitor"),
    ("GET", "/api/monitors"),
    ("POST", "/api/monitors/{monitor_id}/{action}"),
    ("GET", "/api/monitors/{monitor_id}/secret"),
    ("GET", "/api/conversations/{conversation_id}/messages"),
    ("GET", "/api/triggers/{token}"),
    ("HEAD", "/api/triggers/{token}"),
    ("POST", "/api/triggers/{token}"),
    ("GET", "/api/approvals/{token}"),
    ("POST", "/api/approvals/{token}"),
    ("GET", "/api/wakes"),
    ("GET", "/api/monitors/{monitor_id}/events"),
    ("GET", "/api/devices"),
    ("GET", "/api/wake-endpoints"),
    ("POST", "/api/wake-endpoints"),
    ("GET", "/api/wake-endpoints/{endpoint_id}/attempts"),
    ("DELETE", "/api/wake-endpoints/{endpoint_id}"),
    ("POST", "/api/wake-endpoints/{endpoint_id}/rotate"),
    ("POST", "/api/wake-endpoints/{endpoint_id}/enable"),
]
#: What only the owner's signed-in browser may do: runtime tokens, devices, MCP connections, every Settings form.
OWNER_OPERATIONS = [
    ("PATCH", "/api/devices/{device_id}"),
    ("POST", "/api/devices/{device_id}/revoke"),
    ("GET", "/api/connections"),
    ("POST", "/api/connections"),
    ("DELETE", "/api/connections/{name}"),
    ("GET", "/api/tokens"),
    ("POST", "/api/tokens"),
    ("DELETE", "/api/tokens/{token_id}"),
    ("POST", "/settings/tokens"),
    ("POST", "/settings/tokens/{token_id}/revoke"),
    ("POST", "/settings/password"),
    ("POST", "/settings/sign-out-everywhere"),
    ("POST", "/logout"),
    ("POST", "/settings/models"),
    ("POST", "/settings/models/{name}/delete"),
    ("POST", "/settings/devices/pair-code"),
    ("POST", "/settings/devices/{device_id}"),
    ("POST", "/settings/connections"),
    ("POST", "/settings/wake-endpoints/{endpoint_id}/enable"),
]
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          negative_data_rejection]
#: A form's fields are text on the wire (5 and "5" are the same bytes), so "schema-breaking" input a form accepts
#: is no bug: forms get every check but that one.
FORM_CHECKS = CHECKS[:-1]
#: Examples per operation, half generated to fit the schema and half to break it; fewer for the owner's
#: operations (there are many), fewer again for the runtime-token run, which only has to be refused.
EXAMPLES = 40
OWNER_EXAMPLES = 24
TOKEN_ONLY_EXAMPLES = 8
TRIGGER_STATUSES = {"202", "400", "401", "404", "413", "429"}
#: What a request is answered before its handler does its own work: the body or path refused by Litestar, an id no
#: row can have, an unknown route.
BEFORE_THE_HANDLER = ("Validation failed for", "Nothing has this id.", '"Not Found"')
#: A runtime token on an owner's operation: refused, sent to sign in (a form with no session), or an id no row can
#: have (404 before any handler).
REFUSED = {403, 302, 303, 404}


@pytest.fixture()
def api(settings, broker, owner, pages):
    """The app with one monitor of each kind the API acts on, created through the tool as an agent would, and the
    owner signed in with a spare token, a device and a judge model for the Settings forms to act on."""
    from tasks.runtime import current

    token = owner[1]
    app = create_app(current().settings)
    with asgi.get_client(app) as setup:
        page = pages.set("/watched", "<p>price 10</p>")
        watched = create_monitor(setup, token, {"description": "price", "source": {"type": "page", "url": page}})
        trigger = create_monitor(setup, token, {"description": "deploys", "source": {"type": "webhook"},
                                                "max_wakes": 20})
        approval = create_monitor(setup, token, {"description": "ok?", "source": {"type": "approval",
                                                                                  "question": "Ship it?"}})
        approval_token = approval["approval_url"].rsplit("/", 1)[1]
        approval_cookie, nonce = approval_nonce(setup, approval_token)
        endpoint = setup.post(f"{BASE}/api/wake-endpoints", headers={"Authorization": f"Bearer {token}"},
                              json={"url": "https://hooks.example.com/vigil"}).json()
        session, csrf = sign_in(setup)
        things = owner_things(setup, session, csrf)
    real = {"monitor_id": [watched["monitor_id"], trigger["monitor_id"]], "action": ["pause", "resume", "cancel"],
            "conversation_id": ["conv-1"], "trigger": [trigger["url"].rsplit("/", 1)[1]],
            "approval": [approval_token], "nonce": [nonce], "endpoint_id": [str(endpoint["id"])], **things}
    fuzzed = Api(app, token, session, csrf, real)
    fuzzed.cookies = approval_cookie  # the approval page's, sent only to that link's paths
    yield fuzzed


def _past_the_checks(response) -> bool:
    """Whether the handler's own work answered, past the session and CSRF checks and Litestar's parsing."""
    if response.status_code in (401, 403):
        return False
    return not any(text in response.text[:200] for text in BEFORE_THE_HANDLER)


def _header(response, name: str) -> str:
    return (response.headers.get(name) or [""])[0]


def _ids(operations):
    return [f"{m} {p}" for m, p in operations]


def _fuzz(api, operation, examples: int, modes, send) -> list[int]:
    """Run `send(case)` (which calls and validates) on `examples` generated cases; the statuses answered."""
    cases = st.one_of(*(operation.as_strategy(mode) for mode in modes))
    statuses = []

    @given(case=cases)
    @hypothesis_settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                         suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate, Phase.shrink])
    def run(case):
        real_csrf = api.csrf_coin(case)  # tossed before the real values go in, so a run repeats
        api.use_real_values(case, real_csrf and case.media_type == "application/json")
        statuses.append(send(case, real_csrf))

    run()
    inputs = list(operation.iter_parameters()) or operation.get_request_payload_content_types()
    assert len(statuses) >= (examples // 2 if inputs else 1), "too few requests were made to prove anything"
    return statuses


BOTH = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)


@pytest.mark.parametrize("method, path", OPERATIONS, ids=_ids(OPERATIONS))
def test_api_operation_answers_within_its_schema(api, method, path):
    kind = "trigger" if path.startswith("/api/triggers/") else "approval"
    api.real["token"] = api.real[kind]
    cookies = api.cookies if path.startswith("/api/approvals/") else {}

    def send(case, _):
        response = api.call(case, api.headers, cookies)
        case.validate_response(response, checks=CHECKS, headers=api.headers)
        return response.status_code

    _fuzz(api, api.schema[path][method], EXAMPLES, BOTH, send)


@pytest.mark.parametrize("method, path", OWNER_OPERATIONS, ids=_ids(OWNER_OPERATIONS))
def test_owner_operation_answers_within_its_schema(api, method, path):
    """Signed in, the real CSRF token in about half the cases: a redirect, a page or a declared refusal."""
    checks = FORM_CHECKS if not path.startswith("/api/") else CHECKS

    reached = []

    def send(case, real_csrf):
        headers = api.use_real_csrf(case, {}, real_csrf)
        response = api.call(case, headers, api.session)
        case.validate_response(response, checks=checks, headers=headers)
        if _past_the_checks(response):
            reached.append(response.status_code)
        if response.status_code == 303 and _header(response, "location").startswith("/login"):
            api.sign_in_again()  # signed out (this session or all of them): the next cases need a session
        return response.status_code

    statuses = _fuzz(api, api.schema[path][method], OWNER_EXAMPLES, BOTH, send)
    assert reached, f"no case got past the session and CSRF checks: {sorted(set(statuses))}"


@pytest.mark.parametrize("method, path", OWNER_OPERATIONS, ids=_ids(OWNER_OPERATIONS))
def test_owner_operation_refuses_a_runtime_token(api, method, path):
    """The owner's own runtime token, with the real CSRF token sent too, never acts as the owner."""

    def send(case, real_csrf):
        headers = api.use_real_csrf(case, api.headers, real_csrf)
        response = api.call(case, headers, {})
        case.validate_response(response, checks=[not_a_server_error, status_code_conformance], headers=headers)
        assert response.status_code in REFUSED, (response.status_code, response.text)
        if response.status_code in (302, 303):
            assert _header(response, "location").startswith("/login"), _header(response, "location")
        return response.status_code

    _fuzz(api, api.schema[path][method], TOKEN_ONLY_EXAMPLES, (GenerationMode.POSITIVE,), send)


def test_fuzzing_reaches_past_not_found(api):
    """The swapped-in values work: a real trigger link accepts, a real approval answers, a real monitor acts, and
    the owner's session with its CSRF token revokes a real token."""
    client, headers = api.client, api.headers
    assert client.post(f"{BASE}/api/triggers/{api.real['trigger'][0]}", data=b"{}").status_code == 202
    assert client.get(f"{BASE}/api/approvals/{api.real['approval'][0]}").status_code == 200
    monitor = api.real["monitor_id"][0]
    assert client.post(f"{BASE}/api/monitors/{monitor}/pause", headers=headers).status_code == 200
    revoked = client.post(f"{BASE}/settings/tokens/{api.real['token_id'][0]}/revoke", data={"_csrf": api.csrf},
                          cookies=api.session, allow_redirects=False)
    assert revoked.status_code == 303


def test_trigger_link_statuses_are_declared(api):
    operations = api.schema.raw_schema["paths"]["/api/triggers/{token}"]
    assert TRIGGER_STATUSES <= set(operations["post"]["responses"])
    assert "405" in operations["get"]["responses"] and "405" in operations["head"]["responses"]
