"""First run: /setup creates the owner account while there is none, from a browser on this machine or, from
anywhere, with the setup code the web process prints at start. Once an account exists, /setup is 404."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import re
from typing import Annotated

from litestar import Controller, Request, Response, get, post
from litestar.exceptions import NotFoundException
from litestar.response import Redirect, Template

from app.auth import check_csrf, csrf_token, sign_in
from app.pages import Form
from engine.tokens import same_secret
from models import connection
from models.accounts import AccountError, SetupDone, create_first_user, has_users
from tasks.runtime import current

log = logging.getLogger("vigil")

#: headers a proxy adds: a request that carries one came through a proxy, so its loopback address says nothing
PROXY_HEADERS = ("x-forwarded-for", "forwarded", "x-real-ip")
_CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I
_CODE_LABEL = b"vigil first-run setup code"
DONE = "First-run setup is over: an account exists. Sign in at /login."
WHERE_CODE = ("Copy it from the console where `vigil serve` or `vigil web` started (the line that says \"setup "
              "code\"), or open this page in a browser on the machine Vigil runs on.")
NO_CODE = "From another machine, creating the first account needs the setup code. " + WHERE_CODE
WRONG_CODE = "That setup code is wrong; nothing was created. " + WHERE_CODE


def setup_code(secret_key: str) -> str:
    """The code /setup asks a visitor from another machine for, while there is no account: 16 characters
    (80 bits) in groups of four.

    Derived from SECRET_KEY with HMAC rather than generated and stored: every web process of one deployment
    shares SECRET_KEY (their sessions need it), so each prints the same code and accepts the one the others
    printed, with no table, no migration, no write at start-up and no race between processes starting together.
    It stops opening anything once an account exists (/setup is then 404), and whoever can read SECRET_KEY can
    forge a session anyway.
    """
    digest = hmac.new(secret_key.encode("utf-8"), _CODE_LABEL, hashlib.sha256).digest()
    number = int.from_bytes(digest[:10], "big")
    chars = "".join(_CODE_ALPHABET[(number >> (5 * i)) & 31] for i in range(16))
    return "-".join(chars[i:i + 4] for i in range(0, 16, 4))


def code_matches(secret_key: str, submitted: str | None) -> bool:
    """Compared in constant time, ignoring case, spaces and dashes."""
    plain = re.sub(r"[^A-Z0-9]", "", (submitted or "")[:100].upper())
    return bool(plain) and same_secret(re.sub(r"[^A-Z0-9]", "", setup_code(secret_key)), plain)


def from_this_machine(request: Request) -> bool:
    """A browser on this machine: the peer is loopback and no proxy header says it forwarded someone else's
    request (a proxy on localhost would make every visitor look local). Off with SETUP_TRUST_LOOPBACK=false."""
    if not current().settings.SETUP_TRUST_LOOPBACK or any(h in request.headers for h in PROXY_HEADERS):
        return False
    try:
        address = ipaddress.ip_address(request.client.host if request.client else "")
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or bool(mapped and mapped.is_loopback)


def first_run_lines(secret_key: str, url: str) -> list[str]:
    """What the start-up banner says while there is no account (empty once there is one)."""
    with connection():
        if has_users():
            return []
    code = setup_code(secret_key)
    log.info("no account yet: open %s/setup to create it; from another machine it asks for the setup code %s",
             url, code)
    return [f"No account yet: open {url} in a browser on this machine to create it.",
            f"  From another machine, {url}/setup asks for this setup code: {code}",
            "  Or, in another terminal:",
            "  .venv/bin/vigil user create you@example.com --password 'choose-a-password'",
            "  .venv/bin/vigil token create --user you@example.com   # a runtime token for your agent"]


class FirstRunController(Controller):
    @get("/setup", sync_to_thread=True)
    def form(self, request: Request) -> Response:
        _still_open()
        return _form(request)

    @post("/setup", sync_to_thread=True)
    def create(self, request: Request, data: Annotated[dict[str, str], Form]) -> Response:
        """Create the owner, sign them in (as /login does) and take them to Settings → Tokens."""
        _still_open()
        check_csrf(request, data.get("_csrf"))
        email, password = data.get("email", ""), data.get("password", "")
        if not from_this_machine(request) and not code_matches(current().settings.SECRET_KEY, data.get("code")):
            return _form(request, WRONG_CODE if (data.get("code") or "").strip() else NO_CODE, 403, email)
        if password != data.get("password_again", ""):
            return _form(request, "The two passwords differ; type the same password twice.", 400, email)
        try:
            with connection():
                user = create_first_user(email, password)
        except SetupDone:
            raise NotFoundException(DONE) from None
        except AccountError as exc:
            return _form(request, f"The account was not created: {exc}.", 400, email)
        log.info("first-run setup created the owner account %s", user.email)
        sign_in(request, user)
        return Redirect("/settings/tokens", status_code=303)


def _still_open() -> None:
    with connection():
        if has_users():
            raise NotFoundException(DONE)


def _form(request: Request, error: str | None = None, status: int = 200, email: str = "") -> Template:
    context = {"csrf": csrf_token(request), "error": error, "email": email[:320],
               "needs_code": not from_this_machine(request)}
    return Template("pages/setup.html", context=context, status_code=status,
                    headers={"Cache-Control": "no-store"})
