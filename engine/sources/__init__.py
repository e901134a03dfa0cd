"""What a monitor can watch, one module per kind. Each has FIELDS, parse(raw, policy) -> SourceSpec,
read(spec, io) -> bytes and normalize(spec, body, max_text_bytes) -> Content."""

from __future__ import annotations

from engine.content import Content
from engine.errors import SpecError
from engine.sources import json_source, page
from engine.sources.base import SourceIO, SourcePolicy, SourceSpec

#: source type -> the module that reads and normalizes it
KINDS = {"page": page, "json": json_source}
SOURCE_TYPES = tuple(KINDS)

__all__ = ["KINDS", "SOURCE_TYPES", "SourceIO", "SourcePolicy", "SourceSpec", "normalize", "parse_source", "read"]


def parse_source(raw: object, policy: SourcePolicy = SourcePolicy()) -> SourceSpec:
    """A source from monitor_create's arguments; raises SpecError."""
    if not isinstance(raw, dict):
        raise SpecError('source is required: an object like {"type": "page", "url": "https://…"}.')
    kind = raw.get("type")
    if kind not in KINDS:
        raise SpecError(f"source.type must be one of {', '.join(SOURCE_TYPES)} (got {kind!r}).")
    allowed = KINDS[kind].FIELDS
    extra = sorted(set(raw) - allowed)
    if extra:
        raise SpecError(f"source has an unknown field '{extra[0]}'; a {kind} source takes {', '.join(sorted(allowed))}.")
    return KINDS[kind].parse(raw, policy)


def read(spec: SourceSpec, io: SourceIO) -> bytes:
    """The raw body, fetched or read; raises FetchError."""
    return KINDS[spec.type].read(spec, io)


def normalize(spec: SourceSpec, body: bytes, max_text_bytes: int) -> Content:
    """Readable text (and parsed data) from the body; raises ContentError."""
    return KINDS[spec.type].normalize(spec, body, max_text_bytes)
