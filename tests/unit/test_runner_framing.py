import json

from runner.framing import (BATCH_MAX_BYTES, FLOOD_MAX_LINES, LINE_MAX_BYTES, RECORD_MAX_BYTES, LineFramer, cut_utf8,
                            fit_json, json_size, truncated_mark)


def lines_of(frames):
    return [line for frame in frames for line in frame.record["lines"]]


def test_framer_strips_newlines_and_crlf():
    framer = LineFramer()
    frames = framer.feed(b"one\r\ntwo\nthree\r\n\n", now=0.0) + framer.close(now=0.0)
    assert lines_of(frames) == ["one", "two", "three", ""]


def test_framer_keeps_a_lone_carriage_return_inside_a_line():
    framer = LineFramer()
    assert lines_of(framer.feed(b"50%\r100%\n", 0.0) + framer.close(0.0)) == ["50%\r100%"]


def test_framer_joins_a_line_split_across_chunks():
    framer = LineFramer()
    frames = framer.feed(b"hel", 0.0) + framer.feed(b"lo\r", 0.01) + framer.feed(b"\nworld\n", 0.02)
    assert lines_of(frames + framer.close(0.02)) == ["hello", "world"]


def test_framer_delivers_the_partial_last_line_at_close():
    framer = LineFramer()
    assert framer.feed(b"first\nno newline", 0.0) == []
    frames = framer.close(0.05)
    assert lines_of(frames) == ["first", "no newline"]
    assert frames[-1].end == len(b"first\nno newline")


def test_framer_decodes_invalid_utf8_with_replacement():
    framer = LineFramer()
    assert lines_of(framer.feed(b"caf\xc3\xa9 \xff!\n", 0.0) + framer.close(0.0)) == ["caf\u00e9 \ufffd!"]


def test_framer_truncates_a_long_line_once_and_discards_its_rest():
    framer = LineFramer()
    frames = framer.feed(b"x" * 40_000 + b"\nnext\n", 0.0) + framer.close(0.0)
    assert lines_of(frames) == ["x" * LINE_MAX_BYTES + truncated_mark(40_000, known=True), "next"]
    assert framer.seen == 2
    assert frames[-1].end == 40_000 + len(b"\nnext\n")


def test_framer_truncates_a_long_line_arriving_over_many_reads():
    framer = LineFramer()
    data = b"x" * 40_000 + b"\r\nnext\n"
    frames = []
    for start in range(0, len(data), 7_000):
        frames += framer.feed(data[start:start + 7_000], start / 1e6)
    frames += framer.close(0.1)
    assert lines_of(frames) == ["x" * LINE_MAX_BYTES + truncated_mark(40_000, known=True), "next"]
    assert framer.seen == 2 and frames[-1].end == len(data)


def test_framer_sends_a_truncated_line_whose_newline_has_not_come_when_its_batch_closes():
    framer = LineFramer()
    assert framer.feed(b"p" * 20_000, 0.0) == []
    frames = framer.tick(0.2)
    assert lines_of(frames) == ["p" * LINE_MAX_BYTES + truncated_mark(20_000, known=False)]
    assert frames[0].end == LINE_MAX_BYTES  # what it accounts for: the rest is not read into a frame yet
    frames = framer.feed(b"p" * 30_000 + b"\nafter\n", 0.5) + framer.close(0.5)
    assert lines_of(frames) == ["after"]
    assert framer.seen == 2 and frames[-1].end == 50_000 + len(b"\nafter\n")


def test_framer_truncated_line_without_a_newline_at_the_end_of_the_output():
    framer = LineFramer()
    frames = framer.feed(b"q" * 30_000, 0.0) + framer.close(0.05)
    assert lines_of(frames) == ["q" * LINE_MAX_BYTES + truncated_mark(30_000, known=True)]
    assert frames[-1].end == 30_000


def test_framer_resumed_inside_a_truncated_line_discards_its_rest():
    framer = LineFramer(offset=LINE_MAX_BYTES, seen=1)
    framer.resume(b"x")  # the byte before the offset: the last frame ended at a truncation
    frames = framer.feed(b"x" * 5_000 + b"\nnext\n", 0.0) + framer.close(0.0)
    assert lines_of(frames) == ["next"]
    assert framer.seen == 2 and frames[-1].end == LINE_MAX_BYTES + 5_000 + len(b"\nnext\n")

    framer = LineFramer(offset=5, seen=1)
    framer.resume(b"\n")  # the last frame ended with its line
    assert lines_of(framer.feed(b"whole\n", 0.0) + framer.close(0.0)) == ["whole"]


def test_framer_keeps_a_line_of_exactly_16_kib_whole():
    framer = LineFramer()
    frames = framer.feed(b"y" * LINE_MAX_BYTES + b"\nz\n", 0.0) + framer.close(0.0)
    assert lines_of(frames) == ["y" * LINE_MAX_BYTES, "z"]


def test_framer_truncation_does_not_split_a_utf8_character():
    framer = LineFramer()
    euro = "\u20ac".encode()  # 3 bytes; 16384 is not a multiple of 3
    frames = framer.feed(euro * 6000 + b"\n", 0.0) + framer.close(0.0)
    [line] = lines_of(frames)
    kept = line.removesuffix(truncated_mark(18_000, known=True))
    assert kept == "\u20ac" * (LINE_MAX_BYTES // 3)
    assert len(kept.encode()) <= LINE_MAX_BYTES


def test_framer_truncated_line_counts_once_toward_the_flood_guard():
    framer = LineFramer(seen=FLOOD_MAX_LINES - 1)
    frames = framer.feed(b"z" * (3 * LINE_MAX_BYTES), 0.0)
    assert not framer.flooded and framer.seen == FLOOD_MAX_LINES
    frames += framer.feed(b"z\nnext\n", 0.1)
    assert framer.flooded
    assert len(lines_of(frames)) == 1


def test_framer_batches_lines_within_200_ms():
    framer = LineFramer()
    assert framer.feed(b"a\n", 0.0) == []
    assert framer.feed(b"b\n", 0.15) == []
    assert framer.tick(0.19) == []
    frames = framer.tick(0.20)
    assert [frame.record for frame in frames] == [{"kind": "lines", "lines": ["a", "b"]}]
    assert framer.deadline() is None


def test_framer_starts_a_new_batch_after_a_200_ms_gap():
    framer = LineFramer()
    framer.feed(b"a\n", 0.0)
    frames = framer.feed(b"b\n", 0.25)
    assert lines_of(frames) == ["a"]
    assert lines_of(framer.close(0.3)) == ["b"]


def test_framer_closes_a_batch_200_ms_after_its_first_line():
    framer = LineFramer()
    frames = []
    for step in range(8):  # a line every 150 ms: never a 200 ms gap, yet no line waits past the window
        frames += framer.feed(b"tick\n", step * 0.15)
    assert [frame.count for frame in frames] == [2, 2, 2]
    assert framer.deadline() == 6 * 0.15 + 0.2


def test_framer_sends_a_burst_of_1000_lines_as_one_record():
    framer = LineFramer()
    assert framer.feed(b"".join(b"line %d\n" % n for n in range(1000)), 0.0) == []
    frames = framer.tick(0.2)
    assert [frame.count for frame in frames] == [1000]
    assert frames[0].record == {"kind": "lines", "lines": [f"line {n}" for n in range(1000)]}


def test_framer_counts_the_lines_past_a_records_size_in_more():
    framer = LineFramer()
    frames = framer.feed(b"w" * 10_000 + b"\n", 0.0)
    frames += framer.feed((b"w" * 10_000 + b"\n") * 99, 0.1) + framer.tick(0.2)
    [frame] = frames
    shown = frame.record["lines"]
    assert 20 < len(shown) < 100 and frame.record["more"] == 100 - len(shown)
    assert frame.count == 100 and framer.seen == 100
    assert frame.end == 100 * 10_001
    assert len(json.dumps(dict(frame.record, seq=10**9), ensure_ascii=False).encode()) <= RECORD_MAX_BYTES


def test_framer_lines_past_a_records_size_count_toward_the_flood_guard():
    framer = LineFramer(seen=FLOOD_MAX_LINES - 40)
    frames = framer.feed((b"w" * 10_000 + b"\n") * 41, 0.0)
    assert framer.flooded
    assert sum(frame.count for frame in frames) == 40


def test_framer_frames_carry_the_offset_past_their_last_line():
    framer = LineFramer(offset=100)
    frames = framer.feed(b"ab\ncd\nef", 0.0)
    frames += framer.tick(1.0)
    assert frames[-1].end == 100 + len(b"ab\ncd\n")
    assert framer.offset == 106
    assert framer.close(1.0)[-1].end == 108


def test_framer_seq_1_6000_delivers_5000_lines_in_one_record_then_nothing():
    framer = LineFramer()
    output = b"".join(b"%d\n" % n for n in range(1, 6001))
    frames = framer.feed(output, 0.0)
    assert framer.flooded
    assert [frame.count for frame in frames] == [FLOOD_MAX_LINES]
    assert frames[0].record == {"kind": "lines", "lines": [str(n) for n in range(1, 5001)]}
    assert frames[0].end == len(b"".join(b"%d\n" % n for n in range(1, 5001)))
    assert framer.feed(b"6001\n", 0.1) == [] and framer.tick(1.0) == [] and framer.close(1.0) == []


def test_framer_floods_on_line_5001_not_5000():
    framer = LineFramer()
    frames = framer.feed(b"line\n" * FLOOD_MAX_LINES, 0.0) + framer.close(0.0)
    assert sum(frame.count for frame in frames) == FLOOD_MAX_LINES
    assert not framer.flooded

    framer = LineFramer()
    frames = framer.feed(b"line\n" * (FLOOD_MAX_LINES + 1) + b"more\n", 0.0)
    assert framer.flooded
    assert sum(frame.count for frame in frames) == FLOOD_MAX_LINES
    assert framer.feed(b"after\n", 0.1) == [] and framer.close(0.2) == []


def test_framer_flood_counts_lines_from_before_a_restart():
    framer = LineFramer(seen=FLOOD_MAX_LINES - 2)
    frames = framer.feed(b"a\nb\nc\n", 0.0)
    assert framer.flooded
    assert lines_of(frames) == ["a", "b"]


def test_framer_reports_dropped_lines_once():
    framer = LineFramer()
    frames = framer.feed(b"1\n2\n3\n", 0.0) + framer.close(0.0)
    framer.drop(frames[0])
    assert framer.dropped_notice() == {"kind": "notice", "text": "dropped 3 lines", "dropped": 3}
    assert framer.dropped_notice() is None


def test_framer_dropped_notice_counts_one_line_singular():
    framer = LineFramer(dropped=1)
    assert framer.dropped_notice()["text"] == "dropped 1 line"


def test_framer_fits_a_line_of_control_characters_under_the_record_size():
    framer = LineFramer()
    frames = framer.feed(b"\x01" * (LINE_MAX_BYTES + 1), 0.0) + framer.close(0.0)
    assert json_size(frames[0].record["lines"][0]) <= BATCH_MAX_BYTES
    assert len(json.dumps(frames[0].record, ensure_ascii=False).encode()) < RECORD_MAX_BYTES


def test_fit_json_keeps_text_that_fits():
    assert fit_json("short", 100) == "short"
    assert json_size(fit_json("\x00" * 1000, 600)) <= 600


def test_cut_utf8_stops_before_a_split_character():
    assert cut_utf8("a\u20ac".encode(), 3) == "a"
    assert cut_utf8(b"abcdef", 4) == "abcd"
    assert cut_utf8(b"\xff\xfe", 10) == "\ufffd\ufffd"
