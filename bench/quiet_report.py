"""The quiet-check benchmark's report (bench/quiet_checks.py): its tables and the ratios it records for
bench/run_all.py, from the Measures of one run."""

from __future__ import annotations

from pathlib import Path

from bench.common import DB_NAME, REDIS_URL, figure, record
from bench.quiet_checks import Measure


def fmt(value: float, digits: int = 2) -> str:
    return "n/a" if value != value else f"{value:,.{digits}f}"


def report(args, header: list[str], a: Measure, b: Measure, v: Measure, versions: str,
           c: Measure | None = None) -> str:
    db, checks = v.extra["db"], v.checks
    monitors = db["tables"].get("monitors", {})
    rows = sum(t["ins"] + t["upd"] + t["del"] for t in db["tables"].values())
    xacts = db["commit"] + db["rollback"]
    worker_ms, sched_ms = v.ms(v.cpu), v.ms(v.extra["scheduler"])
    redis_calls = sum(v.extra["redis_calls"].values())
    top_redis = ", ".join(f"{name} {calls / checks:.2f}" for name, calls in
                          sorted(v.extra["redis_calls"].items(), key=lambda kv: -kv[1])[:5] if calls)
    conditional = c is not None
    title = "answered 304 (conditional GET)" if conditional else "vs. their physical limit"
    lines = [f"# Vigil quiet checks {title}", "", *header, f"- {versions}",
             f"- {args.monitors} monitors/pages (~{args.page_bytes / 1024:g} KiB HTML each, never changing"
             f"{', each with an ETag; Vigil asks with If-None-Match and is answered 304' if conditional else ''}), baselines "
             f"{args.seconds_per_loop:g}s per loop run before and after the Vigil phase (summed), "
             f"Vigil {args.rounds} measured rounds of {args.monitors} checks after one warm-up round",
             "- Vigil: `python -m dramatiq tasks.main --processes 1 --threads 4` + `vigil scheduler` "
             f"(tick 0.2 s, batch 500), PostgreSQL database {DB_NAME}, Redis {REDIS_URL}", "",
             "| run | checks | wall s | checks/s | CPU-ms/check (A, B: bench process; Vigil: worker process tree) "
             "| page-server CPU-ms/request |",
             "|---|---:|---:|---:|---:|---:|"]
    measured = [(a, "Baseline A: GET + sha256 (1 session, 1 thread)"),
                (b, "Baseline B: GET + html_to_text + sha256 (1 session, 1 thread)")]
    if conditional:
        measured.append((c, "Baseline C: GET with If-None-Match, answered 304 (1 session, 1 thread)"))
    measured.append((v, "Vigil worker (1 process × 4 threads), quiet checks"
                     + (" answered 304" if conditional else "")))
    for m, label in measured:
        lines.append(f"| {label} | {m.checks:,} | {fmt(m.wall)} | {fmt(m.rate, 1)} | {fmt(m.ms(m.cpu), 3)} | "
                     f"{fmt(m.ms(m.server_cpu), 3)} |")
    lines += ["", "Where else Vigil's quiet checks cost CPU (per check, same rounds):", "",
              "| process | CPU-ms/check |", "|---|---:|",
              f"| Vigil worker (dramatiq CLI + forked worker process) | {fmt(worker_ms, 3)} |",
              f"| Vigil scheduler | {fmt(sched_ms, 3)} |",
              f"| Vigil worker + scheduler | {fmt(worker_ms + sched_ms, 3)} |",
              f"| PostgreSQL (all postgres processes; includes the bench's progress polls) | "
              f"{fmt(v.ms(v.extra['postgres']), 3)} |",
              f"| Redis server | {fmt(v.ms(v.extra['redis']), 3)} |", ""]
    cpu_ratio = worker_ms / a.ms(a.cpu)
    goal, limit = ("≤ 0.7", 0.7) if conditional else ("≤ 1.5", 1.5)
    goals = [("Vigil worker CPU per quiet check ÷ baseline A CPU per check", cpu_ratio, goal, cpu_ratio <= limit),
             ("(worker + scheduler) CPU per check ÷ baseline A", (worker_ms + sched_ms) / a.ms(a.cpu), "—", None),
             ("Vigil throughput ÷ baseline B throughput", v.rate / b.rate, "≥ 0.8", v.rate / b.rate >= 0.8),
             ("Vigil throughput ÷ baseline A throughput", v.rate / a.rate, "—", None),
             ("DB row writes per quiet check (n_tup_ins+upd+del, all tables)", rows / checks, "≤ 1", rows / checks <= 1),
             ("DB transactions per check (xact_commit+rollback, vigil_bench)", xacts / checks, "—", None)]
    if conditional:
        goals.insert(1, ("Vigil worker CPU per quiet check ÷ baseline C (bare 304 GET)", worker_ms / c.ms(c.cpu),
                         "—", None))
    record("quiet_checks_conditional" if conditional else "quiet_checks", [
        figure("quiet check answered 304: worker CPU per check vs bare GET + sha256" if conditional else
               "quiet check: worker CPU per check vs bare GET + sha256", f"{worker_ms:.3f} ms",
               f"{a.ms(a.cpu):.3f} ms", cpu_ratio, goal, cpu_ratio <= limit),
        figure("quiet checks/s per worker process vs GET + text + sha256 loop", f"{v.rate:,.0f}/s",
               f"{b.rate:,.0f}/s", v.rate / b.rate, "≥ 0.8", v.rate / b.rate >= 0.8),
        figure("database row writes per quiet check", f"{rows / checks:.2f}", "—", None, "≤ 1", rows / checks <= 1)])
    lines += ["| ratio (same run) | measured | goal | met |", "|---|---:|---:|:---:|"]
    for label, value, goal, met in goals:
        lines.append(f"| {label} | {fmt(value, 3)} | {goal} | {'—' if met is None else 'yes' if met else 'NO'} |")
    written = v.extra["written"]
    quiet_keys = ("monitor_runs", "wakes", "messages", "wake_pushes", "wake_attempts", "monitors not quiet")
    lines += ["", "Details:", "",
              f"- monitors table: {monitors.get('upd', 0) / checks:.3f} row updates/check "
              f"({monitors.get('hot', 0) / checks:.3f} HOT), inserts {monitors.get('ins', 0)}, deletes {monitors.get('del', 0)}; "
              f"other tables: " + ", ".join(f"{name} +{t['ins']}/~{t['upd']}/-{t['del']}" for name, t in
                                            sorted(db["tables"].items()) if name != "monitors"),
              f"- transactions: {db['commit']:,} commits + {db['rollback']:,} rollbacks for {checks:,} checks "
              f"(the bench's own {db['bench_xacts']} transactions and {db['bench_rows']:,} \"make due again\" "
              "row updates are subtracted)",
              f"- claims per check: {v.extra['claims'] / checks:.3f} (1.000 = no lease expired, "
              "no duplicate or stale message" + ("" if v.extra["claims"] == checks else "; WARNING: not 1") + ")",
              f"- Redis commands per check: {redis_calls / checks:.2f} (server-wide commandstats; top: {top_redis})",
              f"- written by the quiet rounds: MonitorRun rows {written['monitor_runs']}, wakes {written['wakes']}, "
              f"messages {written['messages']}, wake pushes {written['wake_pushes']} and attempts "
              f"{written['wake_attempts']}, monitors with an error/fire/non-active status "
              f"{written['monitors not quiet']} (all must be 0): "
              f"{'OK, every check was quiet' if not any(written[k] for k in quiet_keys) else 'WARNING: NOT ALL CHECKS WERE QUIET'}",
              "- check_count per monitor now min {} / max {} (1 baseline + 1 warm-up + {} rounds = {} each)".format(
                  *written["check_count min/max"], args.rounds, args.rounds + 2),
              "- rounds: " + "; ".join(f"{r.name}: {r.checks} checks in {r.wall:.2f}s = {r.rate:.0f}/s, worker "
                                       f"{r.ms(r.cpu):.2f} ms/check" for r in v.extra["rounds"]),
              "- baseline loops: " + "; ".join(f"{m.name} {m.rate:.0f}/s {m.ms(m.cpu):.3f} ms" for m in
                                                a.extra["runs"] + b.extra["runs"] + (c.extra["runs"] if c else [])),
              *([f"- 304s the page server answered Vigil in the measured and warm-up rounds: "
                 f"{v.extra['not_modified']:,} ({v.extra['not_modified'] / (checks + args.monitors):.2f} a check)"]
                if conditional else []),
              f"- load average at end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}"]
    return "\n".join(lines) + "\n"
