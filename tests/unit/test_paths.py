import pytest

from engine.paths import PathError, parse_path, resolve

DOC = {
    "items": [{"price": 10, "tags": ["a", "b"]}, {"price": 20, "tags": ["c"]}],
    "grid": [[1, 2], [3, 4]],
    "meta": {"count": 2, "nested": {"deep": "yes"}},
}


@pytest.mark.parametrize("path, value", [
    ("meta.count", 2),
    ("meta.nested.deep", "yes"),
    ("items[0].price", 10),
    ("items[1].tags[0]", "c"),
    ("items[-1].price", 20),
    ("items[0].tags[-1]", "b"),
    ("grid[0][1]", 2),
    ("grid[1][0]", 3),
    ("grid[-1][-1]", 4),
])
def test_resolve_follows_dotted_paths_and_indexes(path, value):
    assert resolve(DOC, path) == value


def test_resolve_indexes_a_top_level_list():
    assert resolve([{"x": 1}, {"x": 2}], "[1].x") == 2


def test_parse_path_splits_keys_and_indexes():
    assert parse_path("a.b[0][-2].c") == ["a", "b", 0, -2, "c"]


def test_resolve_treats_leading_data_as_the_document_when_it_has_no_data_key():
    assert resolve(DOC, "data.items[1].price") == 20
    assert resolve([5, 6], "data[1]") == 6


def test_resolve_reads_the_data_key_when_the_document_has_one():
    doc = {"data": {"price": 1}, "price": 2}
    assert resolve(doc, "data.price") == 1


def test_resolve_does_not_strip_data_when_the_document_has_a_data_key():
    doc = {"data": {"other": 1}, "price": 2}
    with pytest.raises(PathError):
        resolve(doc, "data.price")


def test_resolve_data_alone_is_not_the_document():
    with pytest.raises(PathError):
        resolve({"x": 1}, "data")


@pytest.mark.parametrize("path", [
    "missing", "meta.missing", "items[2]", "items[-3]", "grid[0][2]", "meta[0]", "items.price",
    "meta.count.more", "data.missing",
])
def test_resolve_raises_path_error_when_nothing_is_there(path):
    with pytest.raises(PathError):
        resolve(DOC, path)


@pytest.mark.parametrize("path", ["a..b", "[x]", "", "   ", ".a", "a.", "a[", "a]", "a[1", "a[1.5]", "a[ 1]", None, 3])
def test_parse_path_refuses_malformed_paths(path):
    with pytest.raises(PathError):
        parse_path(path)


@pytest.mark.parametrize("path", ["a..b", "[x]", ""])
def test_resolve_refuses_malformed_paths(path):
    with pytest.raises(PathError):
        resolve({"a": {"b": 1}}, path)
