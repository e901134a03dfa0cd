"""Seed 002's guards for a stream watcher, end to end on the default install: `vigil serve --local-runner` on
SQLite, the real runner running the command on this machine. A burst arrives in a few wakes (not one per 100
lines), a flood ends with the flood guard's notice at default settings (no hourly or daily cap gets there first),
and a line with no newline for 40,000 bytes arrives once, truncated."""

from __future__ import annotations

import re

import requests

from tests.integration.embedded import watch
from tests.integration.helpers import wait_for


def wakes_until_ended(laptop, conversation: str) -> list[str]:
    """The conversation's wake texts, once the watch has said it ended."""
    def ended():
        texts = [m["content"] for m in requests.get(
            f"{laptop.base}/api/conversations/{conversation}/messages?after=0", headers=laptop.auth).json()["messages"]]
        return texts if any("The watch has ended" in text for text in texts) else None

    return wait_for(ended, timeout=60)


def test_a_burst_of_1000_lines_arrives_in_at_most_5_wakes_every_line_once(laptop):
    watch(laptop, "burst", "seq 1 1000")
    texts = wakes_until_ended(laptop, "burst")
    printed = [int(n) for text in texts for n in re.findall(r"^(\d+)$", text, re.MULTILINE)]
    assert printed == list(range(1, 1001))
    assert len([text for text in texts if "printed" in text]) <= 5, len(texts)
    assert "watcher exited (code 0)" in texts[-1]


def test_seq_6000_ends_with_the_flood_notice_at_default_settings(laptop):
    watch(laptop, "flood", "seq 1 6000")
    texts = wakes_until_ended(laptop, "flood")
    printed = [int(n) for text in texts for n in re.findall(r"^(\d+)$", text, re.MULTILINE)]
    assert printed == list(range(1, 5001)), "the first 5,000 lines, each once, and nothing past the guard"
    assert any("flood guard" in text for text in texts)
    assert "stopped by the flood guard" in texts[-1]
    assert not any("paused" in text.lower() or "times in an hour" in text for text in texts)


def test_a_40000_byte_line_arrives_once_truncated(laptop):
    watch(laptop, "long", "head -c 40000 /dev/zero | tr '\\0' x; echo; echo after")
    texts = wakes_until_ended(laptop, "long")
    body = "\n".join(texts)
    assert body.count("x" * 16000) == 1, "one line, cut at 16 KiB, not three"
    assert "x" * 16 * 1024 + "x" not in body
    assert "truncated" in body and "40,000 bytes" in body
    assert re.search(r"^after$", body, re.MULTILINE)
