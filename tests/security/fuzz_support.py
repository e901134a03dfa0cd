"""What tests/security/test_openapi_fuzz.py fuzzes with: the app, a signed-in owner, and real values to swap in.

Every value is made the way a user or an agent makes it: monitors through the tool, the owner's session by posting
the login form with its CSRF field, an approval's nonce and cookie from its page, a device by pairing.
"""

from __future__ import annotations

import hashlib
import re

import schemathesis
from schemathesis.python import asgi

BASE = "http://localhost"
_CSRF_FIELD = re.compile(r'name="_csrf" value="([^"]+)"')
_NONCE_FIELD = re.compile(r'name="nonce" value="([^"]+)"')
#: The fields each Settings form reads (its schema only says "text fields"), so generated values reach them.
FORM_FIELDS = {
    "/settings/tokens": ["label"],
    "/settings/password": ["current_password", "password", "password_again"],
    "/settings/models": ["name", "base_url", "model", "api_key", "api_version"],
    "/settings/devices/pair-code": ["name"],
    "/settings/devices/{device_id}": ["approval_mode", "denylist"],
    "/settings/connections": ["name", "url", "bearer_token"],
    "/settings/wake-endpoints/{endpoint_id}/enable": ["resend"],
}


class Api:
    """The app under test, one in-process client into it, the owner's two credentials (a runtime token and a
    signed-in browser session), and real values to swap into generated requests."""

    def __init__(self, app, token: str, session: dict[str, str], csrf: str, real: dict[str, list[str]]):
        self.schema = schemathesis.openapi.from_asgi("/schema/openapi.json", app)
        self.client = asgi.get_client(app)
        self.headers = {"Authorization": f"Bearer {token}"}
        self.session, self.csrf, self.real = session, csrf, real
        self.cookies: dict[str, str] = {}

    def use_real_values(self, case, real_nonce: bool) -> None:
        """Swap in a real value for about half the generated ones (chosen by the value, so a run repeats), and the
        approval's nonce into a JSON body with `real_nonce` (the page's cookie goes with every case)."""
        for name, value in (case.path_parameters or {}).items():
            if name in self.real and _coin(value):
                case.path_parameters[name] = _pick(self.real[name], value)
        fields = FORM_FIELDS.get(case.operation.path)
        if fields and isinstance(case.body, dict) and case.body and _coin(("fields", repr(case.body))):
            case.body = {fields[at % len(fields)] if at < len(fields) else key: value
                         for at, (key, value) in enumerate(case.body.items())}  # generated values, real names
        if isinstance(case.body, dict) and "nonce" in self.real and real_nonce:
            case.body["nonce"] = self.real["nonce"][0]
            if "token" in (case.path_parameters or {}) and self.real["token"] == self.real["approval"]:
                case.path_parameters["token"] = self.real["approval"][0]  # the nonce is its link's only

    @staticmethod
    def csrf_coin(case) -> bool:
        """Whether this case gets the real CSRF token or nonce (about half do)."""
        return _coin(("csrf", repr(case.body), repr(case.path_parameters)))

    def use_real_csrf(self, case, headers: dict[str, str], real: bool) -> dict[str, str]:
        """With `real`, the session's CSRF token: in the form's `_csrf` field, or in the API's header."""
        if not real:
            return headers
        if isinstance(case.body, dict) and case.media_type == "application/x-www-form-urlencoded":
            case.body["_csrf"] = self.csrf
            return headers
        return {**headers, "X-CSRF-Token": self.csrf}

    def call(self, case, headers: dict[str, str], cookies: dict[str, str]):
        """One request with exactly these credentials: nothing a previous answer set is sent again."""
        self.client.cookies.clear()
        return case.call(session=self.client, headers=headers, cookies=cookies, allow_redirects=False)

    def sign_in_again(self) -> None:
        """After a case signed the owner out (sign out, sign out everywhere): a new session for the next ones."""
        with asgi.get_client(self.schema.app) as client:
            self.session, self.csrf = sign_in(client)


def _coin(value) -> bool:
    return _digest(value)[0] % 2 == 1


def _pick(choices: list[str], value) -> str:
    return choices[_digest(value)[1] % len(choices)]


def _digest(value) -> bytes:
    return hashlib.sha256(repr(value).encode()).digest()


def sign_in(client, email: str = "owner@example.com", password: str = "owner-password") -> tuple[dict, str]:
    """Sign in as a browser does (the login page's CSRF field posted back with its cookie): the session cookie, and
    the session's CSRF token from a Settings page."""
    page = client.get(f"{BASE}/login")
    visitor = {"vigil_session": page.cookies["vigil_session"]}
    form = {"_csrf": _CSRF_FIELD.search(page.text).group(1), "email": email, "password": password}
    signed_in = client.post(f"{BASE}/login", data=form, cookies=visitor, allow_redirects=False)
    assert signed_in.status_code == 303, signed_in.text
    session = {"vigil_session": signed_in.cookies["vigil_session"]}
    settings = client.get(f"{BASE}/settings/tokens", cookies=session, allow_redirects=False)
    client.cookies.clear()
    return session, _CSRF_FIELD.search(settings.text).group(1)


def approval_nonce(client, approval_token: str) -> tuple[dict, str]:
    """The approval page's cookie and the nonce its form carries: what a decision must send back."""
    page = client.get(f"{BASE}/approve/{approval_token}")
    client.cookies.clear()
    cookie = page.cookies.get("vigil_approve", path=f"/api/approvals/{approval_token}")  # set for two paths
    return {"vigil_approve": cookie}, _NONCE_FIELD.search(page.text).group(1)


def create_monitor(client, token: str, arguments: dict) -> dict:
    response = client.post(f"{BASE}/api/tool/monitor", headers={"Authorization": f"Bearer {token}"},
                           json={"action": "monitor_create", "arguments": arguments,
                                 "context": {"conversation_id": "conv-1", "channel": "chat"}})
    body = response.json()
    assert body["ok"], body
    return body["result"]


def owner_things(client, session: dict, csrf: str) -> dict[str, list[str]]:
    """A spare runtime token, a paired device and a judge model of the owner's, made through the API and the
    Settings forms: the ids the owner's forms act on."""
    spare = client.post(f"{BASE}/api/tokens", json={"label": "spare"}, cookies=session,
                        headers={"X-CSRF-Token": csrf})
    assert spare.status_code == 201, spare.text
    code = re.search(r"[A-Z0-9]{4}(?:-[A-Z0-9]{4}){3}",
                     client.post(f"{BASE}/settings/devices/pair-code", data={"_csrf": csrf, "name": "laptop"},
                                 cookies=session).text).group(0)
    device = client.post(f"{BASE}/api/runner/pair", json={"code": code, "name": "laptop"})
    assert device.status_code == 201, device.text
    model = client.post(f"{BASE}/settings/models", cookies=session, allow_redirects=False,
                        data={"_csrf": csrf, "name": "judge", "base_url": "https://models.example.com/v1",
                              "model": "gpt-4o-mini", "api_key": "sk-test"})
    assert model.status_code == 303, model.text
    client.cookies.clear()
    return {"token_id": [str(spare.json()["id"])], "device_id": [str(device.json()["device_id"])],
            "name": ["judge"]}
