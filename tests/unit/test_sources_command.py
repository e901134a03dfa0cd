"""The command source: what monitor_create accepts, and how a polled result becomes content for the checks."""

from __future__ import annotations

import pytest

from engine.errors import SpecError
from engine.pipeline import BASELINE, CHANGED, FIRED, QUIET, Prior, check_body
from engine.sources.command import result_body
from engine.spec import Limits, parse_create
from engine.streams import MAX_WAKE_CHARS, ending_text, lines_text, waking_lines
from engine.checks import parse_check


def spec_of(source: dict, check: dict | None = None):
    arguments = {"description": "watch it", "source": {"type": "command", "device": "laptop", **source}}
    if check is not None:
        arguments["check"] = check
    return parse_create(arguments, Limits())[0]


@pytest.mark.parametrize("source, fix", [
    ({"device": None, "command": "ls"}, "source.device is required"),
    ({"command": ""}, "source.command is required"),
    ({"command": "x" * 4097}, "keep it under 4,096"),
    ({"command": "ls", "cwd": "project"}, "absolute path"),
    ({"command": "ls", "timeout": 0}, "from 1 to 600"),
    ({"command": "ls", "timeout": 601}, "from 1 to 600"),
    ({"command": "ls", "timeout": True}, "from 1 to 600"),
    ({"command": "ls", "mode": "watch"}, "source.mode must be 'poll'"),
    ({"command": "tail -F x", "mode": "stream", "timeout": 5}, "applies to polled commands"),
    ({"command": "ls", "user": "root"}, "unknown field 'user'"),
])
def test_command_source_bad_input_is_one_sentence(source, fix):
    with pytest.raises(SpecError, match=fix):
        spec_of(source)


def test_command_source_defaults_and_stream_checks():
    polled = spec_of({"command": "cat status.txt"})
    assert (polled.source.mode, polled.source.timeout, polled.check.type) == ("poll", 30, "change")
    stream = spec_of({"command": "tail -F a.log", "mode": "stream"})
    assert (stream.source.timeout, stream.check.type) == (None, "every_call")
    with pytest.raises(SpecError, match="filters its lines"):
        spec_of({"command": "tail -F a.log", "mode": "stream"}, {"type": "threshold", "op": "<", "value": 1})
    with pytest.raises(SpecError, match="without a judge"):
        parse_create({"description": "x", "condition": "it matters", "check": {"type": "regex", "pattern": "E"},
                      "source": {"type": "command", "device": "d", "command": "tail -F a", "mode": "stream"}},
                     Limits())


def test_command_result_exit_code_and_output_reach_the_checks():
    status = spec_of({"command": "test -f flag"}, {"type": "status", "value_path": "data.exit_code", "values": [0]})
    first = check_body(status.source, status.check, Prior(), result_body(1, ""), 1000)
    assert first.kind == BASELINE
    prior = Prior(first.raw_hash, first.content_hash, first.verdict.state)
    assert check_body(status.source, status.check, prior, result_body(1, ""), 1000).kind == QUIET
    later = check_body(status.source, status.check, prior, result_body(0, ""), 1000)
    assert later.kind == FIRED and "0" in later.verdict.found

    depth = spec_of({"command": "cat q"}, {"type": "threshold", "op": "below", "value": 100})
    first = check_body(depth.source, depth.check, Prior(), result_body(0, "depth 120 of 500"), 1000)
    prior = Prior(first.raw_hash, first.content_hash, first.verdict.state)
    assert check_body(depth.source, depth.check, prior, result_body(0, "depth 130 of 500"), 1000).kind == CHANGED
    assert check_body(depth.source, depth.check, prior, result_body(0, "depth 80 of 500"), 1000).kind == FIRED


def test_stream_lines_picked_and_labelled():
    assert waking_lines(parse_check({"type": "regex", "pattern": "ERROR"}), ["ok", "ERROR a", "fine"]) == ["ERROR a"]
    assert waking_lines(parse_check({"type": "every_call"}), ["a", "b"]) == ["a", "b"]
    cel = parse_check({"type": "cel", "expr": "line.startsWith('WARN') || line.contains('panic')"})
    assert waking_lines(cel, ["WARN low disk", "ok", "kernel panic"]) == ["WARN low disk", "kernel panic"]
    text = lines_text("app errors", ["ERROR a", "ERROR >>> b"])
    assert text.startswith('Watcher "app errors" printed') and "ERROR a\nERROR > > > b" in text
    assert "watcher exited (code 2)" in ending_text("build", "exited", 2)
    assert "interrupted" in ending_text("build", "interrupted", None)


def test_stream_wake_text_keeps_every_line_past_4000_characters():
    printed = [f"line {n:04d} " + "z" * 40 for n in range(1000)]
    text = lines_text("burst", printed)
    assert "\n".join(printed) in text and "more line" not in text


def test_stream_wake_text_counts_the_lines_it_does_not_show():
    assert lines_text("burst", ["a"], more=1).endswith(">>>\n… and 1 more line (not shown: over the size of one wake)")
    printed = ["y" * 1000] * 300  # 300,299 characters: past MAX_WAKE_CHARS
    text = lines_text("burst", printed, more=5)
    shown = text.split("<<<\n")[1].split("\n>>>")[0].split("\n")
    assert shown == ["y" * 1000] * len(shown) and len("\n".join(shown)) <= MAX_WAKE_CHARS
    assert text.endswith(f"… and {300 - len(shown) + 5:,} more lines (not shown: over the size of one wake)")
