"""webhook: events arrive at a trigger link instead of being fetched; each delivered body is the content."""

from __future__ import annotations

from engine.content import Content, json_content, tidy
from engine.errors import ContentError, SpecError
from engine.expect import parse_expect
from engine.http import FetchError
from engine.sources.base import SourceIO, SourcePolicy, SourceSpec

FIELDS = frozenset({"type", "signature", "max_hits", "expect"})
SIGNATURES = ("none", "github", "standard_webhooks", "hmac_sha256")
DEFAULT_MAX_HITS = 1000


def parse(raw: dict, policy: SourcePolicy) -> SourceSpec:
    signature = raw.get("signature", "none")
    if signature not in SIGNATURES:
        raise SpecError(f"source.signature must be one of {', '.join(SIGNATURES)} (got {signature!r}); use none "
                        "unless the sender signs natively.")
    hits = raw.get("max_hits", DEFAULT_MAX_HITS)
    if isinstance(hits, bool) or not isinstance(hits, int) or hits < 1:
        raise SpecError(f"source.max_hits must be a whole number of at least 1 (got {hits!r}).")
    expect = raw.get("expect")
    if expect is not None:
        parse_expect(expect)  # refused here in one sentence; kept as the agent gave it
    return SourceSpec(type="webhook", signature=signature, max_hits=hits, expect=expect)


def read(spec: SourceSpec, io: SourceIO) -> bytes:
    raise FetchError("A webhook is not fetched; its deliveries arrive at the trigger link.")


def normalize(spec: SourceSpec, body: bytes, max_text_bytes: int) -> Content:
    """A delivered body: JSON when it parses as JSON (NaN, too deep and the like don't), else its text."""
    text = body.decode("utf-8")
    if not text.strip():
        return Content(text="(empty body)", data=None)
    try:
        return json_content(body, max_text_bytes)
    except ContentError:
        return Content(text=tidy(text)[:max_text_bytes])
