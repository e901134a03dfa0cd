"""The judge step of a match: which catalog model, the call, its tokens, and what the match becomes."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

import requests

from adapters.metrics import count_judge_call
from engine.checks import Verdict
from engine.crypto import DecryptError, Keyring
from engine.judge import JudgeError, JudgeModel, judge
from engine.pipeline import CHANGED, FIRED, Outcome
from models.tables import JudgeModel as CatalogEntry
from models.tables import Monitor, TokenUsage

DEFAULT_MODEL = "default"


@dataclass(frozen=True)
class JudgePolicy:
    keyring: Keyring
    fallback: JudgeModel | None = None   # the settings' "default" entry when the catalog has none
    failures_limit: int = 3
    token_budget: int = 200_000


@dataclass(frozen=True)
class JudgeStep:
    """What the judge made of a match: the outcome to record, and how."""
    outcome: Outcome
    unchecked: bool = False
    failure: str = ""        # set when the call failed and the match waits for the next check
    over_budget: bool = False


def resolve_model(name: str, policy: JudgePolicy) -> JudgeModel | None:
    """The catalog entry named (or "default"), with its key decrypted; None when there is none."""
    name = name or DEFAULT_MODEL
    entry = CatalogEntry.get_or_none(CatalogEntry.name == name)
    if entry is None:
        return policy.fallback if name == DEFAULT_MODEL else None
    try:
        key = policy.keyring.decrypt(entry.api_key_encrypted)
    except DecryptError:
        return None
    return JudgeModel(name=entry.name, base_url=entry.base_url, api_key=key, model=entry.model,
                      api_version=entry.api_version or None)


def judge_match(monitor: Monitor, outcome: Outcome, session: requests.Session, policy: JudgePolicy,
                now: datetime) -> JudgeStep:
    """Ask the judge whether the monitor's condition holds for a match; records the tokens it spent."""
    model = resolve_model(monitor.judge_model, policy)
    if model is None:
        return JudgeStep(outcome, unchecked=True)
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
