import json
import time

import pytest

from engine.content import Content, ContentError, cut_text, excerpt, html_to_text, json_content, page_content

PAGE = b"""<!doctype html>
<html><head><title>Shop title</title><style>body { color: red }</style>
<script>var secret = "script text";</script></head>
<body>
  <noscript>Please enable JavaScript</noscript>
  <h1>   Big     title   </h1>
  <p>   First paragraph\t\twith   spaces\r  </p>
  <div id="price"><span>Price:</span> $95.10</div>
  <div class="status">In stock</div>
  <script>document.write("more script")</script>
</body></html>"""


def test_html_to_text_drops_scripts_styles_and_noscript():
    text = html_to_text(PAGE)
    for hidden in ("script text", "more script", "color: red", "enable JavaScript", "Shop title"):
        assert hidden not in text


def test_html_to_text_collapses_whitespace():
    lines = html_to_text(PAGE).splitlines()
    assert "Big title" in lines
    assert "First paragraph with spaces" in lines
    for line in lines:
        assert line == line.strip()
        assert "  " not in line and "\t" not in line


def test_html_to_text_puts_block_text_on_separate_lines():
    lines = html_to_text(b"<div>Alpha</div><p>Beta</p><h2>Gamma</h2><li>Delta</li>").splitlines()
    assert lines == ["Alpha", "Beta", "Gamma", "Delta"]


def test_html_to_text_never_leaves_runs_of_blank_lines():
    text = html_to_text(b"<p>a</p>" + b"<div>\n\n\n</div>" * 5 + b"<p>b</p>")
    assert "\n\n\n" not in text
    assert text.startswith("a") and text.endswith("b")


def test_html_to_text_selector_picks_only_the_matching_parts():
    assert html_to_text(PAGE, "#price") == "Price: $95.10"
    assert html_to_text(PAGE, ".status") == "In stock"


def test_html_to_text_selector_joins_several_matches():
    text = html_to_text(b"<p class=x>one</p><p>skip</p><p class=x>two</p>", ".x")
    assert text == "one\n\ntwo"


def test_html_to_text_selector_matching_nothing_is_a_content_error():
    with pytest.raises(ContentError, match="#gone"):
        html_to_text(PAGE, "#gone")


def test_html_to_text_selector_does_not_see_script_content():
    with pytest.raises(ContentError):
        html_to_text(b"<p>x</p><script>1</script>", "script")


def test_page_content_is_text_not_json():
    content = page_content(b"<p>hello</p>", None, 1000)
    assert content == Content(text="hello", data=None, is_json=False)


def test_json_content_parses_and_sorts_keys():
    content = json_content(b'{"b": 1, "a": {"d": 2, "c": [3, "x"]}}')
    assert content.is_json
    assert content.data == {"b": 1, "a": {"d": 2, "c": [3, "x"]}}
    assert content.text.index('"a"') < content.text.index('"b"')
    assert content.text.index('"c"') < content.text.index('"d"')


def test_json_content_key_order_and_whitespace_do_not_change_the_digest():
    one = json_content(b'{"price": 95.1, "name": "ACME", "tags": ["x", "y"], "meta": {"b": 2, "a": 1}}')
    two = json_content(b'{\n  "meta": {"a":1,"b":2},\n\t"tags":["x","y"],"name":"ACME",   "price":95.1}\n')
    assert one.text == two.text
    assert one.digest == two.digest


def test_json_content_digest_changes_when_a_value_changes():
    assert json_content(b'{"a": 1}').digest != json_content(b'{"a": 2}').digest


def test_json_content_digest_is_sha256_of_the_text():
    import hashlib
    content = json_content('{"é": "€"}'.encode())
    assert content.digest == hashlib.sha256(content.text.encode("utf-8")).hexdigest()
    assert "€" in content.text  # not \u20ac escapes


@pytest.mark.parametrize("body", [b"NaN", b'{"a": NaN}', b"[Infinity]", b'{"a": -Infinity}'])
def test_json_content_refuses_nan_and_infinity(body):
    with pytest.raises(ContentError):
        json_content(body)


@pytest.mark.parametrize("body", [b"", b"not json", b"{'a': 1}", b'{"a": 1,}', b"<html></html>", b"\xff\xfe\xfd",
                                  b'{"a": 1} trailing'])
def test_json_content_invalid_json_is_a_content_error(body):
    with pytest.raises(ContentError, match="not valid JSON"):
        json_content(body)


@pytest.mark.parametrize("opening, closing", [(b"[", b"]"), (b'{"a":', b"}")])
def test_json_content_deep_nesting_is_a_content_error_quickly(opening, closing):
    body = opening * 100_000 + b"1" + closing * 100_000
    started = time.monotonic()
    with pytest.raises(ContentError, match="nested too deeply"):
        json_content(body)
    assert time.monotonic() - started < 2


def test_json_content_moderate_nesting_still_reads():
    body = b"[" * 200 + b"1" + b"]" * 200
    assert json.loads(json_content(body).text) == json.loads(body)


def test_cut_text_leaves_short_text_alone():
    assert cut_text("héllo", 100) == "héllo"


@pytest.mark.parametrize("limit, expected", [(1, "a"), (2, "a"), (3, "aé"), (4, "aé"), (5, "aé"), (6, "aé€"),
                                             (7, "aé€"), (9, "aé€"), (10, "aé€😀")])
def test_cut_text_cuts_on_a_utf8_boundary(limit, expected):
    # a = 1 byte, é = 2, € = 3, 😀 = 4
    cut = cut_text("aé€😀", limit)
    assert cut == expected
    assert len(cut.encode("utf-8")) <= limit
    assert "\ufffd" not in cut


def test_html_to_text_respects_max_bytes_without_splitting_characters():
    body = ("<p>" + "€" * 1000 + "</p>").encode()
    text = html_to_text(body, max_bytes=100)
    assert text == "€" * 33


def test_json_content_respects_max_bytes():
    body = json.dumps({"k": "ü" * 500}).encode()
    content = json_content(body, max_bytes=64)
    assert len(content.text.encode("utf-8")) <= 64
    assert content.text.endswith("ü")
    assert content.data == {"k": "ü" * 500}


def test_excerpt_flattens_and_caps():
    assert excerpt("a\n  b\tc") == "a b c"
    long = excerpt("word " * 100, 20)
    assert len(long) == 20 and long.endswith("…")


def test_html_to_text_keeps_inline_elements_on_one_line():
    html = "<p>Price:\n   <b>95.10</b>\n USD</p><p>Next</p><pre>a\n  b</pre>"
    assert html_to_text(html) == "Price: 95.10 USD\nNext\na\nb"  # <pre> keeps its lines


def test_html_to_text_rewrapped_markup_reads_the_same():
    one = "<div><p>First paragraph of the notes</p></div>"
    two = "<div>\n  <p>First\n     paragraph of\n the notes</p>\n</div>"
    assert html_to_text(one) == html_to_text(two) == "First paragraph of the notes"


def test_html_to_text_nested_matches_are_read_once():
    html = "<div class='x'>outer <div class='x'>inner</div></div>"
    assert html_to_text(html, ".x") == "outer\ninner"


def test_html_deeper_than_the_cap_keeps_its_text_in_order_with_blocks_parted():
    from engine.content import MAX_HTML_DEPTH

    deep = MAX_HTML_DEPTH + 100
    html = "<div>" * deep + "<p>one</p><p>t<b>w</b>o</p>" + "</div>" * deep + "<p>after</p>"
    assert html_to_text(html) == "one two\nafter"


def test_html_within_the_cap_keeps_every_element_for_selectors():
    from engine.content import MAX_HTML_DEPTH

    # <html><body> take two levels; the paragraphs sit exactly at the cap
    wrap = MAX_HTML_DEPTH - 3
    html = "<div>" * wrap + "<p>one</p><p>two</p>" + "</div>" * wrap
    assert html_to_text(html, "p") == "one\n\ntwo"


def test_html_to_text_deeply_nested_selector_matches_stay_fast():
    import time

    html = "<div>" * 3000 + "deep" + "</div>" * 3000
    start = time.process_time()
    assert html_to_text(html, "div") == "deep"
    assert time.process_time() - start < 20  # quadratic get_text per match took minutes


def test_a_raw_digest_is_the_bodys_sha256_whether_or_not_it_was_just_hashed():
    import hashlib
    import threading

    from engine.content import raw_digest

    def sha(data):
        return hashlib.sha256(data).hexdigest()

    page = b"<p>price 90</p>" * 1000
    assert raw_digest(page) == raw_digest(page) == sha(page)  # the shared body handed to the next monitor
    other = b"<p>price 91</p>" * 1000
    assert raw_digest(other) == sha(other)  # another body, never the remembered digest
    assert raw_digest(bytes(page)) == sha(page)  # an equal copy hashes to the same
    editable = bytearray(page)
    assert raw_digest(editable) == sha(page)
    editable[4] = ord("X")
    assert raw_digest(editable) == sha(bytes(editable))  # a mutable buffer is hashed every time
    seen = {}

    def in_thread(name, body):
        seen[name] = raw_digest(body)

    threads = [threading.Thread(target=in_thread, args=(n, body)) for n, body in (("a", page), ("b", other))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == {"a": sha(page), "b": sha(other)}
    assert raw_digest(b"") == sha(b"")
