"""Schemathesis over Vigil's own OpenAPI: every API operation, fed generated and schema-breaking input, answers
without a server error and with a status, content type and body its schema declares.

Each operation runs a bounded number of examples in-process (ASGI) against the real app, PostgreSQL and Redis.
About half the examples carry a real token, monitor id, action or nonce instead of a random one, so the fuzzing
reaches past the "not found" answers into the handlers' own validation.
"""

from __future__ import annotations

import hashlib

import pytest
import schemathesis
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

#: The API an agent, a script, a sender or an approver calls (pages, forms and the SSE streams are not in it).
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
    ("POST", "/api/wake-endpoints"),
    ("GET", "/api/wake-endpoints/{endpoint_id}/attempts"),
    ("DELETE", "/api/wake-endpoints/{endpoint_id}"),
    ("POST", "/api/wake-endpoints/{endpoint_id}/rotate"),
    ("POST", "/api/wake-endpoints/{endpoint_id}/enable"),
]
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          negative_data_rejection]
#: Examples per operation, half generated to fit the schema and half to break it.
EXAMPLES = 40
TRIGGER_STATUSES = {"202", "400", "401", "404", "413", "429"}


class Api:
    """The app under test, one in-process client into it, and real values to swap into generated requests."""

    def __init__(self, app, token: str, real: dict[str, list[str]]):
        self.schema = schemathesis.openapi.from_asgi("/schema/openapi.json", app)
        self.client = asgi.get_client(app)
        self.headers = {"Authorization": f"Bearer {token}"}
        self.real = real

    def use_real_values(self, case) -> None:
        """Swap in a real value for about half the generated ones (chosen by the value, so a run repeats)."""
        for name, value in (case.path_parameters or {}).items():
            if name in self.real and _coin(value):
                case.path_parameters[name] = _pick(self.real[name], value)
        if isinstance(case.body, dict) and "nonce" in self.real and _coin(case.body):
            case.body["nonce"] = self.real["nonce"][0]


def _coin(value) -> bool:
    return _digest(value)[0] % 2 == 1


def _pick(choices: list[str], value) -> str:
    return choices[_digest(value)[1] % len(choices)]


def _digest(value) -> bytes:
    return hashlib.sha256(repr(value).encode()).digest()


@pytest.fixture()
def api(settings, broker, owner, pages):
    """The app with one monitor of each kind the API acts on, created through the tool as an agent would."""
    from tasks.runtime import current

    token = owner[1]
    app = create_app(current().settings)
    with asgi.get_client(app) as setup:
        page = pages.set("/watched", "<p>price 10</p>")
        watched = _create(setup, token, {"description": "price", "source": {"type": "page", "url": page}})
        trigger = _create(setup, token, {"description": "deploys", "source": {"type": "webhook"}, "max_wakes": 20})
        approval = _create(setup, token, {"description": "ok?", "source": {"type": "approval",
                                                                           "question": "Ship it?"}})
        approval_token = approval["approval_url"].rsplit("/", 1)[1]
        nonce = setup.get(f"http://localhost/api/approvals/{approval_token}").json()["nonce"]
        endpoint = setup.post("http://localhost/api/wake-endpoints", headers={"Authorization": f"Bearer {token}"},
                              json={"url": "https://hooks.example.com/vigil"}).json()
    real = {"monitor_id": [watched["monitor_id"], trigger["monitor_id"]], "action": ["pause", "resume", "cancel"],
            "conversation_id": ["conv-1"], "trigger": [trigger["url"].rsplit("/", 1)[1]],
            "approval": [approval_token], "nonce": [nonce], "endpoint_id": [str(endpoint["id"])]}
    yield Api(app, token, real)


def _create(client, token: str, arguments: dict) -> dict:
    response = client.post("http://localhost/api/tool/monitor", headers={"Authorization": f"Bearer {token}"},
                           json={"action": "monitor_create", "arguments": arguments,
                                 "context": {"conversation_id": "conv-1", "channel": "chat"}})
    body = response.json()
    assert body["ok"], body
    return body["result"]


@pytest.mark.parametrize("method, path", OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_api_operation_answers_within_its_schema(api, method, path):
    operation = api.schema[path][method]
    kind = "trigger" if path.startswith("/api/triggers/") else "approval"
    api.real["token"] = api.real[kind]
    cases = st.one_of(operation.as_strategy(GenerationMode.POSITIVE), operation.as_strategy(GenerationMode.NEGATIVE))
    statuses = []

    @given(case=cases)
    @hypothesis_settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                         suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate, Phase.shrink])
    def answers_within_schema(case):
        api.use_real_values(case)
        response = case.call(session=api.client, headers=api.headers)
        statuses.append(response.status_code)
        case.validate_response(response, checks=CHECKS, headers=api.headers)

    answers_within_schema()
    assert len(statuses) >= EXAMPLES // 2, "too few requests were made to prove anything"


def test_fuzzing_reaches_past_not_found(api):
    """The swapped-in values work: a real trigger link accepts, a real approval answers, a real monitor acts."""
    client, headers = api.client, api.headers
    assert client.post(f"http://localhost/api/triggers/{api.real['trigger'][0]}", data=b"{}").status_code == 202
    assert client.get(f"http://localhost/api/approvals/{api.real['approval'][0]}").status_code == 200
    monitor = api.real["monitor_id"][0]
    assert client.post(f"http://localhost/api/monitors/{monitor}/pause", headers=headers).status_code == 200


def test_trigger_link_statuses_are_declared(api):
    operations = api.schema.raw_schema["paths"]["/api/triggers/{token}"]
    assert TRIGGER_STATUSES <= set(operations["post"]["responses"])
    assert "405" in operations["get"]["responses"] and "405" in operations["head"]["responses"]
