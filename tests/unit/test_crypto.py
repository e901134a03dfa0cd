import pytest
from cryptography.fernet import Fernet

from engine.crypto import DecryptError, Keyring, derive_key


def test_round_trip_keeps_the_text_and_hides_it():
    ring = Keyring([Fernet.generate_key().decode()])
    token = ring.encrypt("sk-secret ünïcode")
    assert "sk-secret" not in token
    assert ring.decrypt(token) == "sk-secret ünïcode"


def test_encrypting_twice_gives_different_tokens():
    ring = Keyring([Fernet.generate_key().decode()])
    assert ring.encrypt("same") != ring.encrypt("same")


def test_rotation_from_old_key_to_new_key():
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    token = Keyring([old]).encrypt("api-key")
    both = Keyring.from_settings("ignored", f"{new}, {old}")
    assert both.decrypt(token) == "api-key"
    rotated = both.rotate(token)
    assert rotated != token
    assert Keyring([new]).decrypt(rotated) == "api-key"
    with pytest.raises(DecryptError):
        Keyring([new]).decrypt(token)


def test_new_tokens_use_the_first_key():
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    token = Keyring([new, old]).encrypt("x")
    assert Keyring([new]).decrypt(token) == "x"
    with pytest.raises(DecryptError):
        Keyring([old]).decrypt(token)


def test_wrong_key_fails_with_decrypt_error_that_names_neither_token_nor_key():
    key = Fernet.generate_key().decode()
    token = Keyring([Fernet.generate_key().decode()]).encrypt("secret")
    with pytest.raises(DecryptError) as caught:
        Keyring([key]).decrypt(token)
    text = str(caught.value) + repr(caught.value)
    assert token not in text and key not in text
    assert text.count(".") >= 1 and str(caught.value).endswith(".")


@pytest.mark.parametrize("garbage", ["", "not-a-token", "gAAAAA" + "x" * 80, "ünïcode", "\x00"])
def test_garbage_fails_with_decrypt_error(garbage):
    ring = Keyring([Fernet.generate_key().decode()])
    with pytest.raises(DecryptError) as caught:
        ring.decrypt(garbage)
    assert garbage not in str(caught.value) or garbage == ""
    with pytest.raises(DecryptError):
        ring.rotate(garbage)


def test_bad_key_names_its_position_but_not_the_key():
    good = Fernet.generate_key().decode()
    bad = "this-is-not-a-fernet-key-but-a-secret"
    with pytest.raises(ValueError) as caught:
        Keyring.from_settings("secret", f"{good},{bad}")
    message = str(caught.value)
    assert "2" in message and bad not in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_empty_entry_in_the_list_is_an_error():
    good = Fernet.generate_key().decode()
    with pytest.raises(ValueError, match="1"):
        Keyring.from_settings("secret", f",{good}")


def test_derived_key_is_stable_for_the_same_secret_and_differs_for_another():
    assert derive_key("s3cret") == derive_key("s3cret")
    assert derive_key("s3cret") != derive_key("other")
    Fernet(derive_key("s3cret"))  # a valid Fernet key
    token = Keyring.from_settings("s3cret", "").encrypt("hello")
    assert Keyring.from_settings("s3cret", "  ").decrypt(token) == "hello"
    with pytest.raises(DecryptError):
        Keyring.from_settings("other", "").decrypt(token)


def test_derived_key_can_be_kept_as_an_older_key_during_rotation():
    token = Keyring.from_settings("s3cret", "").encrypt("hello")
    new = Fernet.generate_key().decode()
    ring = Keyring.from_settings("s3cret", f"{new},{derive_key('s3cret')}")
    assert Keyring([new]).decrypt(ring.rotate(token)) == "hello"


def test_empty_secret_and_no_keys_is_an_error():
    with pytest.raises(ValueError):
        Keyring.from_settings("", "")


def test_repr_shows_no_key():
    key = Fernet.generate_key().decode()
    assert key not in repr(Keyring([key]))
