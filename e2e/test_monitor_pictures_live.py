"""The monitor page's pictures against a real Vigil (web, worker, scheduler): a threshold monitor's chart grows a
point per reading as its checks run, live, with the threshold dashed and each fire marked; a page monitor's
latest change shows word by word, a "<script>" in the page's text shown as text. No console errors, nothing
refused by the page's Content-Security-Policy."""

from __future__ import annotations

import re

import pytest
import requests
from playwright.sync_api import Page, expect

from e2e.api import created_monitor
from e2e.browser import LIVE, console_errors, log_in, mark_event_stream_open, shoot

pytestmark = pytest.mark.e2e

PRICE = "<html><body><p id='price'>Price: ${price}</p></body></html>"
NOTES = ("<html><body><article id='notes'><h2>Release notes</h2><p>{line}</p><p>Known issues: the exporter "
         "drops the last row of very long tables, and the importer is slow on files over 2 GB. A workaround for "
         "both is in the manual, chapter 7, which also covers upgrading from 3.x.</p></article></body></html>")
FIRST = "Version 4.1 fixes the login loop and adds dark mode."
SECOND = "Version 4.2 fixes the login loop, adds dark mode and <script>alert('hi')</script> escaping."




def test_monitor_page_charts_a_threshold_monitors_readings_live(page: Page, vigil_stack, pages, screenshots):
    stack = vigil_stack
    url = pages.set("/e2e-chart", PRICE.replace("{price}", "95.10"))
    monitor_id = created_monitor(stack, "e2e-monitor-chart", {
        "description": "ACMEB below 90 (e2e chart)", "source": {"type": "page", "url": url, "selector": "#price"},
        "check": {"type": "threshold", "op": "<", "value": 90}, "on_match": "Tell the user.", "interval": "1s",
        "max_wakes": 3})
    errors = console_errors(page, responses=True)
    mark_event_stream_open(page)
    log_in(page, stack)
    page.goto(f"{stack.base}/monitors/{monitor_id}")
    page.wait_for_function("() => window.__sseOpen === true", timeout=LIVE)
    chart = page.locator(f"section#chart-{monitor_id}")
    expect(chart.locator("svg circle.point")).to_have_count(1)
    expect(chart.locator("svg line.threshold")).to_have_count(1)
    expect(chart.locator("svg text.threshold-label")).to_have_text("threshold: below 90")

    try:
        for count, price in enumerate(("97.40", "91.30", "88.20", "93.00", "86.50"), start=2):
            pages.set("/e2e-chart", PRICE.replace("{price}", price))
            expect(chart.locator("svg circle.point")).to_have_count(count, timeout=LIVE)  # live, over SSE
    finally:
        requests.post(f"{stack.base}/api/monitors/{monitor_id}/cancel", headers=stack.auth, timeout=10)
    expect(chart.locator("svg circle.fired")).to_have_count(2)
    expect(chart.locator("svg desc")).to_contain_text("6 readings from ")
    expect(chart.locator("svg desc")).to_contain_text("It fired 2 times")
    expect(chart.locator("svg")).to_have_attribute("role", "img")
    shoot(page, screenshots, "monitor-page-chart", no_sideways=True)
    box = chart.locator("svg").bounding_box()
    assert box["width"] <= 560 and box["height"] > 150
    page.set_viewport_size({"width": 375, "height": 800})
    narrow = chart.locator("svg").bounding_box()
    assert narrow["width"] < 375 and narrow["height"] > 100, "it scales to the phone's width"
    assert errors == [], errors


def test_monitor_page_shows_a_pages_latest_change_word_by_word(page: Page, vigil_stack, pages, screenshots):
    stack = vigil_stack
    url = pages.set("/e2e-diff", NOTES.replace("{line}", FIRST))
    monitor_id = created_monitor(stack, "e2e-monitor-diff", {
        "description": "the release notes change (e2e diff)", "source": {"type": "page", "url": url,
                                                                          "selector": "#notes"},
        "check": {"type": "change"}, "on_match": "Tell the user.", "interval": "1s", "max_wakes": 3})
    errors = console_errors(page, responses=True)
    mark_event_stream_open(page)
    log_in(page, stack)
    page.goto(f"{stack.base}/monitors/{monitor_id}")
    page.wait_for_function("() => window.__sseOpen === true", timeout=LIVE)
    diff = page.locator(f"section#diff-{monitor_id}")
    expect(diff.locator("p.empty")).to_have_text(re.compile(r"^No change yet"))

    escaped = SECOND.replace("<", "&lt;").replace(">", "&gt;")
    pages.set("/e2e-diff", NOTES.replace("{line}", escaped))
    try:
        expect(diff.locator("p.word-diff ins.added").first).to_be_visible(timeout=LIVE)  # live, over SSE
    finally:
        requests.post(f"{stack.base}/api/monitors/{monitor_id}/cancel", headers=stack.auth, timeout=10)
    expect(diff.locator("p.word-diff del.removed").first).to_have_text("4.1")
    expect(diff.locator("p.word-diff")).to_contain_text("<script>alert('hi')</script>")
    assert page.evaluate("document.querySelectorAll('p.word-diff script').length") == 0
    shoot(page, screenshots, "monitor-page-diff", no_sideways=True)
    assert errors == [], errors
