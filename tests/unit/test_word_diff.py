"""engine/word_diff: a page monitor's latest change word by word, from the line diff its event kept; capped, and
the words rendered as text (the monitor page's partial escapes them)."""

from __future__ import annotations

from app.templating import render
from engine.checks.change import describe_change
from engine.explain import MAX_SIDE_CHARS
from engine.word_diff import ADDED, REMOVED, SAME, diff_of_change, sides_of, word_diff


def test_word_diff_marks_the_words_that_went_and_came_and_keeps_the_rest():
    diff = word_diff("Price: $10 in stock", "Price: $12 in stock")
    assert diff.parts == ((SAME, "Price: $"), (REMOVED, "10"), (ADDED, "12"), (SAME, " in stock"))
    assert diff.changed and not diff.cut


def test_word_diff_keeps_punctuation_apart_from_the_words():
    diff = word_diff("the login loop and adds dark mode.", "the login loop, adds dark mode.")
    assert diff.parts == ((SAME, "the login loop"), (REMOVED, " and"), (ADDED, ","), (SAME, " adds dark mode."))


def test_word_diff_keeps_a_number_whole():
    diff = word_diff("Version 4.1 costs $1,234.50", "Version 4.2 costs $1,299.00")
    assert diff.parts == ((SAME, "Version "), (REMOVED, "4.1"), (ADDED, "4.2"), (SAME, " costs $"),
                          (REMOVED, "1,234.50"), (ADDED, "1,299.00"))


def test_word_diff_of_equal_text_has_no_change():
    assert not word_diff("same words", "same words").changed


def test_word_diff_caps_each_side_and_says_it_was_cut():
    diff = word_diff("a " * 5000, "b " * 5000, limit=100)
    assert diff.cut
    assert sum(len(text) for kind, text in diff.parts if kind in (SAME, REMOVED)) == 100


def test_sides_of_splits_a_stored_line_diff_into_the_removed_and_the_added_lines():
    stored = describe_change("Price: $10\nStock: 3\nFooter", "Price: $12\nStock: 2\nFooter")
    assert sides_of(stored) == ("Price: $10\nStock: 3", "Price: $12\nStock: 2", False)


def test_diff_of_change_says_cut_when_the_stored_diff_was_cut():
    stored = describe_change("old", "new " * 1000, MAX_SIDE_CHARS)
    assert diff_of_change(stored, MAX_SIDE_CHARS).cut
    assert not diff_of_change(describe_change("old", "new"), MAX_SIDE_CHARS).cut


def test_diff_of_change_whitespace_or_order_only_is_none():
    assert diff_of_change(describe_change("a\nb", "a\nb\n")) is None


def test_diff_partial_shows_a_script_in_the_page_text_as_text():
    class Monitor:
        id = "m1"
    diff = diff_of_change(describe_change("Price: $10", 'Price: <script>alert("x")</script> $12'))
    html = render("partials/_monitor_diff.html", monitor=Monitor(), diff_shown=True, change=({"at": None}, diff))
    assert "<script>" not in html and "&lt;script&gt;alert(" in html
    assert '<ins class="added">&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; </ins>' in html
    assert '<del class="removed">10</del><ins class="added">12</ins>' in html
