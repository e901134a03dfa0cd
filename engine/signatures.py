"""Webhook signatures for trigger links: checking a sender, signing as one, and the example curl.

Verification is done by hand over `hmac`, comparing bytes in constant time. Anything malformed
(missing or oversized headers, non-ASCII values, bad base64, odd timestamps, a bad secret) is
simply "not verified": `verify` returns False and never raises.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
import re
import secrets
import shlex
from collections.abc import Mapping

SCHEMES = ("none", "github", "standard_webhooks", "hmac_sha256")
MAX_HEADER_CHARS = 8192  # longer signature headers are refused outright
TOLERANCE_SECONDS = 300
MAX_DELIVERY_ID_CHARS = 200
SECRET_ENV = "VIGIL_WEBHOOK_SECRET"
WHSEC_PREFIX = "whsec_"

#: The header carrying `sha256=<hex>` of the raw body, as a sender spells it.
_HEX_HEADERS = {"github": "X-Hub-Signature-256", "hmac_sha256": "X-Signature"}
#: hmac_sha256's optional timestamp: when a sender sends it, the signature covers "{timestamp}.{body}" and a
#: timestamp more than TOLERANCE_SECONDS from now is refused, so a captured request can't be replayed later.
#: Without it the signature covers the body alone, and the same body is accepted again once the dedupe window
#: (TRIGGER_DEDUPE_WINDOW_SECONDS) has passed (docs/api.md says so).
HMAC_TIMESTAMP_HEADER = "X-Signature-Timestamp"
_TIMESTAMP = re.compile(r"[0-9]{1,15}")
#: The only shell substitutions an example body may keep: `$(date …)` with a plain format.
_SUBSTITUTION = re.compile(r"\$\(date(?: -u)?(?: \+[A-Za-z0-9%:._-]*)?\)")


def new_secret(scheme: str) -> str:
    """A fresh secret for a link signed with `scheme` ("" for an unsigned link)."""
    if scheme == "standard_webhooks":
        return WHSEC_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode("ascii")
    if scheme in _HEX_HEADERS:
        return secrets.token_urlsafe(32)
    if scheme == "none":
        return ""
    raise ValueError(f"unknown signature scheme: {scheme!r}")


def verify(scheme: str, secret: str, headers: Mapping[str, str], body: bytes, now: float) -> bool:
    """Whether the request is signed correctly. An unsigned ("none") link has nothing to check."""
    if scheme == "none":
        return True
    if not isinstance(secret, str) or not secret or not isinstance(body, (bytes, bytearray)):
        return False
    lowered = _lowered(headers)
    if scheme == "standard_webhooks":
        return _verify_standard(secret, lowered, bytes(body), now)
    if scheme in _HEX_HEADERS:
        value = _signature_header(lowered, _HEX_HEADERS[scheme].lower())
        if scheme == "hmac_sha256" and HMAC_TIMESTAMP_HEADER.lower() in lowered:
            return _verify_stamped_hex(secret, value, _signature_header(lowered, HMAC_TIMESTAMP_HEADER.lower()),
                                       bytes(body), now)
        return _verify_hex(secret, value, bytes(body))
    return False


def sign(scheme: str, secret: str, body: bytes, now: float, message_id: str = "msg_test",
         stamped: bool = False) -> dict[str, str]:
    """The signature headers a correct sender would send with `body` at time `now`; `stamped` signs an
    hmac_sha256 body with its X-Signature-Timestamp."""
    if scheme == "none":
        return {}
    if scheme == "hmac_sha256" and stamped:
        stamp = str(math.floor(now))
        return {"X-Signature": "sha256=" + _hex_mac(secret, f"{stamp}.".encode("ascii") + body),
                HMAC_TIMESTAMP_HEADER: stamp}
    if scheme in _HEX_HEADERS:
        return {_HEX_HEADERS[scheme]: "sha256=" + _hex_mac(secret, body)}
    if scheme != "standard_webhooks":
        raise ValueError(f"unknown signature scheme: {scheme!r}")
    key = _whsec_key(secret)
    if key is None:
        raise ValueError("a standard_webhooks secret is whsec_ followed by base64")
    stamp = str(math.floor(now))
    signature = base64.b64encode(_standard_mac(key, message_id, stamp, body)).decode("ascii")
    return {"webhook-id": message_id, "webhook-timestamp": stamp, "webhook-signature": f"v1,{signature}"}


def delivery_id(scheme: str, headers: Mapping[str, str]) -> str | None:
    """The sender's own id of this delivery, for dedupe; None when it sent none (or an unusable one).

    Idempotency-Key wins on any scheme, then webhook-id (standard_webhooks), then
    X-GitHub-Delivery (github). The first one present is used; over 200 characters it is None.
    """
    lowered = _lowered(headers)
    names = ["idempotency-key"]
    names += ["webhook-id"] if scheme == "standard_webhooks" else []
    names += ["x-github-delivery"] if scheme == "github" else []
    for name in names:
        value = (_text(lowered.get(name)) or "").strip()
        if value:
            ok = len(value) <= MAX_DELIVERY_ID_CHARS and value.isprintable()
            return value if ok else None
    return None


def is_github_ping(headers: Mapping[str, str]) -> bool:
    """GitHub's ping, sent once when the hook is added."""
    return (_text(_lowered(headers).get("x-github-event")) or "").strip() == "ping"


def example_curl(url: str, scheme: str, body_json: str) -> str:
    """A working shell command that posts `body_json` to `url`, signed from $VIGIL_WEBHOOK_SECRET.

    BODY is assigned once, so the bytes signed are the bytes sent. `$(date …)` substitutions in
    `body_json` run (for a sent_at field); every other character is taken literally, so a body
    can't run anything else in the user's shell.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"unknown signature scheme: {scheme!r}")
    lines = [f"BODY={_shell_word(body_json)}"]
    headers = ["-H 'Content-Type: application/json'"]
    if scheme != "none":
        lines.append(f': "${{{SECRET_ENV}:?set {SECRET_ENV} to the secret shown on the link card}}"')
    if scheme == "hmac_sha256":  # stamped: a captured request can't be replayed later
        lines += ['TS="$(date +%s)"',
                  f'SIG=$(printf %s "$TS.$BODY" | openssl dgst -sha256 -hmac "${SECRET_ENV}" | awk \'{{print $NF}}\')']
        headers += [f'-H "{HMAC_TIMESTAMP_HEADER}: $TS"', f'-H "{_HEX_HEADERS[scheme]}: sha256=$SIG"']
    elif scheme in _HEX_HEADERS:
        lines.append(
            f'SIG=$(printf %s "$BODY" | openssl dgst -sha256 -hmac "${SECRET_ENV}" | awk \'{{print $NF}}\')'
        )
        headers.append(f'-H "{_HEX_HEADERS[scheme]}: sha256=$SIG"')
    if scheme == "standard_webhooks":
        lines += _standard_signing_lines()
        headers += ['-H "webhook-id: $MSG_ID"', '-H "webhook-timestamp: $TS"', '-H "webhook-signature: v1,$SIG"']
    curl = [f"curl -sS -X POST {shlex.quote(url)}", *headers, '--data-binary "$BODY"']
    return "\n".join(lines) + "\n" + " \\\n  ".join(curl)


def _standard_signing_lines() -> list[str]:
    return [
        'MSG_ID="msg_$(date +%s%N)"',
        'TS="$(date +%s)"',
        f'KEY_HEX=$(printf %s "${{{SECRET_ENV}#{WHSEC_PREFIX}}}" | base64 -d | od -An -v -tx1 | tr -d \' \\n\')',
        'SIG=$(printf %s "$MSG_ID.$TS.$BODY" | openssl dgst -sha256 -mac HMAC -macopt "hexkey:$KEY_HEX" -binary'
        " | base64)",
    ]


def _shell_word(text: str) -> str:
    """`text` as one shell word: literal parts single-quoted, the allowed `$(date …)` double-quoted.

    Single quotes keep the JSON readable and make `$`, backticks, backslashes and `!` (history
    expansion when pasted into an interactive shell) plain characters.
    """
    parts, pos = [], 0
    for match in _SUBSTITUTION.finditer(text):
        parts += [_single_quoted(text[pos : match.start()]), f'"{match.group(0)}"']
        pos = match.end()
    parts.append(_single_quoted(text[pos:]))
    return "".join(parts) or "''"


def _single_quoted(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'" if text else ""


def _verify_standard(secret: str, lowered: dict[str, object], body: bytes, now: float) -> bool:
    key = _whsec_key(secret)
    msg_id = _signature_header(lowered, "webhook-id")
    stamp = _signature_header(lowered, "webhook-timestamp")
    signatures = _signature_header(lowered, "webhook-signature")
    if not key or not msg_id or not signatures or not _fresh(stamp, now):
        return False
    expected = _standard_mac(key, msg_id, stamp, body)
    matched = False
    for entry in signatures.split(" "):
        version, _, encoded = entry.partition(",")
        candidate = _b64decode(encoded) if version == "v1" else None
        if candidate is not None and hmac.compare_digest(expected, candidate):
            matched = True
    return matched


def _verify_hex(secret: str, value: str | None, body: bytes) -> bool:
    if value is None or not value.startswith("sha256="):
        return False
    expected = _hex_mac(secret, body).encode("ascii")
    return hmac.compare_digest(expected, value[len("sha256=") :].lower().encode("ascii"))


def _verify_stamped_hex(secret: str, value: str | None, stamp: str | None, body: bytes, now: float) -> bool:
    if not _fresh(stamp, now):
        return False
    return _verify_hex(secret, value, f"{stamp}.".encode("ascii") + body)


def _fresh(stamp: str | None, now: float) -> bool:
    """A whole number of seconds within the tolerance of `now`."""
    if stamp is None or not _TIMESTAMP.fullmatch(stamp):
        return False
    try:
        return abs(int(stamp) - float(now)) <= TOLERANCE_SECONDS
    except (TypeError, ValueError, OverflowError):
        return False


def _hex_mac(secret: str, body: bytes) -> str:
    return hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def _standard_mac(key: bytes, msg_id: str, stamp: str, body: bytes) -> bytes:
    return hmac.new(key, f"{msg_id}.{stamp}.".encode("utf-8") + body, hashlib.sha256).digest()


def _whsec_key(secret: str) -> bytes | None:
    """The key of a `whsec_<base64>` secret (unpadded base64 is fine), or None."""
    raw = secret[len(WHSEC_PREFIX) :] if secret.startswith(WHSEC_PREFIX) else secret
    key = _b64decode(raw + "=" * (-len(raw) % 4))
    return key or None


def _b64decode(text: str) -> bytes | None:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, ValueError):
        return None


def _lowered(headers: Mapping[str, str]) -> dict[str, object]:
    try:
        items = list(headers.items())
    except (AttributeError, TypeError):
        return {}
    return {key.lower(): value for key, value in items if isinstance(key, str)}


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return value if isinstance(value, str) else None


def _signature_header(lowered: dict[str, object], name: str) -> str | None:
    """A header a signature check reads: present, ASCII and at most MAX_HEADER_CHARS long."""
    value = _text(lowered.get(name))
    if value is None or len(value) > MAX_HEADER_CHARS or not value.isascii():
        return None
    return value


def example_body(check) -> str:
    """A body the check reads, with a sent_at time so each example call is a new event."""
    sent_at = '"sent_at": "$(date -u +%Y-%m-%dT%H:%M:%SZ)"'
    if check.type == "status" and check.value_path and check.values:
        path = [part for part in check.value_path.replace("[", ".[").split(".") if part and part != "data"]
        if len(path) == 1 and not path[0].startswith("["):
            return "{" + f'"{path[0]}": {json.dumps(check.values[0])}, {sent_at}' + "}"
    return "{" + f'"event": "done", {sent_at}' + "}"
