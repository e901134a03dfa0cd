"""models/documents.py without a database: how a document is stored (encode), ETags and If-Match (matches)."""

import json

import pytest

from models.documents import DEFAULT_MAX_BYTES, DocumentRefused, encode, etag, matches


def refused(body, max_bytes=DEFAULT_MAX_BYTES) -> DocumentRefused:
    with pytest.raises(DocumentRefused) as error:
        encode(body, max_bytes)
    return error.value


# --- encode: objects only -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("body, kind", [
    ([], "an array"), ([{"status": "done"}], "an array"), ("done", "a string"), ("", "a string"),
    (3, "a number"), (2.5, "a number"), (True, "a boolean"), (False, "a boolean"), (None, "null"),
])
def test_encode_refuses_what_is_not_an_object_naming_its_kind(body, kind):
    error = refused(body)
    assert error.status == 400
    assert str(error) == f"A document is a JSON object; this body is {kind}."


def test_encode_refuses_a_python_value_json_cannot_hold():
    assert str(refused(b"{}")) == "A document is a JSON object; this body is not JSON."


def test_encode_keeps_the_object_whole():
    body = {"status": "done", "outputs": {"txt": "héllo ✓", "files": [1, 2.5, None, True]}, "empty": {}}
    assert json.loads(encode(body)) == body


def test_encode_is_canonical_so_key_order_is_not_a_change():
    first = encode({"b": 1, "a": {"y": [3, {"d": 1, "c": 2}], "x": None}})
    second = encode({"a": {"x": None, "y": [3, {"c": 2, "d": 1}]}, "b": 1})
    assert first == second == '{"a":{"x":null,"y":[3,{"c":2,"d":1}]},"b":1}'


def test_encode_keeps_unicode_as_text_not_escapes():
    assert encode({"name": "café ✓"}) == '{"name":"café ✓"}'


# --- encode: the size cap ---------------------------------------------------------------------------------------------

def test_encode_size_cap_is_413_with_the_limit_in_the_message():
    body = {"log": "x" * 100}
    size = len(json.dumps(body, separators=(",", ":")).encode())
    error = refused(body, 50)
    assert error.status == 413
    assert str(error) == (f"The document is {size:,} bytes; a document may be at most 50 bytes "
                          "(DOCUMENT_MAX_BYTES).")


def test_encode_size_cap_is_on_the_stored_bytes_exactly():
    # '{"x":"…"}' is 8 bytes around the value
    at_limit = {"x": "a" * (DEFAULT_MAX_BYTES - 8)}
    assert len(encode(at_limit).encode()) == DEFAULT_MAX_BYTES
    error = refused({"x": "a" * (DEFAULT_MAX_BYTES - 7)})
    assert error.status == 413
    assert "1,048,577 bytes" in str(error) and "at most 1,048,576 bytes" in str(error)


def test_encode_size_cap_counts_utf8_bytes_not_characters():
    body = {"x": "é" * 30}  # 30 characters, 60 bytes
    assert "at most 64 bytes" in str(refused(body, 64))
    assert encode(body, 68) == '{"x":"' + "é" * 30 + '"}'


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_encode_refuses_numbers_json_has_not(number):
    assert refused({"progress": number}).status == 400


# --- ETag and If-Match --------------------------------------------------------------------------------------------

def test_etag_is_the_quoted_version():
    assert etag(3) == '"3"'
    assert matches(etag(3), 3) and not matches(etag(3), 4)


@pytest.mark.parametrize("header", ['"3"', "3", 'W/"3"', ' "3" ', '"2", "3"', '"1",W/"3"', '"3","4"', "*", " * "])
def test_if_match_names_the_version(header):
    assert matches(header, 3) is True


@pytest.mark.parametrize("header", ['"4"', "4", 'W/"4"', '"33"', '"2", "4"', "", '""', '"3 "', '"03"'])
def test_if_match_naming_another_version_does_not_match(header):
    assert matches(header, 3) is False
