"""A stream's output bytes as numbered-record bodies: lines, batches, the flood guard. Pure: no I/O, `now` passed in.

A line ends at `\\n` (a trailing `\\r` goes too). A run of 16 KiB without one is truncated: its first 16 KiB are the
line, marked as truncated, and the rest up to the next newline is discarded (the line counts once toward the flood
guard). The lines read within 200 ms of a batch's first make one `lines` record, however many: it shows them up to
256 KiB of JSON (at most FLOOD_MAX_LINES) and counts the rest in `more`, so nothing is lost without a word. The
5,001st line trips the flood guard. Each frame carries the output offset it accounts for, so the caller stores a
record and advances its read offset in one transaction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

#: a run of this many bytes without a newline is truncated to them; the rest of that line is discarded
LINE_MAX_BYTES = 16 * 1024
#: a batch closes when this long passes with no new line
BATCH_GAP_SECONDS = 0.2
#: ... and at the latest when its first line is this old: a batch is the lines read within 200 ms of its first,
#: so no line waits longer than the window (and the tail interval) before it is sent, however busy the watcher
BATCH_MAX_SECONDS = 0.2
#: lines a watch may print; the next one stops it
FLOOD_MAX_LINES = 5000
#: the largest record (its JSON): the server's MAX_RECORD_BYTES and the uploader's request batch
RECORD_MAX_BYTES = 256 * 1024
#: a record shows its batch's lines up to this many bytes of JSON (the rest of the record's room is for its keys) ...
BATCH_MAX_BYTES = RECORD_MAX_BYTES - 1024
#: ... and up to this many lines; the batch's later lines are counted in the record's `more`
BATCH_MAX_LINES = FLOOD_MAX_LINES
#: the notice sent when the flood guard trips
FLOOD_TEXT = f"the flood guard stopped the watch at {FLOOD_MAX_LINES:,} lines"
#: room kept in a batch for a truncated line's mark
_MARK_BYTES = 64


def truncated_mark(length: int, known: bool) -> str:
    """What ends a truncated line: the line's length in bytes, or its length so far when its batch was sent before
    its newline came."""
    return f" … [line truncated: {length:,} bytes{'' if known else ' so far'}]"


@dataclass(frozen=True)
class Frame:
    """One `lines` record, the output offset just past its last line, and the lines counted so far."""

    record: dict
    end: int
    seen: int

    @property
    def count(self) -> int:
        """How many lines the record accounts for: those it shows and those it counts in `more`."""
        return len(self.record["lines"]) + self.record.get("more", 0)


class LineFramer:
    """Turns output bytes, as they arrive, into `lines` frames (see the module docstring)."""

    def __init__(self, offset: int = 0, seen: int = 0, dropped: int = 0):
        self.offset = offset  # output offset just past the last line handed out in a frame
        self.seen = seen  # lines counted toward the flood guard, this framer's and earlier ones
        self.dropped = dropped  # lines dropped (spool full) and not yet reported in a notice
        self.flooded = False
        self._buffer = bytearray()
        self._buffer_start = offset
        self._batch: list = []
        self._batch_bytes = 0
        self._more = 0  # the open batch's lines past what its record shows
        self._batch_end = offset
        self._first = 0.0
        self._last = 0.0
        self._discarding = False  # inside a truncated line: bytes are dropped up to its newline
        self._cut_length = 0  # the truncated line's bytes so far
        self._cut_at: Optional[int] = None  # its index in the open batch, while its mark is not written

    def resume(self, previous: bytes) -> None:
        """Starting at `offset` in output read before: `previous` is the byte before it. Anything but a newline
        means the last frame ended at a truncation, so the rest of that line is discarded, not framed again."""
        if self.offset and previous not in (b"", b"\n"):
            self._discarding = True

    def feed(self, data: bytes, now: float) -> list:
        """Take output bytes that arrived at `now`; return the frames that closed."""
        if self.flooded:
            return []
        frames = self.tick(now)
        self._buffer += data
        pos = 0
        while not self.flooded:
            if self._discarding:
                pos = self._discard(pos)
                if self._discarding:
                    break
                continue
            line_end, next_pos = _next_line(self._buffer, pos)
            if next_pos is None:
                break
            cut = line_end == next_pos  # no newline within 16 KiB
            frames += self._add(self._buffer[pos:line_end], self._buffer_start + next_pos, now, cut)
            if cut and not self.flooded:
                self._discarding, self._cut_length = True, next_pos - pos
            pos = next_pos
        del self._buffer[:pos]
        self._buffer_start += pos
        return frames

    def tick(self, now: float) -> list:
        """Close the batch if its time is up."""
        deadline = self.deadline()
        if deadline is not None and now >= deadline:
            return self._flush()
        return []

    def deadline(self) -> Optional[float]:
        """When the open batch closes if no line comes, or None without one."""
        if not self._batch and not self._more:
            return None
        return min(self._last + BATCH_GAP_SECONDS, self._first + BATCH_MAX_SECONDS)

    def close(self, now: float) -> list:
        """The output has ended: the partial last line (if any) and the open batch."""
        frames = []
        if self._discarding:
            self._end_cut(self._buffer_start + len(self._buffer))
        elif self._buffer and not self.flooded:
            end = self._buffer_start + len(self._buffer)
            frames += self._add(bytes(self._buffer), end, now)
        self._buffer.clear()
        return frames + self._flush()

    def drop(self, frame: Frame) -> None:
        """Account a frame that could not be kept (the spool is full); a later notice reports it."""
        self.dropped += frame.count

    def dropped_notice(self) -> Optional[dict]:
        """The `dropped N lines` notice owed, once, or None."""
        if not self.dropped:
            return None
        count, self.dropped = self.dropped, 0
        return dropped_notice(count)

    def _add(self, raw: bytes, end: int, now: float, cut: bool = False) -> list:
        if self.seen >= FLOOD_MAX_LINES:
            self.flooded = True
            return self._flush()
        if not self._batch and not self._more:
            self._first = now
        self.seen += 1
        self._batch_end, self._last = end, now
        line = fit_json(bytes(raw).decode("utf-8", "replace"), BATCH_MAX_BYTES - _MARK_BYTES)
        size = json_size(line) + 2 + (_MARK_BYTES if cut else 0)  # 2: the ", " before it in the list
        if self._more or len(self._batch) >= BATCH_MAX_LINES or self._batch_bytes + size > BATCH_MAX_BYTES:
            self._more += 1  # the record shows its batch's first lines, and counts the rest
            return []
        if cut:
            self._cut_at = len(self._batch)
        self._batch.append(line)
        self._batch_bytes += size
        return []

    def _discard(self, pos: int) -> int:
        """Drop the truncated line's bytes from `pos`; where its newline ends it, or the end of the buffer."""
        newline = self._buffer.find(b"\n", pos)
        if newline < 0:
            self._cut_length += len(self._buffer) - pos
            return len(self._buffer)
        self._cut_length += newline - pos - (newline > pos and self._buffer[newline - 1] == 0x0D)
        self._end_cut(self._buffer_start + newline + 1)
        return newline + 1

    def _end_cut(self, end: int) -> None:
        """The truncated line is over at output offset `end`: its mark has its length; its batch accounts for it."""
        self._discarding = False
        if self._batch or self._more:
            self._batch_end = end
        self._mark(known=True)

    def _mark(self, known: bool) -> None:
        if self._cut_at is not None:
            self._batch[self._cut_at] += truncated_mark(self._cut_length, known)
            self._cut_at = None

    def _flush(self) -> list:
        if not self._batch and not self._more:
            return []
        self._mark(known=False)
        record = {"kind": "lines", "lines": self._batch}
        if self._more:
            record["more"] = self._more
        frame = Frame(record, self._batch_end, self.seen)
        self.offset = self._batch_end
        self._batch, self._batch_bytes, self._more = [], 0, 0
        return [frame]


def dropped_notice(count: int, why: str = "") -> dict:
    """The notice for `count` lines that were dropped (`why`, in parentheses, when given)."""
    text = f"dropped {count:,} line{'' if count == 1 else 's'}" + (f" ({why})" if why else "")
    return {"kind": "notice", "text": text, "dropped": count}


def _next_line(buffer: bytearray, pos: int) -> tuple:
    """(end of the line's text, start of what follows) for the line at `pos`, or (pos, None) if it is not done."""
    newline = buffer.find(b"\n", pos, pos + LINE_MAX_BYTES + 1)
    if newline >= 0:
        text_end = newline - 1 if newline > pos and buffer[newline - 1] == 0x0D else newline
        return text_end, newline + 1
    if len(buffer) - pos > LINE_MAX_BYTES:
        cut = utf8_boundary(buffer, pos + LINE_MAX_BYTES, floor=pos)
        return cut, cut
    return pos, None


def utf8_boundary(data, cut: int, floor: int = 0) -> int:
    """`cut` moved back (at most 3 bytes, not below `floor + 1`) so it does not split a UTF-8 character."""
    for back in range(4):
        at = cut - back
        if at <= floor:
            break
        if at >= len(data) or data[at] & 0xC0 != 0x80:
            return at
    return cut


def cut_utf8(data: bytes, limit: int) -> str:
    """The first `limit` bytes of `data` (not splitting a character) decoded as UTF-8, invalid bytes replaced."""
    if len(data) > limit:
        data = data[:utf8_boundary(data, limit)]
    return data.decode("utf-8", "replace")


def json_size(text: str) -> int:
    """Bytes `text` takes as a JSON string in a request body."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8"))


def fit_json(text: str, limit: int) -> str:
    """`text`, shortened from its end to at most `limit` bytes as JSON."""
    # only control characters (\u00XX) and replaced bytes can make a 16 KiB line bigger than a record may be
    size = json_size(text)
    while size > limit:
        text = text[:max(0, len(text) * limit // size - 1)]
        size = json_size(text)
    return text
