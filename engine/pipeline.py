"""One polled check: fetch -> hash the raw body -> normalize -> hash -> check.

The raw body is hashed before anything is parsed, so an unchanged source costs a GET and a sha256; one whose
server gave validators (ETag, Last-Modified) is asked with them, and its 304 costs the GET alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from engine.checks import CheckSpec, Verdict, baseline, evaluate, hold
from engine.content import Content, raw_digest
from engine.errors import ContentError
from engine.http import FetchError, Fetcher, Validators
from engine.sources import SourceIO, SourceSpec, normalize, read_checked

QUIET, CHANGED, FIRED, ERROR, BASELINE = "quiet", "changed", "fired", "error", "baseline"


@dataclass(frozen=True)
class Prior:
    """What the monitor stored after its last check; state None means no baseline yet.

    `state` may be a function returning it, so an unchanged source never pays for loading it.
    """
    raw_hash: str | None = None
    content_hash: str | None = None
    state: dict | Callable[[], dict] | None = None
    #: the validators stored with raw_hash (of the same body), sent to ask whether it changed
    validators: Validators | None = None

    def stored_state(self) -> dict | None:
        return self.state() if callable(self.state) else self.state


@dataclass(frozen=True)
class Outcome:
    kind: str
    raw_hash: str = ""
    content_hash: str = ""
    verdict: Verdict | None = None
    error: str = ""
    unreachable: bool = False
    #: the normalized text, for the judge, when the content changed
    text: str = ""
    #: what the judge said of a match: {"match", "summary", "tokens", "model"} (the monitor page shows it)
    judged: dict | None = None
    #: the validators of the body read, to store with its raw_hash; None when the source gave none to keep
    validators: Validators | None = None
    #: quiet because the server answered 304 to the stored validators: nothing was read or hashed
    not_modified: bool = False
    #: a JPEG of what a page rendered in a browser showed, taken on its baseline and fires (models/screenshots.py)
    picture: bytes | None = None


def run_check(io: SourceIO | Fetcher, source: SourceSpec, check: CheckSpec, prior: Prior,
              max_text_bytes: int, now: datetime | None = None, placeholders: dict | None = None) -> Outcome:
    """The outcome of checking `source` once against what was stored last time."""
    validators = _asking_with(check, prior)
    try:
        fetched = read_checked(source, io if isinstance(io, SourceIO) else SourceIO(io), placeholders, validators)
    except FetchError as exc:
        return Outcome(ERROR, error=exc.message, unreachable=exc.unreachable)
    if fetched.not_modified:  # the very body raw_hash was taken from: what check_body does when the hash is equal
        return Outcome(QUIET, raw_hash=prior.raw_hash, content_hash=prior.content_hash or "",
                       validators=validators, not_modified=True)
    outcome = check_body(source, check, prior, fetched.body, max_text_bytes, now)
    # no validators (None, or an answer that carried none) is kept as None: dataclasses.replace costs a few µs
    return replace(outcome, validators=fetched.validators) if fetched.validators else outcome


def _asking_with(check: CheckSpec, prior: Prior) -> Validators | None:
    """The validators to send: only those of a baseline's body, and none while check_body must evaluate even an
    unchanged body (a check.for count under way), since a 304 brings no body."""
    if prior.state is None or not prior.raw_hash or not prior.validators:
        return None
    return None if hold.pending(check, prior.stored_state() if check.hold_for > 1 else None) else prior.validators


def check_body(source: SourceSpec, check: CheckSpec, prior: Prior, body: bytes, max_text_bytes: int,
               now: datetime | None = None) -> Outcome:
    """The pipeline from the hash on, for a body read elsewhere (a command's result sent by its device)."""
    raw_hash = raw_digest(body)
    # issue 18: a check.for count under way is evaluated even on unchanged content, so a value that holds and stays
    # the same still counts; the state is read only for a check with `for` above 1 (engine/checks/hold.py)
    counting = prior.state is not None and hold.pending(check, prior.stored_state() if check.hold_for > 1 else None)
    if prior.state is not None and raw_hash == prior.raw_hash and not counting:
        return Outcome(QUIET, raw_hash=raw_hash, content_hash=prior.content_hash or "")
    try:
        content = normalize(source, body, max_text_bytes)
        if prior.state is not None and content.digest == prior.content_hash and not counting:
            return Outcome(QUIET, raw_hash=raw_hash, content_hash=content.digest)
        verdict = judge_content(check, content, prior.stored_state(), now)
    except ContentError as exc:
        return Outcome(ERROR, raw_hash=raw_hash, error=_sentence(str(exc)))
    kind = BASELINE if prior.state is None else FIRED if verdict.fired else CHANGED
    return Outcome(kind, raw_hash=raw_hash, content_hash=content.digest, verdict=verdict, text=content.text)


def judge_content(check: CheckSpec, content: Content, state: dict | None, now: datetime | None = None) -> Verdict:
    return baseline(check, content, now) if state is None else evaluate(check, content, state, now)


def _sentence(text: str) -> str:
    text = text.strip()
    return (text[:1].upper() + text[1:]).rstrip(".") + "."
