"""What a monitor can watch, one module per kind. Each has FIELDS, parse(raw, policy) -> SourceSpec,
read(spec, io) -> bytes and normalize(spec, body, max_text_bytes) -> Content. A check reads through
read_checked, which makes an HTTP source's GET conditional."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from urllib.parse import urlsplit

from engine import placeholders
from engine.content import Content
from engine.errors import SpecError
from engine.sources import (
    approval, command, document, feed, file, ingest, json_source, metric, page, time_source, tool, webhook,
)
from engine.http import Validators
from engine.placeholders import has_placeholders
from engine.sources.base import ConditionalFetcher, Fetched, SourceIO, SourcePolicy, SourceSpec

#: source type -> the module that reads and normalizes it
KINDS = {"page": page, "json": json_source, "feed": feed, "file": file, "metric": metric, "webhook": webhook,
         "approval": approval, "command": command, "time": time_source, "document": document, "ingest": ingest, "tool": tool}
#: sources read from the documents Vigil keeps, checked on every write of their document
DOCUMENT_SOURCES = ("document", "ingest")
#: seed 001's watches: three evaluation failures in a row end them in `error` (seed 000's pause them)
ERROR_PATH_SOURCES = (*DOCUMENT_SOURCES, "tool")
#: seed 001's watches, the only ones its daily fire cap counts and ends (MONITOR_MAX_FIRES_PER_CONVERSATION_DAY);
#: seed 000's sources keep its hourly pause alone, and seed 002's streams neither (issue 27)
DAILY_CAP_SOURCES = ("document", "time", "tool")
SOURCE_TYPES = tuple(KINDS)
#: the fields read() fills placeholders in; the url's values are percent-encoded
PLACEHOLDER_FIELDS = ("url", "path", "command")

__all__ = ["DAILY_CAP_SOURCES", "DOCUMENT_SOURCES", "ERROR_PATH_SOURCES", "KINDS", "SOURCE_TYPES", "Fetched", "SourceIO", "SourcePolicy", "SourceSpec",
           "fill_placeholders", "normalize", "parse_source", "read", "read_checked"]


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
        article = "an" if kind[0] in "aeiou" else "a"
        raise SpecError(f"source has an unknown field '{extra[0]}'; {article} {kind} source takes "
                        f"{', '.join(sorted(allowed))}.")
    with_placeholders = _check_placeholders(raw)
    if not with_placeholders:
        return KINDS[kind].parse(raw, policy)
    sample = {**raw, **{name: _fill(name, raw[name], placeholders.sample_values()) for name in with_placeholders}}
    spec = KINDS[kind].parse(sample, policy)  # validated as it will be read, stored as written
    return replace(spec, **{name: raw[name].strip() for name in with_placeholders})


def read(spec: SourceSpec, io: SourceIO, placeholders: dict | None = None) -> bytes:
    """The raw body, fetched or read, with placeholders filled in; raises FetchError.

    Without `placeholders` every one is the current time (the first check, when a monitor is created).
    """
    return KINDS[spec.type].read(fill_placeholders(spec, placeholders), io)


def read_checked(spec: SourceSpec, io: SourceIO, placeholders: dict | None = None,
                 validators: Validators | None = None) -> Fetched:
    """read(), with the source's GET (page, json, feed, metric) asking with `validators`; the answer says
    whether it was a 304 and which validators to keep. A url with placeholders is another url from one check
    to the next, so it neither sends nor keeps any."""
    if spec.render or (spec.url and has_placeholders(spec.url)):  # a browser sends no validators either
        return Fetched(read(spec, io, placeholders))
    conditional = ConditionalFetcher(io.fetcher, validators)
    body = read(spec, SourceIO(conditional, io.policy), placeholders)  # not dataclasses.replace: ~4 µs a check
    answer = conditional.answer
    if answer is None:  # not read through HTTP (a file)
        return Fetched(body)
    return Fetched(body, answer.validators, answer.not_modified)


def normalize(spec: SourceSpec, body: bytes, max_text_bytes: int) -> Content:
    """Readable text (and parsed data) from the body; raises ContentError."""
    return KINDS[spec.type].normalize(spec, body, max_text_bytes)


def fill_placeholders(spec: SourceSpec, values: dict | None) -> SourceSpec:
    """The spec with every placeholder in its string fields filled in."""
    # parse_source refuses placeholders anywhere else, so only these fields are looked at
    names = [name for name in PLACEHOLDER_FIELDS if isinstance(value := getattr(spec, name, None), str)
             and placeholders.has_placeholders(value)]
    if not names:
        return spec
    if values is None:
        values = placeholders.values(datetime.now(timezone.utc))
    return replace(spec, **{name: _fill(name, getattr(spec, name), values) for name in names})


def _fill(name: str, text: str, values: dict) -> str:
    return placeholders.fill(text, values, encode=name == "url")


def _check_placeholders(raw: dict) -> list[str]:
    """The fields that hold placeholders; raises SpecError for an unknown one or one in the wrong field."""
    found = []
    for name, value in raw.items():
        if not isinstance(value, str):
            continue
        bad = placeholders.unknown(value)
        if bad:
            raise SpecError(f"source.{name} has an unknown placeholder {{{{{bad[0]}}}}}; "
                            f"the placeholders are {placeholders.listed()}.")
        if placeholders.has_placeholders(value):
            found.append(name)
    for name in found:
        if name not in PLACEHOLDER_FIELDS:
            raise SpecError(f"Placeholders are filled in source.url, source.path and source.command only; "
                            f"take them out of source.{name}.")
        if name == "url" and placeholders.has_placeholders(urlsplit(raw[name].strip()).netloc):
            raise SpecError("A placeholder may sit in the url's path or query, not in its host.")
    return found
