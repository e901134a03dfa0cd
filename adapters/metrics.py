"""Vigil's Prometheus counters, which every process adds to, and the text /metrics serves.

With PROMETHEUS_MULTIPROC_DIR set before this is imported (adapters/metrics_dir.py) each process writes its
values to files of its own there and `exposition()` adds up the whole directory; without it (tests, a script)
the values stay in this process and are served from it. docs/operations.md lists the metrics.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import AsyncIterator

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.values import ValueClass

from adapters.metrics_dir import ENV, locked

prometheus_client.disable_created_metrics()  # no *_created series: multiprocess mode has none either

#: the check outcomes (engine.pipeline's kinds; an unreachable error is its own)
OUTCOMES = ("quiet", "changed", "fired", "baseline", "error", "unreachable")

CHECKS = Counter("vigil_checks", "Checks the worker recorded, by outcome (quiet, changed, fired, baseline, error, "
                 "unreachable).", ["outcome"])
WAKES = Counter("vigil_wakes", "Wake messages written, by the wake's source (monitor, trigger, approval, …).",
                ["source"])
JUDGE_CALLS = Counter("vigil_judge_calls", "Calls to a judge model, by result (match, no_match, refused, error).",
                      ["result"])
JUDGE_TOKENS = Counter("vigil_judge_tokens", "Tokens the judge calls spent, by kind (prompt, completion).", ["kind"])
TRIGGER_DELIVERIES = Counter("vigil_trigger_deliveries", "POSTs to trigger links, by the status answered (202 "
                             "accepted; 400, 401, 404, 413, 429 refused).", ["status"])
WAKE_PUSHES = Counter("vigil_wake_pushes", "Wake push attempts, by what became of the push (delivered, retry, "
                      "give_up, disable).", ["result"])
SSE_CLIENTS = Gauge("vigil_sse_clients", "Event streams (SSE) open now.", multiprocess_mode="livesum")

_CHECK_OUTCOMES = {outcome: CHECKS.labels(outcome) for outcome in OUTCOMES}  # a quiet check skips labels()


def count_check(kind: str, unreachable: bool = False, times: int = 1) -> None:
    kind = "unreachable" if unreachable else kind
    (_CHECK_OUTCOMES.get(kind) or CHECKS.labels(kind)).inc(times)


def count_wakes(messages) -> None:
    """One per wake message written (None entries are skipped)."""
    for message in messages:
        if message is not None:
            WAKES.labels(((message.metadata or {}).get("wake") or {}).get("source") or "other").inc()


def count_judge_call(result: str, prompt_tokens: int, completion_tokens: int) -> None:
    JUDGE_CALLS.labels(result).inc()
    JUDGE_TOKENS.labels("prompt").inc(max(prompt_tokens or 0, 0))
    JUDGE_TOKENS.labels("completion").inc(max(completion_tokens or 0, 0))


async def counting_clients(stream: AsyncIterator) -> AsyncIterator:
    """`stream`, counted in vigil_sse_clients while it is open."""
    SSE_CLIENTS.inc()
    try:
        async for item in stream:
            yield item
    finally:
        SSE_CLIENTS.dec()
        await stream.aclose()


class _Directory(MultiProcessCollector):
    """The directory's files added up, under the lock the tidying takes."""

    def collect(self):
        with locked(self._path, fcntl.LOCK_SH):
            return super().collect()


class _Process:
    """This process's own registry (not multiprocess mode)."""

    def collect(self):
        return prometheus_client.REGISTRY.collect()


def multiprocess() -> bool:
    return bool(getattr(ValueClass, "_multiprocess", False))


def exposition(*collectors) -> bytes:
    """The counters (of the whole directory, or of this process) and `collectors`' figures, in the text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Directory(None, os.environ[ENV]) if multiprocess() else _Process())
    for collector in collectors:
        registry.register(collector)
    return generate_latest(registry)

