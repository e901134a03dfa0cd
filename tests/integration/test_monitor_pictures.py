"""The monitor page's pictures, from the stored events only: a threshold monitor's readings as an SVG chart with
its threshold dashed and its fire marked, and a page monitor's latest change word by word, its text escaped."""

from __future__ import annotations

from bs4 import BeautifulSoup

from tests.integration.helpers import login
from tests.integration.test_check_actor import make_monitor, quote
from tests.integration.test_monitor_page import check_at, through_the_fire


def section(client, monitor_id: str, which: str):
    page = client.get(f"/monitors/{monitor_id}")
    assert page.status_code == 200, page.text
    return BeautifulSoup(page.text, "html.parser").select_one(f"section#{which}-{monitor_id}")


def test_a_threshold_monitors_page_charts_its_readings_with_the_threshold_and_the_fire(client, owner, pages,
                                                                                      run_due_checks):
    monitor_id = through_the_fire(client, owner, pages, run_due_checks)  # 95.10 → 91.30 → 88.20 (fired)
    login(client)
    chart = section(client, monitor_id, "chart")
    assert chart is not None and chart["hx-trigger"] == f"sse:monitor-{monitor_id}"
    svg = chart.select_one("svg.chart-svg")
    assert svg["viewbox"] == "0 0 360 190" and svg["preserveaspectratio"] == "xMidYMid meet"
    assert svg["role"] == "img" and svg.select_one("title").get_text() == "Readings of ACMEB below 90"
    desc = svg.select_one("desc").get_text()
    assert desc.startswith("3 readings from ") and "between 88.2 and 95.1; the latest is 88.2." in desc
    assert "It fires below 90. It fired 1 time" in desc
    threshold = svg.select_one("line.threshold")
    assert threshold["stroke-dasharray"] and threshold["y1"] == threshold["y2"]
    assert svg.select_one("text.threshold-label").get_text() == "threshold: below 90"
    assert [c.get("class") for c in svg.select("circle")] == [["point"], ["point"], ["point", "fired"]]
    assert svg.select_one("text.max").get_text() == "95.1" and svg.select_one("text.min").get_text() == "88.2"
    assert "style=" not in str(chart), "the page's Content-Security-Policy refuses inline styles"
    refreshed = client.get(f"/monitors/{monitor_id}/pictures/chart")
    assert refreshed.status_code == 200
    assert BeautifulSoup(refreshed.text, "html.parser").select_one(f"section#chart-{monitor_id} svg desc") is not None


def test_a_threshold_monitor_at_its_baseline_charts_its_one_reading(client, owner, pages):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    login(client)
    svg = section(client, monitor_id, "chart").select_one("svg")
    assert len(svg.select("circle.point")) == 1 and svg.select_one("line.threshold") is not None
    assert section(client, monitor_id, "diff") is None


def test_a_changed_page_monitor_shows_its_latest_change_word_by_word(client, owner, pages, run_due_checks):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")), check={"type": "change"},
                              description="ACMEB price page", max_wakes=3)
    login(client)
    assert "No change yet" in section(client, monitor_id, "diff").get_text()
    check_at(pages, run_due_checks, "91.30")
    check_at(pages, run_due_checks, "88.20 &lt;script&gt;alert(1)&lt;/script&gt;")
    login(client)
    diff = section(client, monitor_id, "diff")
    assert diff is not None and section(client, monitor_id, "chart") is None
    assert [d.get_text() for d in diff.select("p.word-diff del.removed")] == ["91.30"]
    assert [i.get_text() for i in diff.select("p.word-diff ins.added")] == ["88.20 <script>alert(1)</script>"]
    assert diff.select("p.word-diff script") == [], "the page's text is shown as text, never as markup"
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in client.get(f"/monitors/{monitor_id}/pictures/diff").text


def test_the_pictures_partials_are_the_owners_only(client, owner, stranger, pages):
    monitor_id = make_monitor(client, owner[1], pages.set("/q", quote("95.10")))
    assert client.get(f"/monitors/{monitor_id}/pictures/chart").status_code == 404, "signed out"
    login(client, "stranger@example.com", "stranger-password")
    assert client.get(f"/monitors/{monitor_id}/pictures/chart").status_code == 404
    login(client)
    assert client.get(f"/monitors/{monitor_id}/pictures/other").status_code == 404
