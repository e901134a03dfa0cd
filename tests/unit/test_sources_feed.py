import json

import pytest

from engine.errors import ContentError, SpecError
from engine.sources import SourceIO, SourceSpec, normalize, parse_source, read

MAX = 64 * 1024
URL = "https://news.example.com/feed"

RSS = b"""<?xml version="1.0" encoding="UTF-8"?>
<rss version="2.0"><channel><title>News</title><link>https://news.example.com/</link>
<item><title>Second   post</title><link>https://news.example.com/2</link><guid>post-2</guid>
  <description>&lt;p&gt;Hello &lt;b&gt;world&lt;/b&gt;&lt;/p&gt;</description>
  <pubDate>Tue, 07 May 2024 10:00:00 GMT</pubDate></item>
<item><title>First post</title><link>https://news.example.com/1</link></item>
<item><title>Only a title</title><pubDate>Mon, 06 May 2024 09:00:00 +0200</pubDate></item>
</channel></rss>"""

ATOM = b"""<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom"><title>Releases</title><id>urn:releases</id>
<updated>2024-05-07T10:00:00Z</updated>
<entry><title>v1.1</title><id>tag:example.com,2024:v1.1</id><link href="https://example.com/v1.1"/>
  <updated>2024-05-07T10:00:00Z</updated><summary>Bug fixes</summary></entry>
<entry><title>v1.0</title><id>tag:example.com,2024:v1.0</id><link href="https://example.com/v1.0"/>
  <updated>2024-05-01T08:30:00Z</updated></entry>
</feed>"""

ISSUES = {"data": {"issues": [
    {"id": 12, "title": "Crash on start", "html_url": "https://git.example.com/i/12", "created_at": "2024-05-07",
     "body": "ignored", "description": "It crashes"},
    {"id": 11, "name": "Typo", "url": "https://git.example.com/i/11"},
]}}


def spec(**fields) -> SourceSpec:
    return parse_source({"type": "feed", "url": URL, **fields})


def items(body: bytes, **fields):
    return normalize(spec(**fields), body, MAX)


# --- parse -------------------------------------------------------------------------------------------------------------

def test_parse_rss_source_takes_only_a_url():
    assert spec() == SourceSpec(type="feed", url=URL)


def test_parse_json_feed_defaults_key_path_to_id():
    assert spec(items_path="data.issues") == SourceSpec(type="feed", url=URL, items_path="data.issues", key_path="id")
    assert spec(items_path="$", key_path="meta.uid").key_path == "meta.uid"


@pytest.mark.parametrize("fields, fix", [
    ({"key_path": "id"}, "needs source.items_path"),
    ({"items_path": "a..b"}, "source.items_path must be a dotted path"),
    ({"items_path": ""}, "source.items_path must be a dotted path"),
    ({"items_path": "items", "key_path": 5}, "source.key_path must be a dotted path"),
    ({"selector": "#x"}, "unknown field 'selector'"),
])
def test_parse_refuses_bad_fields(fields, fix):
    with pytest.raises(SpecError) as info:
        spec(**fields)
    assert fix in str(info.value) and str(info.value).endswith(".")


def test_parse_refuses_a_missing_url():
    with pytest.raises(SpecError, match="source.url is required for a feed source"):
        parse_source({"type": "feed"})


# --- RSS and Atom ------------------------------------------------------------------------------------------------------

def test_rss_items_keyed_by_guid_then_link_then_title_and_date():
    content = items(RSS)
    keys = [item["key"] for item in content.items]
    assert keys == ["post-2", "https://news.example.com/1", "Only a title 2024-05-06T07:00:00Z"]
    first = content.items[0]
    assert first == {"key": "post-2", "title": "Second post", "link": "https://news.example.com/2",
                     "summary": "Hello world", "published": "2024-05-07T10:00:00Z"}
    assert content.data == list(content.items) and content.is_json


def test_rss_text_is_one_line_per_item():
    assert items(RSS).text.splitlines() == [
        "Second post — https://news.example.com/2", "First post — https://news.example.com/1", "Only a title"]


def test_atom_entries_keyed_by_id():
    content = items(ATOM)
    assert [item["key"] for item in content.items] == ["tag:example.com,2024:v1.1", "tag:example.com,2024:v1.0"]
    assert content.items[0]["link"] == "https://example.com/v1.1" and content.items[0]["summary"] == "Bug fixes"
    assert content.items[1]["published"] == "2024-05-01T08:30:00Z"
    assert content.text == "v1.1 — https://example.com/v1.1\nv1.0 — https://example.com/v1.0"


def test_new_item_changes_the_digest_and_reordering_the_xml_does_not():
    before = items(ATOM)
    newer = ATOM.replace(b"<entry>", b"<entry><title>v1.2</title><id>v1.2</id></entry><entry>", 1)
    assert items(newer).digest != before.digest
    assert items(ATOM.replace(b"<title>Releases</title>", b"<title>Renamed</title>")).digest == before.digest


def test_feed_with_no_items_is_valid_and_says_so():
    content = items(b'<?xml version="1.0"?><rss version="2.0"><channel><title>Empty</title></channel></rss>')
    assert content.items == () and content.text == "(the feed has no items)"


def test_entry_with_nothing_to_key_it_by_is_an_error():
    body = b'<rss version="2.0"><channel><title>t</title><item><description>x</description></item></channel></rss>'
    with pytest.raises(ContentError, match="entry 1 of the feed has no id, link or title"):
        items(body)


@pytest.mark.parametrize("body, says", [
    (b"just some text, not a feed", "neither an RSS or Atom feed nor JSON"),
    (b"", "neither an RSS or Atom feed nor JSON"),
    (b"<!doctype html><html><body><p>Blog</p></body></html>", "an HTML page"),
    (b'{"issues": []}', "give source.items_path"),
])
def test_garbage_is_a_content_error_with_a_clear_sentence(body, says):
    with pytest.raises(ContentError, match=says):
        items(body)


def test_a_body_that_looks_like_a_path_is_never_opened(tmp_path):
    secret = tmp_path / "feed.xml"
    secret.write_bytes(RSS)
    with pytest.raises(ContentError):
        items(str(secret).encode())


# --- JSON lists --------------------------------------------------------------------------------------------------------

def test_json_items_from_items_path_with_default_key():
    content = items(json.dumps(ISSUES).encode(), items_path="data.issues")
    first, second = content.items
    assert first == {"key": "12", "title": "Crash on start", "link": "https://git.example.com/i/12",
                     "summary": "It crashes", "published": "2024-05-07", "data": ISSUES["data"]["issues"][0]}
    assert (second["key"], second["title"], second["link"]) == ("11", "Typo", "https://git.example.com/i/11")
    assert content.text == "Crash on start — https://git.example.com/i/12\nTypo — https://git.example.com/i/11"


def test_json_items_with_a_nested_key_path_and_a_root_list():
    body = json.dumps([{"meta": {"uid": "a"}}, {"meta": {"uid": "b"}, "title": "B"}]).encode()
    content = items(body, items_path="$", key_path="meta.uid")
    assert [item["key"] for item in content.items] == ["a", "b"]
    assert content.text == "a\nB"


def test_json_items_path_with_a_dollar_prefix_and_index():
    body = json.dumps({"pages": [{"rows": [{"id": "x"}]}]}).encode()
    assert items(body, items_path="$.pages[0].rows").items[0]["key"] == "x"


def test_json_item_without_a_key_names_the_key_path():
    body = json.dumps({"items": [{"id": 1}, {"title": "no id"}]}).encode()
    with pytest.raises(ContentError, match="item 2 of the list has no key at key_path 'id'"):
        items(body, items_path="items")


@pytest.mark.parametrize("key", [None, True, {"a": 1}, [1], "  "])
def test_json_item_keys_must_be_text_or_numbers(key):
    with pytest.raises(ContentError, match="no key at key_path 'id'"):
        items(json.dumps({"items": [{"id": key}]}).encode(), items_path="items")


def test_json_items_path_gone_or_not_a_list():
    with pytest.raises(ContentError, match="items_path 'data.issues' is gone"):
        items(b'{"data": {}}', items_path="data.issues")
    with pytest.raises(ContentError, match="is not a list \\(it is an object\\)"):
        items(b'{"data": {"issues": {}}}', items_path="data.issues")


def test_json_feed_body_that_is_not_json():
    with pytest.raises(ContentError, match="not valid JSON"):
        items(RSS, items_path="items")


def test_text_is_cut_at_the_limit():
    body = json.dumps({"items": [{"id": i, "title": "x" * 50} for i in range(100)]}).encode()
    content = normalize(spec(items_path="items"), body, 200)
    assert len(content.text.encode()) <= 200 and len(content.items) == 100


# --- read --------------------------------------------------------------------------------------------------------------

def test_read_gets_the_url():
    class Fetcher:
        urls = []

        def get(self, url):
            self.urls.append(url)
            return type("R", (), {"body": RSS})()
    fetcher = Fetcher()
    assert read(spec(), SourceIO(fetcher)) == RSS and fetcher.urls == [URL]
