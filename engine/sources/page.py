"""page: an HTML page reduced to its readable text; a CSS selector picks the part to watch."""

from __future__ import annotations

import soupsieve

from engine.content import Content, page_content
from engine.errors import SpecError
from engine.sources.base import SourceIO, SourcePolicy, SourceSpec, parse_url

FIELDS = frozenset({"type", "url", "selector"})


def parse(raw: dict, policy: SourcePolicy) -> SourceSpec:
    selector = raw.get("selector")
    if selector is not None:
        if not isinstance(selector, str) or not selector.strip():
            raise SpecError("source.selector must be a CSS selector such as '#price' or '.status'.")
        try:
            soupsieve.compile(selector)
        except Exception as exc:  # soupsieve raises its own SelectorSyntaxError and ValueError
            raise SpecError(f"source.selector {selector!r} is not a valid CSS selector "
                            f"({str(exc).splitlines()[0]}).") from None
    return SourceSpec(type="page", url=parse_url("page", raw), selector=selector or None)


def read(spec: SourceSpec, io: SourceIO) -> bytes:
    return io.fetcher.get(spec.url).body


def normalize(spec: SourceSpec, body: bytes, max_text_bytes: int) -> Content:
    return page_content(body, spec.selector, max_text_bytes)
