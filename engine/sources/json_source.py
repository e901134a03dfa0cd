"""json: a URL answering JSON, parsed, with sorted keys so key order never reads as a change."""

from __future__ import annotations

from engine.content import Content, json_content
from engine.errors import SpecError
from engine.sources.base import SourceIO, SourcePolicy, SourceSpec, fetch_whole, parse_url

#: selector is known only to refuse it with a pointer to value_path.
FIELDS = frozenset({"type", "url", "selector"})


def parse(raw: dict, policy: SourcePolicy) -> SourceSpec:
    if "selector" in raw:
        raise SpecError("source.selector works on page sources only; for json use check.value_path.")
    return SourceSpec(type="json", url=parse_url("json", raw))


def read(spec: SourceSpec, io: SourceIO) -> bytes:
    return fetch_whole(io, spec.url, "a JSON document")


def normalize(spec: SourceSpec, body: bytes, max_text_bytes: int) -> Content:
    return json_content(body, max_text_bytes)
