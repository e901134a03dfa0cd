"""The judge step of a match: which catalog model, the call, its tokens, and what the match becomes."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

import requests

from adapters.metrics import count_judge_call
from engine.addresses import Own
from engine.checks import Verdict
from engine.crypto import DecryptError, Keyring
from engine.egress import Egress
from engine.judge import JudgeError, JudgeModel, judge
from engine.judge_transport import guarded_session
from engine.pipeline import CHANGED, FIRED, Outcome
from models.catalog import find_entry
from models.tables import Monitor, TokenUsage

DEFAULT_MODEL = "default"


@dataclass(frozen=True)
class JudgePolicy:
    keyring: Keyring
    #: the operator's "default" (JUDGE_* settings), for an account whose catalog has none; trusted as configured
    fallback: JudgeModel | None = None
    failures_limit: int = 3
    token_budget: int = 200_000
    #: JUDGE_ALLOW_PRIVATE_URLS: an account's model may be on loopback or the local network
    allow_private: bool = False
    #: Vigil itself, which an account's model may never be (engine/addresses.Own)
    own: Own | None = None
    #: the operator's egress proxy (OUTBOUND_PROXY, NO_PROXY) an account's model is called through
    egress: Egress | None = None


@dataclass(frozen=True)
class JudgeStep:
    """What the judge made of a match: the outcome to record, and how."""
    outcome: Outcome
    unchecked: bool = False
    failure: str = ""        # set when the call failed and the match waits for the next check
    over_budget: bool = False


def resolve_model(user_id: int, name: str, policy: JudgePolicy) -> JudgeModel | None:
    """The account's catalog entry named (or "default"), with its key decrypted; for "default" without one, the
    operator's; None when there is none. Another account's entries are never looked at."""
    name = name or DEFAULT_MODEL
    entry = find_entry(user_id, name)
    if entry is None:
        return policy.fallback if name == DEFAULT_MODEL else None
    try:
        key = policy.keyring.decrypt(entry.api_key_encrypted) if entry.api_key_encrypted else ""
    except DecryptError:
        return None
    return JudgeModel(name=entry.name, base_url=entry.base_url, api_key=key, model=entry.model,
                      api_version=entry.api_version or None)


def judge_match(monitor: Monitor, outcome: Outcome, session: requests.Session, policy: JudgePolicy,
                now: datetime) -> JudgeStep:
    """Ask the judge whether the monitor's condition holds for a match; records the tokens it spent. `session`
    calls the operator's default; an account's own model goes through the SSRF-guarded session."""
    model = resolve_model(monitor.user_id, monitor.judge_model, policy)
    if model is None:
        return JudgeStep(outcome, unchecked=True)
    if model is not policy.fallback:
        session = guarded_session(policy.allow_private, policy.own, policy.egress)
    try:
        verdict = judge(session, model, monitor.description, monitor.condition, outcome.text)
    except JudgeError as exc:
        spent = _record_usage(monitor, model, exc.prompt_tokens, exc.completion_tokens, now)
        count_judge_call("refused" if exc.refused else "error", exc.prompt_tokens, exc.completion_tokens)
        if exc.refused or monitor.judge_failures + 1 >= policy.failures_limit:
            return JudgeStep(outcome, unchecked=True, over_budget=spent > policy.token_budget)
        return JudgeStep(outcome, failure=exc.message, over_budget=spent > policy.token_budget)
    spent = _record_usage(monitor, model, verdict.prompt_tokens, verdict.completion_tokens, now)
    count_judge_call("match" if verdict.match else "no_match", verdict.prompt_tokens, verdict.completion_tokens)
    said = {"match": verdict.match, "summary": verdict.summary, "model": model.name,
            "tokens": verdict.prompt_tokens + verdict.completion_tokens}
    return JudgeStep(_judged(outcome, verdict.match, verdict.summary, verdict.key, said),
                     over_budget=spent > policy.token_budget)


def _judged(outcome: Outcome, match: bool, summary: str, key: str | None, said: dict) -> Outcome:
    found = f"{summary}\n{outcome.verdict.found}".strip()
    fact = key or outcome.verdict.fact
    verdict = Verdict(fired=match, summary=outcome.verdict.summary, found=found if match else "",
                      fact=fact, state=outcome.verdict.state)
    return replace(outcome, kind=FIRED if match else CHANGED, verdict=verdict, judged=said)


def _record_usage(monitor: Monitor, model: JudgeModel, prompt: int, completion: int, now: datetime) -> int:
    """Bill the tokens to the monitor's owner; returns the monitor's total so far."""
    used = prompt + completion
    TokenUsage.create(user=monitor.user_id, monitor=monitor.id, source="monitor_judge", model_name=model.name,
                      prompt_tokens=prompt, completion_tokens=completion, created_at=now)
    Monitor.update(judge_tokens=Monitor.judge_tokens + used).where(Monitor.id == monitor.id).execute()
    return monitor.judge_tokens + used
