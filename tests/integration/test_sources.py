"""Feed, metric and file sources, and placeholders, end to end: created through the tool endpoint,
checked by the real scheduler and worker against real local servers and files."""

from __future__ import annotations

from datetime import timedelta

from models.tables import Monitor, MonitorRun
from tests.integration.helpers import db, tool
from tests.integration.helpers import wakes as wake_messages

DAY = 86400

RSS = """<?xml version="1.0"?><rss version="2.0"><channel><title>{title}</title>
{items}</channel></rss>"""
ITEM = "<item><title>{0}</title><link>https://blog.example.com/{1}</link><guid>{1}</guid></item>"

METRICS = """# HELP queue_depth Jobs waiting.
# TYPE queue_depth gauge
queue_depth{{queue="a"}} {a}
queue_depth{{queue="b"}} {b}
"""


def rss(*posts: tuple[str, str], title: str = "Blog") -> str:
    return RSS.format(title=title, items="\n".join(ITEM.format(*post) for post in posts))


def create(client, token, source: dict, check: dict | None = None, **extra) -> dict:
    args = {"description": "Tell me when it changes", "source": source, "on_match": "Tell the user.",
            "interval": "5m", **({"check": check} if check else {}), **extra}
    return tool(client, token, "monitor_create", args).json()


def created(client, token, source: dict, check: dict | None = None, **extra) -> tuple[str, dict]:
    body = create(client, token, source, check, **extra)
    assert body["ok"], body
    return body["result"]["monitor_id"], body["result"]


def refusal(client, token, source: dict, check: dict | None = None) -> str:
    body = create(client, token, source, check)
    assert body["ok"] is False, body
    with db():
        assert Monitor.select().count() == 0
    return body["error"]


def wakes(monitor_id: str) -> list[str]:
    return [message.content for message in wake_messages(monitor_id)]


def monitor(monitor_id: str) -> Monitor:
    with db():
        return Monitor.get_by_id(monitor_id)


def runs(monitor_id: str) -> int:
    """The events the checks after the first wrote (the first check's baseline is an event of its own)."""
    with db():
        return MonitorRun.select().where((MonitorRun.monitor == monitor_id)
                                         & MonitorRun.kind.not_in(["baseline", "armed"])).count()


# --- feed --------------------------------------------------------------------------------------------------------------

def test_feed_new_item_wakes_once_and_a_cosmetic_change_is_quiet(client, owner, pages, run_due_checks):
    url = pages.set("/feed.xml", rss(("First post", "p1")), "application/rss+xml")
    monitor_id, result = created(client, owner[1], {"type": "feed", "url": url}, max_wakes=5)
    assert result["baseline"] == "currently: First post — https://blog.example.com/p1"

    pages.set("/feed.xml", rss(("First post", "p1"), title="Renamed blog"), "application/rss+xml")
    run_due_checks()
    assert wakes(monitor_id) == [] and runs(monitor_id) == 0, "the channel title is not an item"

    pages.set("/feed.xml", rss(("Second post", "p2"), ("First post", "p1")), "application/rss+xml")
    run_due_checks()
    run_due_checks()
    [wake] = wakes(monitor_id)
    assert "+ Second post — https://blog.example.com/p2" in wake and "Tell the user." in wake
    assert pages.hits["/feed.xml"] == 4


def test_json_feed_with_items_path_and_key_path(client, owner, pages, run_due_checks):
    url = pages.set_json("/issues", '{"data": {"issues": [{"n": 1, "title": "Crash"}]}}')
    monitor_id, result = created(client, owner[1], {"type": "feed", "url": url, "items_path": "data.issues",
                                                    "key_path": "n"})
    assert result["baseline"] == "currently: Crash"
    pages.set_json("/issues", '{"data": {"issues": [{"n": 2, "title": "Typo"}, {"n": 1, "title": "Crash"}]}}')
    run_due_checks()
    [wake] = wakes(monitor_id)
    assert "+ Typo" in wake


def test_feed_that_turns_into_a_page_is_an_error_not_a_wake(client, owner, pages, run_due_checks):
    url = pages.set("/feed.xml", rss(("First post", "p1")), "application/rss+xml")
    monitor_id, _ = created(client, owner[1], {"type": "feed", "url": url})
    pages.set("/feed.xml", "<!doctype html><html><body>Moved</body></html>")
    run_due_checks()
    assert wakes(monitor_id) == []
    state = monitor(monitor_id)
    assert "HTML page, not an RSS or Atom feed" in state.last_error and state.failure_count == 1


def test_feed_create_refuses_a_body_that_is_not_a_feed(client, owner, pages):
    url = pages.set("/blog", "<!doctype html><html><body><p>Blog</p></body></html>")
    error = refusal(client, owner[1], {"type": "feed", "url": url})
    assert "failed, so no monitor was created" in error and "point source.url at the feed itself" in error


def test_json_feed_create_refuses_items_without_a_key(client, owner, pages):
    url = pages.set_json("/issues", '{"issues": [{"title": "no id"}]}')
    error = refusal(client, owner[1], {"type": "feed", "url": url, "items_path": "issues"})
    assert "no key at key_path 'id'" in error


# --- metric ------------------------------------------------------------------------------------------------------------

def test_metric_threshold_fires_on_its_series_only_once(client, owner, pages, run_due_checks):
    url = pages.set("/metrics", METRICS.format(a=42, b=7), "text/plain; version=0.0.4")
    source = {"type": "metric", "url": url, "metric": "queue_depth", "labels": {"queue": "a"}}
    monitor_id, result = created(client, owner[1], source, {"type": "threshold", "op": ">", "value": 100},
                                 max_wakes=5)
    assert result["baseline"] == "currently 42"

    pages.set("/metrics", METRICS.format(a=42, b=900), "text/plain")
    run_due_checks()
    assert wakes(monitor_id) == [] and runs(monitor_id) == 0, "another series moving is a quiet check"

    pages.set("/metrics", METRICS.format(a=150, b=900), "text/plain")
    run_due_checks()
    pages.set("/metrics", METRICS.format(a=160, b=900), "text/plain")
    run_due_checks()
    [wake] = wakes(monitor_id)
    assert "150 is above 100 (was 42)" in wake, "staying above must not fire again"


def test_metric_create_refuses_an_ambiguous_series(client, owner, pages):
    url = pages.set("/metrics", METRICS.format(a=1, b=2), "text/plain")
    error = refusal(client, owner[1], {"type": "metric", "url": url, "metric": "queue_depth"},
                    {"type": "threshold", "op": ">", "value": 100})
    assert "2 series named queue_depth match; add source.labels to pick one, using queue ('a', 'b')" in error


def test_metric_that_becomes_nan_is_an_error(client, owner, pages, run_due_checks):
    url = pages.set("/metrics", METRICS.format(a=5, b=2), "text/plain")
    source = {"type": "metric", "url": url, "metric": "queue_depth", "labels": {"queue": "a"}}
    monitor_id, _ = created(client, owner[1], source, {"type": "threshold", "op": ">", "value": 100})
    pages.set("/metrics", METRICS.format(a="NaN", b=2), "text/plain")
    run_due_checks()
    assert wakes(monitor_id) == []
    assert 'queue_depth{queue="a"} is nan, not a number' in monitor(monitor_id).last_error


# --- file --------------------------------------------------------------------------------------------------------------

def test_file_change_wakes_and_an_unchanged_file_is_quiet(client, owner, reconfigure, run_due_checks, tmp_path):
    root = tmp_path / "watched"
    root.mkdir()
    reconfigure(FILE_SOURCE_ROOTS=str(root))
    (root / "status.json").write_text('{"state": "running", "step": 1}')
    monitor_id, result = created(client, owner[1], {"type": "file", "path": str(root / "status.json")},
                                 {"type": "threshold", "op": ">=", "value": 3})
    assert result["baseline"] == "currently 1"
    run_due_checks()
    assert monitor(monitor_id).check_count == 2 and runs(monitor_id) == 0
    (root / "status.json").write_text('{"step": 3, "state": "done"}')
    run_due_checks()
    [wake] = wakes(monitor_id)
    assert "3 is at or above 3 (was 1)" in wake


def test_text_file_change_check(client, owner, reconfigure, run_due_checks, tmp_path):
    reconfigure(FILE_SOURCE_ROOTS=str(tmp_path))
    (tmp_path / "deploy.log").write_text("deploy started\n")
    monitor_id, result = created(client, owner[1], {"type": "file", "path": str(tmp_path / "deploy.log")})
    assert result["baseline"] == "currently: deploy started"
    (tmp_path / "deploy.log").write_text("deploy started\n  deploy   finished  \n")
    run_due_checks()
    [wake] = wakes(monitor_id)
    assert "+ deploy finished" in wake


def test_file_sources_refused_when_off_or_outside_the_roots(client, owner, reconfigure, tmp_path):
    (tmp_path / "secret.txt").write_text("x")
    assert "File sources are turned off on this Vigil" in refusal(
        client, owner[1], {"type": "file", "path": str(tmp_path / "secret.txt")})
    root = tmp_path / "root"
    root.mkdir()
    (root / "link.txt").symlink_to(tmp_path / "secret.txt")
    reconfigure(FILE_SOURCE_ROOTS=str(root))
    for path in (f"{root}/../secret.txt", str(root / "link.txt")):
        assert "outside the folders file sources may read" in refusal(client, owner[1], {"type": "file", "path": path})
    assert "does not exist" in refusal(client, owner[1], {"type": "file", "path": str(root / "missing.txt")})


def test_file_removed_after_create_is_an_error(client, owner, reconfigure, run_due_checks, tmp_path):
    reconfigure(FILE_SOURCE_ROOTS=str(tmp_path))
    (tmp_path / "a.txt").write_text("one")
    monitor_id, _ = created(client, owner[1], {"type": "file", "path": str(tmp_path / "a.txt")})
    (tmp_path / "a.txt").unlink()
    run_due_checks()
    state = monitor(monitor_id)
    assert state.last_error == f"The file {tmp_path}/a.txt does not exist." and state.unreachable_since is None
    assert wakes(monitor_id) == []


# --- placeholders ------------------------------------------------------------------------------------------------------

def test_placeholder_in_the_query_is_filled_on_every_check(client, owner, pages, run_due_checks):
    """{{last_checked_date}} is the date of the previous check: the scheduler's clock moves a day per tick."""
    with db():
        today = Monitor._meta.database.execute_sql("SELECT (now() AT TIME ZONE 'UTC')::date").fetchone()[0]
    paths = {day: f"/mail?q=after:{(today + timedelta(days=day)).strftime('%Y%%2F%m%%2F%d')}" for day in range(4)}
    for day, path in paths.items():
        pages.set_json(path, f'{{"messages": [{{"id": "m{day}", "title": "Mail {day}"}}]}}')
    source = {"type": "feed", "url": pages.url("/mail?q=after:{{last_checked_date}}"), "items_path": "messages"}
    monitor_id, result = created(client, owner[1], source, max_wakes=5, expires_in="30d")
    assert result["baseline"] == "currently: Mail 0"
    assert monitor(monitor_id).source["url"].endswith("/mail?q=after:{{last_checked_date}}")
    run_due_checks(DAY)  # the previous check was the baseline, today
    run_due_checks(DAY)  # the previous check was a day later
    run_due_checks(DAY)
    assert {path: pages.hits.get(path, 0) for path in paths.values()} == {
        paths[0]: 2, paths[1]: 1, paths[2]: 1, paths[3]: 0}
    assert [w.split("+ ")[1].splitlines()[0] for w in wakes(monitor_id)] == ["Mail 1", "Mail 2"]


def test_unknown_placeholder_is_refused_at_create(client, owner, pages):
    error = refusal(client, owner[1], {"type": "json", "url": pages.url("/x?since={{yesterday}}")})
    assert "unknown placeholder {{yesterday}}" in error and "{{last_checked_date}}" in error
