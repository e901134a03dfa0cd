"""approval: a person decides on a public page; the decision is the event. No check applies."""

from __future__ import annotations

from engine.errors import SpecError
from engine.http import FetchError
from engine.sources.base import SourceIO, SourcePolicy, SourceSpec

FIELDS = frozenset({"type", "question", "details", "options", "allow_comment"})
DEFAULT_OPTIONS = ("Approve", "Reject")
MAX_QUESTION, MAX_DETAILS, MAX_LABEL = 500, 20_000, 40


def parse(raw: dict, policy: SourcePolicy) -> SourceSpec:
    question = raw.get("question")
    if not isinstance(question, str) or not question.strip() or len(question) > MAX_QUESTION:
        raise SpecError(f"source.question is required: the question the person answers, at most {MAX_QUESTION} characters.")
    details = raw.get("details", "")
    if not isinstance(details, str) or len(details) > MAX_DETAILS:
        raise SpecError(f"source.details must be text of at most {MAX_DETAILS} characters (the draft or plan to review).")
    allow_comment = raw.get("allow_comment", True)
    if not isinstance(allow_comment, bool):
        raise SpecError("source.allow_comment must be true or false.")
    return SourceSpec(type="approval", question=question.strip(), details=details,
                      options=_options(raw.get("options")), allow_comment=allow_comment)


def _options(raw: object) -> tuple[str, ...]:
    if raw is None:
        return DEFAULT_OPTIONS
    labels = [label.strip() for label in raw] if isinstance(raw, list) and all(
        isinstance(label, str) for label in raw) else None
    if not labels or not 2 <= len(labels) <= 6 or any(not label or len(label) > MAX_LABEL for label in labels):
        raise SpecError(f"source.options must be 2 to 6 button labels of at most {MAX_LABEL} characters, "
                        'e.g. ["Approve", "Reject"].')
    if len({label.lower() for label in labels}) != len(labels):
        raise SpecError("source.options must be distinct labels.")
    return tuple(labels)


def read(spec: SourceSpec, io: SourceIO) -> bytes:
    raise FetchError("An approval is not fetched; the decision arrives from its page.")


def normalize(spec, body: bytes, max_text_bytes: int):
    raise NotImplementedError("an approval's decision is the event itself")
