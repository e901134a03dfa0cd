import base64
import hashlib
import hmac
from datetime import datetime, timezone

import pytest
from standardwebhooks import Webhook

from engine.signatures import (
    MAX_HEADER_CHARS,
    SCHEMES,
    TOLERANCE_SECONDS,
    delivery_id,
    is_github_ping,
    new_secret,
    sign,
    verify,
)

GITHUB_SECRET = "It's a Secret to Everybody"
GITHUB_BODY = b"Hello, World!"
GITHUB_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"

SW_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SW_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SW_TIMESTAMP = 1614265330
SW_BODY = b'{"test": 2432232314}'
SW_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

NOW = 1_700_000_000.0
SIGNED = [s for s in SCHEMES if s != "none"]


def sw_headers(signature=SW_SIGNATURE, msg_id=SW_ID, timestamp=str(SW_TIMESTAMP)):
    return {"webhook-id": msg_id, "webhook-timestamp": timestamp, "webhook-signature": signature}


# --- published vectors ---------------------------------------------------------------------------


def test_github_published_vector():
    assert sign("github", GITHUB_SECRET, GITHUB_BODY, NOW) == {"X-Hub-Signature-256": GITHUB_SIGNATURE}
    assert verify("github", GITHUB_SECRET, {"X-Hub-Signature-256": GITHUB_SIGNATURE}, GITHUB_BODY, NOW)


def test_hmac_sha256_uses_the_same_digest_under_x_signature():
    assert verify("hmac_sha256", GITHUB_SECRET, {"X-Signature": GITHUB_SIGNATURE}, GITHUB_BODY, NOW)
    # …and not GitHub's header name.
    assert not verify("hmac_sha256", GITHUB_SECRET, {"X-Hub-Signature-256": GITHUB_SIGNATURE}, GITHUB_BODY, NOW)
    assert not verify("github", GITHUB_SECRET, {"X-Signature": GITHUB_SIGNATURE}, GITHUB_BODY, NOW)


def test_standard_webhooks_published_vector():
    headers = sign("standard_webhooks", SW_SECRET, SW_BODY, SW_TIMESTAMP, message_id=SW_ID)
    assert headers == sw_headers()
    assert verify("standard_webhooks", SW_SECRET, sw_headers(), SW_BODY, SW_TIMESTAMP)


@pytest.mark.parametrize("offset", [-TOLERANCE_SECONDS, -1, 0, 0.5, 1, TOLERANCE_SECONDS])
def test_standard_webhooks_timestamp_within_five_minutes_is_accepted(offset):
    assert verify("standard_webhooks", SW_SECRET, sw_headers(), SW_BODY, SW_TIMESTAMP + offset)


@pytest.mark.parametrize("offset", [-301, 301, -3600, 86400])
def test_standard_webhooks_timestamp_outside_five_minutes_is_refused(offset):
    assert not verify("standard_webhooks", SW_SECRET, sw_headers(), SW_BODY, SW_TIMESTAMP + offset)


def test_header_names_are_case_insensitive():
    upper = {k.upper(): v for k, v in sw_headers().items()}
    assert verify("standard_webhooks", SW_SECRET, upper, SW_BODY, SW_TIMESTAMP)
    lower = {"x-hub-signature-256": GITHUB_SIGNATURE}
    assert verify("github", GITHUB_SECRET, lower, GITHUB_BODY, NOW)


def test_uppercase_hex_is_accepted():
    upper = "sha256=" + GITHUB_SIGNATURE[len("sha256="):].upper()
    assert verify("github", GITHUB_SECRET, {"X-Hub-Signature-256": upper}, GITHUB_BODY, NOW)


# --- several signatures, wrong secrets, wrong bodies ---------------------------------------------


def test_one_right_signature_among_several_is_enough():
    wrong = "v1," + base64.b64encode(b"\x00" * 32).decode()
    for signature in (f"{wrong} {SW_SIGNATURE}", f"{SW_SIGNATURE} {wrong}", f"v2,abc {SW_SIGNATURE}"):
        assert verify("standard_webhooks", SW_SECRET, sw_headers(signature), SW_BODY, SW_TIMESTAMP)


def test_only_v1_entries_count():
    v2 = SW_SIGNATURE.replace("v1,", "v2,")
    assert not verify("standard_webhooks", SW_SECRET, sw_headers(v2), SW_BODY, SW_TIMESTAMP)


@pytest.mark.parametrize("scheme", SIGNED)
def test_a_signature_made_with_another_secret_is_refused(scheme):
    headers = sign(scheme, new_secret(scheme), b'{"a": 1}', NOW)
    assert not verify(scheme, new_secret(scheme), headers, b'{"a": 1}', NOW)


@pytest.mark.parametrize("scheme", SIGNED)
def test_a_changed_body_is_refused(scheme):
    secret = new_secret(scheme)
    headers = sign(scheme, secret, b'{"a": 1}', NOW)
    assert not verify(scheme, secret, headers, b'{"a": 2}', NOW)
    assert not verify(scheme, secret, headers, b'{"a": 1} ', NOW)


def test_a_changed_id_or_timestamp_is_refused():
    assert not verify("standard_webhooks", SW_SECRET, sw_headers(msg_id="msg_other"), SW_BODY, SW_TIMESTAMP)
    later = str(SW_TIMESTAMP + 1)
    assert not verify("standard_webhooks", SW_SECRET, sw_headers(timestamp=later), SW_BODY, SW_TIMESTAMP)


# --- malformed input is "not verified", never an exception ---------------------------------------

HUGE = "v1," + "A" * (100 * 1024)

MALFORMED_STANDARD = {
    "no headers": {},
    "no signature": {"webhook-id": SW_ID, "webhook-timestamp": str(SW_TIMESTAMP)},
    "no id": {"webhook-timestamp": str(SW_TIMESTAMP), "webhook-signature": SW_SIGNATURE},
    "no timestamp": {"webhook-id": SW_ID, "webhook-signature": SW_SIGNATURE},
    "empty signature": sw_headers(""),
    "v1 alone": sw_headers("v1"),
    "v1 and comma": sw_headers("v1,"),
    "v1,a,b": sw_headers("v1,a,b"),
    "v1,!!!": sw_headers("v1,!!!"),
    "bare base64": sw_headers(SW_SIGNATURE[3:]),
    "spaces only": sw_headers("   "),
    "100 KB signature": sw_headers(HUGE),
    "100 KB signature with the right one": sw_headers(SW_SIGNATURE + " " + HUGE),
    "100 KB id": sw_headers(msg_id="m" * 100 * 1024),
    "non-ASCII signature": sw_headers("v1,é" + SW_SIGNATURE[3:]),
    "non-ASCII id": sw_headers(msg_id="msg_é"),
    "non-ASCII timestamp": sw_headers(timestamp="１６１４２６５３３０"),
    "timestamp 301 s old": sw_headers(timestamp=str(SW_TIMESTAMP - 301)),
    "timestamp 301 s ahead": sw_headers(timestamp=str(SW_TIMESTAMP + 301)),
    "timestamp nan": sw_headers(timestamp="nan"),
    "timestamp inf": sw_headers(timestamp="inf"),
    "timestamp 1e20": sw_headers(timestamp="1e20"),
    "timestamp -1": sw_headers(timestamp="-1"),
    "timestamp empty": sw_headers(timestamp=""),
    "timestamp float": sw_headers(timestamp=f"{SW_TIMESTAMP}.0"),
    "timestamp padded": sw_headers(timestamp=f" {SW_TIMESTAMP}"),
    "timestamp huge": sw_headers(timestamp="9" * 400),
    "value not a string": sw_headers(signature=None),
}


@pytest.mark.parametrize("headers", MALFORMED_STANDARD.values(), ids=MALFORMED_STANDARD.keys())
def test_malformed_standard_webhooks_headers_are_not_verified(headers):
    assert verify("standard_webhooks", SW_SECRET, headers, SW_BODY, SW_TIMESTAMP) is False


MALFORMED_HEX = {
    "missing": None,
    "empty": "",
    "prefix only": "sha256=",
    "no prefix": GITHUB_SIGNATURE[len("sha256="):],
    "sha1 prefix": "sha1=" + GITHUB_SIGNATURE[len("sha256="):],
    "truncated": GITHUB_SIGNATURE[:-1],
    "extra": GITHUB_SIGNATURE + "0",
    "not hex": "sha256=" + "z" * 64,
    "non-ASCII": "sha256=" + "é" * 64,
    "non-ASCII after a right one": GITHUB_SIGNATURE + "é",
    "100 KB": "sha256=" + "a" * 100 * 1024,
    "padded": " " + GITHUB_SIGNATURE,
}


@pytest.mark.parametrize("scheme", ["github", "hmac_sha256"])
@pytest.mark.parametrize("value", MALFORMED_HEX.values(), ids=MALFORMED_HEX.keys())
def test_malformed_hex_signature_headers_are_not_verified(scheme, value):
    name = {"github": "X-Hub-Signature-256", "hmac_sha256": "X-Signature"}[scheme]
    headers = {} if value is None else {name: value}
    assert verify(scheme, GITHUB_SECRET, headers, GITHUB_BODY, NOW) is False


BAD_WHSEC = ["whsec_", "whsec_!!!!", "whsec_abc$", "whsec_é", "whsec_A", "", "whsec_===="]


@pytest.mark.parametrize("secret", BAD_WHSEC)
def test_a_whsec_secret_with_bad_base64_is_not_verified(secret):
    assert verify("standard_webhooks", secret, sw_headers(), SW_BODY, SW_TIMESTAMP) is False


@pytest.mark.parametrize(
    "now", [float("nan"), float("inf"), float("-inf"), 1e300, -1.0], ids=["nan", "inf", "-inf", "1e300", "-1"]
)
def test_a_strange_now_is_not_verified(now):
    assert verify("standard_webhooks", SW_SECRET, sw_headers(), SW_BODY, now) is False


@pytest.mark.parametrize("scheme", SIGNED)
def test_an_empty_secret_never_verifies(scheme):
    headers = {"X-Hub-Signature-256": "sha256=" + hmac.new(b"", b"x", hashlib.sha256).hexdigest()}
    headers["X-Signature"] = headers["X-Hub-Signature-256"]
    assert verify(scheme, "", headers, b"x", NOW) is False


def test_odd_arguments_are_not_verified():
    assert verify("rot13", GITHUB_SECRET, {"X-Signature": GITHUB_SIGNATURE}, GITHUB_BODY, NOW) is False
    assert verify("github", GITHUB_SECRET, {"X-Hub-Signature-256": GITHUB_SIGNATURE}, "Hello, World!", NOW) is False
    assert verify("github", None, {"X-Hub-Signature-256": GITHUB_SIGNATURE}, GITHUB_BODY, NOW) is False
    assert verify("github", GITHUB_SECRET, None, GITHUB_BODY, NOW) is False


def test_bytes_header_values_are_read():
    headers = {b"x": b"y", "X-Hub-Signature-256": GITHUB_SIGNATURE.encode()}
    assert verify("github", GITHUB_SECRET, headers, GITHUB_BODY, NOW)


def test_unsigned_links_have_nothing_to_verify():
    assert verify("none", "", {}, b"anything", NOW) is True


# --- sign / verify round trips and the reference client ------------------------------------------


@pytest.mark.parametrize("scheme", SCHEMES)
def test_sign_round_trips_with_verify(scheme):
    secret = new_secret(scheme)
    body = '{"status": "done", "note": "café ✓"}'.encode()
    headers = sign(scheme, secret, body, NOW, message_id="msg_round_trip")
    assert verify(scheme, secret, headers, body, NOW)
    assert verify(scheme, secret, headers, body, NOW + TOLERANCE_SECONDS)


def test_sign_names_the_headers_a_sender_sends():
    assert set(sign("github", "s", b"", NOW)) == {"X-Hub-Signature-256"}
    assert set(sign("hmac_sha256", "s", b"", NOW)) == {"X-Signature"}
    assert sign("none", "", b"", NOW) == {}
    headers = sign("standard_webhooks", new_secret("standard_webhooks"), b"", NOW + 0.9, message_id="msg_1")
    assert headers["webhook-id"] == "msg_1"
    assert headers["webhook-timestamp"] == str(int(NOW))


def test_sign_refuses_unknown_schemes_and_bad_secrets():
    with pytest.raises(ValueError):
        sign("rot13", "s", b"", NOW)
    with pytest.raises(ValueError):
        sign("standard_webhooks", "whsec_!!!", b"", NOW)


@pytest.mark.parametrize("secret", [SW_SECRET, None])
def test_the_reference_client_is_accepted(secret):
    secret = secret or new_secret("standard_webhooks")
    body = '{"event": "deploy.finished", "ok": true, "who": "zoë"}'
    when = datetime.fromtimestamp(NOW, tz=timezone.utc)
    signature = Webhook(secret).sign("msg_2Lh9KRb0pzN4LePd3XiA4TVSp", when, body)
    headers = {"Webhook-Id": "msg_2Lh9KRb0pzN4LePd3XiA4TVSp", "Webhook-Timestamp": str(int(NOW))}
    headers["Webhook-Signature"] = signature
    assert verify("standard_webhooks", secret, headers, body.encode(), NOW)
    # And the reference client accepts what we sign.
    ours = sign("standard_webhooks", secret, body.encode(), NOW, message_id="msg_x")
    assert ours["webhook-signature"] == Webhook(secret).sign("msg_x", when, body)


def test_new_secrets():
    whsec = new_secret("standard_webhooks")
    assert whsec.startswith("whsec_")
    assert len(base64.b64decode(whsec[len("whsec_"):], validate=True)) == 32
    Webhook(whsec)  # the reference client takes it
    for scheme in ("github", "hmac_sha256"):
        secret = new_secret(scheme)
        assert len(secret) >= 43 and secret.isascii()
        assert secret != new_secret(scheme)
    assert new_secret("none") == ""
    with pytest.raises(ValueError):
        new_secret("rot13")


def test_max_header_chars_is_the_limit():
    secret = new_secret("standard_webhooks")
    right = sign("standard_webhooks", secret, b"x", NOW)["webhook-signature"]
    padded = right + " " * (MAX_HEADER_CHARS - len(right))
    headers = sign("standard_webhooks", secret, b"x", NOW)
    assert verify("standard_webhooks", secret, {**headers, "webhook-signature": padded}, b"x", NOW)
    assert not verify("standard_webhooks", secret, {**headers, "webhook-signature": padded + " "}, b"x", NOW)


# --- delivery ids and pings ----------------------------------------------------------------------

ALL_IDS = {"Idempotency-Key": "idem-1", "webhook-id": "msg_1", "X-GitHub-Delivery": "gh-1"}


@pytest.mark.parametrize(
    ("scheme", "headers", "expected"),
    [
        ("none", ALL_IDS, "idem-1"),
        ("github", ALL_IDS, "idem-1"),
        ("standard_webhooks", ALL_IDS, "idem-1"),
        ("hmac_sha256", ALL_IDS, "idem-1"),
        ("standard_webhooks", {"webhook-id": "msg_1", "X-GitHub-Delivery": "gh-1"}, "msg_1"),
        ("github", {"webhook-id": "msg_1", "X-GitHub-Delivery": "gh-1"}, "gh-1"),
        ("none", {"webhook-id": "msg_1", "X-GitHub-Delivery": "gh-1"}, None),
        ("hmac_sha256", {"webhook-id": "msg_1", "X-GitHub-Delivery": "gh-1"}, None),
        ("github", {"x-github-delivery": "gh-lower"}, "gh-lower"),
        ("github", {"IDEMPOTENCY-KEY": "  spaced  "}, "spaced"),
        ("github", {"Idempotency-Key": "", "X-GitHub-Delivery": "gh-1"}, "gh-1"),
        ("none", {"Idempotency-Key": "k" * 200}, "k" * 200),
        ("none", {"Idempotency-Key": "k" * 201}, None),
        ("none", {"Idempotency-Key": "bad\x00key"}, None),
        ("none", {}, None),
    ],
)
def test_delivery_id_precedence(scheme, headers, expected):
    assert delivery_id(scheme, headers) == expected


def test_is_github_ping():
    assert is_github_ping({"X-GitHub-Event": "ping"})
    assert is_github_ping({"x-github-event": "ping"})
    assert not is_github_ping({"X-GitHub-Event": "push"})
    assert not is_github_ping({"X-Event": "ping"})
    assert not is_github_ping({})


def test_hmac_sha256_with_a_timestamp_signs_timestamp_and_body_and_holds_for_five_minutes():
    headers = sign("hmac_sha256", "s3cret", b'{"a":1}', NOW, stamped=True)
    assert headers["X-Signature-Timestamp"] == str(int(NOW))
    assert verify("hmac_sha256", "s3cret", headers, b'{"a":1}', NOW + 299)
    assert not verify("hmac_sha256", "s3cret", headers, b'{"a":1}', NOW + 301), "a replay after 5 minutes"
    assert not verify("hmac_sha256", "s3cret", headers, b'{"a":1}', NOW - 301)
    assert not verify("hmac_sha256", "s3cret", headers, b'{"a":2}', NOW)


def test_hmac_sha256_timestamp_is_covered_by_the_signature():
    headers = sign("hmac_sha256", "s3cret", b"body", NOW, stamped=True)
    moved = {**headers, "X-Signature-Timestamp": str(int(NOW) + 60)}
    assert not verify("hmac_sha256", "s3cret", moved, b"body", NOW + 60), "a fresh stamp on an old signature"
    body_only = {"X-Signature": sign("hmac_sha256", "s3cret", b"body", NOW)["X-Signature"],
                 "X-Signature-Timestamp": str(int(NOW))}
    assert not verify("hmac_sha256", "s3cret", body_only, b"body", NOW), "a stamp the signature doesn't cover"


@pytest.mark.parametrize("stamp", ["", "abc", "1e9", "-5", "9" * 40, " 1700000000"])
def test_hmac_sha256_malformed_timestamps_are_not_verified(stamp):
    signature = sign("hmac_sha256", "s3cret", b"body", NOW, stamped=True)["X-Signature"]
    assert not verify("hmac_sha256", "s3cret", {"X-Signature": signature, "X-Signature-Timestamp": stamp}, b"body",
                      NOW)
