#!/usr/bin/env python
"""Every benchmark in turn, then one Markdown table of their headline figures: bench/results/summary.md.

    .venv/bin/python bench/run_all.py [--only quiet_checks,memory] [--skip judge_calls]

Each benchmark runs as its own process with its default sizes (~25 minutes in all) and writes its full
report to bench/results/<name>.md and its headline figures to bench/results/<name>.json; this collects the
figures. A benchmark that fails is reported as failed and the others still run. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import PYTHON, RESULTS, failed, hold_signals, prepare, publish, versions  # noqa: E402

#: in the order they run: the cheap ones first, so a broken set-up shows early
BENCHMARKS = ("judge_calls", "fetch_cost", "quiet_checks", "quiet_checks_shared", "trigger_ingest", "wake_push",
              "wake_push_coalesce", "dry_run", "stream_lines", "stream_lines_embedded", "time_and_documents",
              "tool_polls", "long_polls", "idle", "web_under_load", "scheduler_cost", "expect_cost", "browser_checks", "memory")
#: a benchmark that is a case of another's file: (its file, its arguments)
CASES = {"wake_push_coalesce": ("wake_push", ["--coalesce"]), "quiet_checks_shared": ("quiet_checks", ["--shared"]),
         "stream_lines_embedded": ("stream_lines", ["--embedded"])}


def run_one(name: str) -> tuple[int, float]:
    """Run bench/<name>.py to its end; (exit code, seconds). On Ctrl-C or SIGTERM it is let finish its clean-up."""
    (RESULTS / f"{name}.json").unlink(missing_ok=True)  # a failed run must not report the last run's figures
    print(f"\n=== {name} ===", flush=True)
    started = time.monotonic()
    script, arguments = CASES.get(name, (name, []))
    proc = subprocess.Popen([PYTHON, str(ROOT / "bench" / f"{script}.py"), *arguments], cwd=ROOT)
    try:
        code = proc.wait()
    except KeyboardInterrupt:
        hold_signals()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # a Ctrl-C reached it already; a SIGTERM to this process did not
        proc.wait()
        raise
    return code, time.monotonic() - started


def cell(value) -> str:
    return "—" if value is None or value == "" else str(value).replace("|", "\\|")


def summary(header: list[str], vers: str, outcomes: dict[str, tuple[int, float]]) -> str:
    lines = ["# Vigil benchmarks: summary", "", *header, f"- {vers}",
             "- each figure is Vigil's beside a baseline measured in the same run; read the ratios, not the absolute "
             "values (the machine is shared and noisy); full reports in bench/results/<benchmark>.md", "",
             "| benchmark | figure | Vigil | baseline | ratio | goal | met? |", "|---|---|---:|---:|---:|---:|:---:|"]
    for name, (code, _) in outcomes.items():
        path = RESULTS / f"{name}.json"
        if code != 0 or not path.exists():
            lines.append(f"| {name} | failed (exit {code}); see its output and bench/results/logs/ | — | — | — | — | NO |")
            continue
        for row in json.loads(path.read_text())["rows"]:
            met = {True: "yes", False: "NO", None: "—"}[row["met"]]
            ratio = "—" if row["ratio"] is None else f"{row['ratio']:.2f}"
            lines.append(f"| {name} | {cell(row['figure'])} | {cell(row['vigil'])} | {cell(row['baseline'])} | "
                         f"{ratio} | {cell(row['goal'])} | {met} |")
    lines += ["", "Run times: " + ", ".join(f"{name} {seconds:.0f} s" for name, (_, seconds) in outcomes.items())
              + f"; load average at end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run every benchmark and summarize their headline figures.")
    parser.add_argument("--only", default="", help="comma-separated benchmarks to run (default: all)")
    parser.add_argument("--skip", default="", help="comma-separated benchmarks to leave out")
    args = parser.parse_args(argv)
    chosen = [name for name in BENCHMARKS if (not args.only or name in args.only.split(","))
              and name not in args.skip.split(",")]
    unknown = {n for n in (args.only + "," + args.skip).split(",") if n} - set(BENCHMARKS)
    if unknown or not chosen:
        parser.error(f"benchmarks are {', '.join(BENCHMARKS)}" + (f"; unknown: {', '.join(sorted(unknown))}"
                                                                  if unknown else ""))
    header, _ = prepare()
    outcomes: dict[str, tuple[int, float]] = {}
    try:
        vers = versions()
        for name in chosen:
            outcomes[name] = run_one(name)
    except KeyboardInterrupt as exc:
        return failed(exc)
    text = summary(header, vers, outcomes)
    publish("summary.md", text)
    return 0 if all(code == 0 for code, _ in outcomes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
