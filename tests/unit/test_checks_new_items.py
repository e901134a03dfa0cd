"""new_items: fires once per new key; every key seen is remembered, up to a cap."""

import json

import pytest

from engine.checks import baseline, evaluate, parse_check
from engine.checks import new_items as module
from engine.content import Content, ContentError, json_content
from engine.errors import SpecError


def issues(*ids, **extra) -> Content:
    return json_content(json.dumps({"data": {"issues": [{"id": i, "title": f"Issue {i}", **extra} for i in ids]}}))


def json_check(**fields):
    return parse_check({"type": "new_items", "items_path": "data.issues", **fields})


def feed(*keys) -> Content:
    items = tuple({"key": k, "title": f"Post {k}", "link": f"https://example.com/{k}", "summary": "",
                   "published": ""} for k in keys)
    return Content(text="\n".join(keys), items=items)


def steps(check, contents):
    verdict = baseline(check, contents[0])
    out = []
    for content in contents[1:]:
        verdict = evaluate(check, content, verdict.state)
        out.append(verdict)
    return out


def test_parse_keeps_paths():
    check = json_check(key_path="number")
    assert (check.type, check.items_path, check.key_path) == ("new_items", "data.issues", "number")
    assert parse_check({"type": "new_items"}).items_path is None


@pytest.mark.parametrize("raw, field", [
    ({"type": "new_items", "items_path": "a..b"}, "items_path"),
    ({"type": "new_items", "items_path": "a", "key_path": ""}, "key_path"),
    ({"type": "new_items", "items_path": 5}, "items_path"),
    ({"type": "new_items", "pattern": "x"}, "pattern"),
])
def test_parse_refuses_bad_fields(raw, field):
    with pytest.raises(SpecError) as error:
        parse_check(raw)
    assert field in str(error.value)


def test_new_json_item_fires_once_with_its_title():
    first, second = steps(json_check(), [issues(1, 2), issues(3, 1, 2), issues(3, 1, 2)])
    assert first.fired and first.found == "Issue 3"
    assert not second.fired
    assert len(first.fact) == 16


def test_baseline_items_never_fire():
    verdict = baseline(json_check(), issues(1, 2))
    assert not verdict.fired and verdict.state == {"keys": ["1", "2"]} and verdict.summary.startswith("2 items")


def test_item_that_drops_off_and_comes_back_does_not_fire():
    verdicts = steps(json_check(), [issues(1, 2), issues(2), issues(1, 2)])
    assert [v.fired for v in verdicts] == [False, False]


def test_removal_alone_does_not_fire():
    assert not steps(json_check(), [issues(1, 2, 3), issues(3)])[0].fired


def test_fact_is_stable_for_the_same_new_keys_in_any_order():
    a = steps(json_check(), [issues(1), issues(1, 2, 3)])[0]
    b = steps(json_check(), [issues(1), issues(3, 2, 1)])[0]
    assert a.fact == b.fact and a.fired and b.fired


def test_key_path_and_link():
    content = json_content(json.dumps({"items": [{"n": {"id": "a"}, "name": "A", "html_url": "https://x/a"}]}))
    check = parse_check({"type": "new_items", "items_path": "items", "key_path": "n.id"})
    verdict = evaluate(check, content, {"keys": []})
    assert verdict.fired and verdict.found == "A — https://x/a"


def test_item_without_title_shows_its_key():
    content = json_content(json.dumps({"items": [{"id": 7}]}))
    verdict = evaluate(parse_check({"type": "new_items", "items_path": "items"}), content, {"keys": []})
    assert verdict.found == "7"


def test_bare_values_are_their_own_keys():
    check = parse_check({"type": "new_items", "items_path": "tags"})
    verdicts = steps(check, [json_content(b'{"tags": ["v1", "v2"]}'), json_content(b'{"tags": ["v3", "v1"]}')])
    assert verdicts[0].fired and verdicts[0].found == "v3"


def test_found_lists_at_most_20_and_says_how_many_more():
    verdict = steps(json_check(), [issues(0), issues(*range(1, 26))])[0]
    lines = verdict.found.splitlines()
    assert len(lines) == 21 and lines[0] == "Issue 1" and lines[-1] == "and 5 more"


def test_feed_items_are_read_without_paths():
    check = parse_check({"type": "new_items"})
    first, second = steps(check, [feed("a", "b"), feed("c", "a", "b"), feed("b", "a")])
    assert first.fired and first.found == "Post c — https://example.com/c"
    assert not second.fired


def test_feed_entry_without_key_is_a_content_error():
    with pytest.raises(ContentError, match="feed entry"):
        baseline(parse_check({"type": "new_items"}), Content(text="x", items=({"key": "", "title": "t"},)))


def test_item_without_key_is_a_content_error_naming_key_path():
    content = json_content(json.dumps({"data": {"issues": [{"id": 1}, {"title": "no id"}]}}))
    with pytest.raises(ContentError, match="key_path 'id'"):
        baseline(json_check(), content)


def test_null_key_is_a_content_error():
    with pytest.raises(ContentError, match="key_path 'id'"):
        baseline(json_check(), issues(None))


@pytest.mark.parametrize("content, message", [
    (json_content(b'{"other": []}'), "items_path 'data.issues' is gone"),
    (json_content(b'{"data": {"issues": {"a": 1}}}'), "not a list"),
    (Content(text="a page"), "neither"),
])
def test_content_without_the_list_is_a_content_error(content, message):
    with pytest.raises(ContentError, match=message):
        baseline(json_check(), content)


def test_json_without_items_path_is_a_content_error():
    with pytest.raises(ContentError, match="items_path is required"):
        baseline(parse_check({"type": "new_items"}), issues(1))


def test_kept_keys_are_capped_dropping_the_oldest(monkeypatch):
    monkeypatch.setattr(module, "MAX_KEYS", 5)
    verdict = baseline(json_check(), issues(1, 2, 3))
    for batch in ([4, 5], [6, 7], [8]):
        verdict = evaluate(json_check(), issues(*batch), verdict.state)
        assert verdict.fired
    assert verdict.state["keys"] == ["4", "5", "6", "7", "8"]
    assert evaluate(json_check(), issues(1), verdict.state).fired, "a key dropped past the cap counts as new"
    assert not evaluate(json_check(), issues(5), verdict.state).fired


def test_listed_keys_are_kept_before_gone_ones():
    assert module.remember(["a", "b", "c"], ["b", "d"]) == ["a", "c", "b", "d"]


def test_a_list_longer_than_the_cap_is_a_content_error(monkeypatch):
    monkeypatch.setattr(module, "MAX_KEYS", 3)
    with pytest.raises(ContentError, match="more than 3 items"):
        baseline(json_check(), issues(1, 2, 3, 4))


def test_long_keys_are_stored_as_digests():
    long = "k" * 300
    verdict = baseline(parse_check({"type": "new_items", "items_path": "items", "key_path": "k"}),
                       json_content(json.dumps({"items": [{"k": long}]})))
    assert verdict.state["keys"][0].startswith("sha256:")
