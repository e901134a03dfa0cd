import base64
import re

import pytest

from engine.tokens import hash_password, new_token, same_secret, token_digest, verify_password

URLSAFE = re.compile(r"[A-Za-z0-9_-]+")


def test_new_token_has_the_prefix_and_256_bits_of_urlsafe_randomness():
    token = new_token("vgl_")
    assert token.startswith("vgl_")
    body = token[len("vgl_"):]
    assert len(body) >= 43  # 43 base64 characters carry 258 bits; 32 random bytes
    assert URLSAFE.fullmatch(body)
    assert len(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))) >= 32


def test_new_token_is_different_every_time():
    tokens = {new_token("vgl_") for _ in range(1000)}
    assert len(tokens) == 1000
    # No shared structure beyond the prefix: each position varies across tokens.
    bodies = [t[4:] for t in tokens]
    assert all(len({b[i] for b in bodies}) > 20 for i in range(42))


def test_token_digest_is_stable_and_not_the_token():
    token = new_token("vgl_")
    digest = token_digest(token)
    assert digest == token_digest(token)
    assert token not in digest and token[4:] not in digest
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    assert token_digest(new_token("vgl_")) != digest


def test_token_digest_known_value():
    assert token_digest("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


@pytest.fixture(scope="module")
def stored():
    return hash_password("correct horse ✓ battery")


def test_hash_password_round_trip(stored):
    assert verify_password("correct horse ✓ battery", stored)


def test_hash_password_wrong_password_is_false(stored):
    assert verify_password("correct horse ✓ battery!", stored) is False
    assert verify_password("", stored) is False


def test_hash_password_is_salted_and_hides_the_password(stored):
    assert "correct horse" not in stored
    assert stored.startswith("scrypt$")
    assert hash_password("correct horse ✓ battery") != stored


def _with_field(stored: str, index: int, value: str) -> str:
    parts = stored.split("$")
    parts[index] = value
    return "$".join(parts)


@pytest.mark.parametrize("corrupt", [
    lambda s: "",
    lambda s: "not a hash",
    lambda s: s[:-10],                       # truncated digest
    lambda s: s.rsplit("$", 1)[0],           # a field missing
    lambda s: s + "$extra",                  # a field too many
    lambda s: _with_field(s, 0, "bcrypt"),   # another scheme
    lambda s: _with_field(s, 1, "abc"),      # n not a number
    lambda s: _with_field(s, 1, "1000"),     # n not a power of two
    lambda s: _with_field(s, 1, "1048576"),  # n needing more memory than allowed
    lambda s: _with_field(s, 2, "0"),        # r zero
    lambda s: _with_field(s, 4, "!!!not base64!!!"),
    lambda s: _with_field(s, 5, "!!!"),
    lambda s: _with_field(s, 5, base64.b64encode(b"\0" * 32).decode()),  # another digest
])
def test_verify_password_corrupted_hash_is_false_without_exception(stored, corrupt):
    assert verify_password("correct horse ✓ battery", corrupt(stored)) is False


@pytest.mark.parametrize("a, b, same", [
    ("pässwörd✓", "pässwörd✓", True),
    ("pässwörd✓", "passwörd✓", False),
    ("日本", "日本語", False),
    ("ascii", b"ascii", True),
    ("ü", "ü".encode("utf-8"), True),
    (b"\xff", b"\xff", True),
    ("", "", True),
])
def test_same_secret_compares_text_and_bytes(a, b, same):
    assert same_secret(a, b) is same
