"""The report of bench/web_under_load.py: each round's row, the figures beside their quiet rounds, and what
the checks found."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from bench.common import figure, record
from bench.trigger_parts import fmt, pct
from bench.load_parts import (
    DB_NAME, GET_GOAL_MS, GETS, ROUND_ORDER, SLOW_ACCOUNTS, WEBHOOKS, Create, Round, Setup,
)


# ----------------------------------------------------------------------------------------------
# report


def combined(rounds: list[Round], kind: str) -> Round:
    out = Round(kind, 0)
    mine = [r for r in rounds if r.kind == kind]
    out.in_flight = sum(r.in_flight for r in mine) / len(mine) if mine else float("nan")
    for r in mine:
        out.triggers.add(r.triggers)
        for name in GETS:
            out.gets[name] += r.gets[name]
            out.asked[name] += r.asked[name]
        out.get_errors += r.get_errors
        out.web_cpu += r.web_cpu
        out.creates += r.creates
    return out


def held(rounds: list[Round]) -> list[float]:
    return [h for r in rounds if r.slowloris for h in r.slowloris.held]


def create_counts(creates: list[Create]) -> str:
    kinds = Counter(c.kind for c in creates)
    return " / ".join(str(kinds[k]) for k in ("created", "busy", "timed out")) + \
        f" / {sum(n for k, n in kinds.items() if k not in ('created', 'busy', 'timed out'))}"


def round_row(r: Round, label: str) -> str:
    t = r.triggers
    storm = r.kind == "storm" and r.creates
    slowest = max((c.seconds for c in r.creates), default=float("nan"))
    return (f"| {label} | {fmt(t.wall, 1)} | {t.accepted:,} | {fmt(t.rate)} | {fmt(pct(t.latencies, 50))} | "
            f"{fmt(pct(t.latencies, 99))} | " + " | ".join(fmt(pct(r.gets[n], 99)) for n in GETS) + " | "
            f"{fmt(1000 * r.web_cpu / t.accepted if t.accepted else float('nan'), 2)} | "
            f"{create_counts(r.creates) if storm else '—'} | {fmt(r.in_flight) if storm else '—'} | "
            f"{fmt(slowest, 2) if storm else '—'} |")


def figures(s: Setup, rounds: list[Round], half: int) -> list[dict]:
    """The summary's rows: storm rounds against the quiet rounds of the same run."""
    quiet, storm = combined(rounds, "quiet"), combined(rounds, "storm")
    q99, s99 = pct(quiet.triggers.latencies, 99), pct(storm.triggers.latencies, 99)
    ratio = storm.triggers.rate / quiet.triggers.rate if quiet.triggers.rate else None
    rows = [figure("trigger deliveries/s, slow creates in flight vs none", f"{storm.triggers.rate:,.0f}/s",
                   f"{quiet.triggers.rate:,.0f}/s", ratio, "≥ 0.8", ratio is not None and ratio >= 0.8),
            figure("trigger 202 p99, slow creates in flight vs none", f"{fmt(s99)} ms", f"{fmt(q99)} ms",
                   s99 / q99 if q99 else None, "≤ 3", bool(q99) and s99 <= 3 * q99)]
    for name, path in (("approve", "GET /approve/<token>"), ("login", "GET /login"),
                       ("monitors", "GET /api/monitors")):
        sp, qp = pct(storm.gets[name], 99), pct(quiet.gets[name], 99)
        rows.append(figure(f"{path} p99, slow creates in flight (baseline: none)", f"{fmt(sp)} ms", f"{fmt(qp)} ms",
                           sp / qp if qp else None, f"≤ {GET_GOAL_MS:g} ms", sp <= GET_GOAL_MS))
    rows += create_figures(s, rounds, storm, half)
    return rows


def create_figures(s: Setup, rounds: list[Round], storm: Round, half: int) -> list[dict]:
    limit = s.settings.CREATE_FETCH_TIMEOUT_SECONDS + 1
    slowest = max((c.seconds for c in storm.creates), default=float("nan"))
    other = sum(c.kind not in ("created", "busy", "timed out") for c in storm.creates)
    longest = max(held(rounds) or [float("nan")])
    header = s.settings.WEB_HEADER_TIMEOUT_SECONDS
    return [figure("slowest slow-create answer vs CREATE_FETCH_TIMEOUT_SECONDS + 1 s", f"{fmt(slowest, 2)} s",
                   f"{limit:g} s", slowest / limit, f"≤ {limit:g} s", slowest <= limit),
            figure("slow creates: created / told to retry / timed out / other", create_counts(storm.creates), "—",
                   None, "other 0", other == 0),
            figure("monitors half-created", str(half), "—", None, "0", half == 0),
            figure("slowloris connection held vs WEB_HEADER_TIMEOUT_SECONDS", f"{fmt(longest, 1)} s",
                   f"{header:g} s", longest / header if header else None)]


def figure_rows(rows: list[dict]) -> list[str]:
    out = ["| figure | storm | quiet / limit | ratio | goal | met |", "|---|---:|---:|---:|---:|:---:|"]
    for row in rows:
        met = {True: "yes", False: "NO", None: "—"}[row["met"]]
        ratio = "—" if row["ratio"] is None else f"{row['ratio']:.2f}"
        out.append(f"| {row['figure']} | {row['vigil']} | {row['baseline']} | {ratio} | {row['goal']} | {met} |")
    return out


def create_rows(rounds: list[Round]) -> list[str]:
    """How the slow creates were answered: per kind, how many and how fast, and one answer text of each."""
    creates = [c for r in rounds for c in r.creates]
    out = ["| answer | calls | p50 s | p99 s | slowest s | one answer's text |", "|---|---:|---:|---:|---:|---|"]
    for kind, n in Counter(c.kind for c in creates).most_common():
        mine = [c for c in creates if c.kind == kind]
        seconds = [c.seconds for c in mine]
        out.append(f"| {kind} | {n} | {fmt(pct(seconds, 50) / 1000, 2)} | {fmt(pct(seconds, 99) / 1000, 2)} | "
                   f"{fmt(max(seconds), 2)} | {mine[0].text[:160].replace('|', '/')} |")
    return out


def source_lines(s: Setup, rounds: list[Round]) -> list[str]:
    storms = [r for r in rounds if r.kind == "storm"]
    loris = held(rounds)
    left = [h for r in storms for h in r.slowloris.still_open]
    reached = ", ".join(str(r.source_requests) for r in storms)
    return [f"fetches that reached the slow source per storm round: {reached}; most open at once "
            f"{s.source.most_open} (CREATE_CONCURRENCY {s.settings.CREATE_CONCURRENCY}), "
            f"most of one account at once {s.source.most_per_account} "
            f"(CREATE_CONCURRENCY_PER_ACCOUNT {s.settings.CREATE_CONCURRENCY_PER_ACCOUNT})",
            f"slowloris: {len(loris)} connections closed by the server, after "
            f"{', '.join(f'{h:.1f}' for h in loris) or '—'} s "
            f"(WEB_HEADER_TIMEOUT_SECONDS {s.settings.WEB_HEADER_TIMEOUT_SECONDS:g}); {len(left)} closed by the bench "
            f"at the end of its round, after {', '.join(f'{h:.1f}' for h in left) or '—'} s; "
            f"{sum(r.slowloris.bytes_sent for r in storms)} bytes trickled in all"]


def samples(rounds: list[Round], kind: str, name: str) -> list[tuple[float, float, int]]:
    """(seconds, asked at, round) of every answer of GET `name` in the `kind` rounds."""
    return [(sec, at, r.n) for r in rounds if r.kind == kind for sec, at in zip(r.gets[name], r.asked[name])]


def slowest_gets(rounds: list[Round]) -> list[str]:
    """Each path's slowest answer in each phase, and when in its round it was asked (a storm's creates are
    fired at 0 s); then the storm's GETs split into its first second (the burst of calls) and the rest."""
    lines = []
    for kind in ("storm", "quiet"):
        worst = [f"{name} {1000 * sec:.0f} ms ({kind} {n}, asked {at:.1f} s into it)"
                 for name in GETS if (found := samples(rounds, kind, name)) for sec, at, n in [max(found)]]
        lines.append(f"slowest GET answers, {kind} rounds: {', '.join(worst) or '—'}")
    split = []
    for name in GETS:
        found = samples(rounds, "storm", name)
        first, rest = [sec for sec, at, _ in found if at < 1.0], [sec for sec, at, _ in found if at >= 1.0]
        split.append(f"{name} {fmt(pct(first, 99))} ms (n={len(first)}) / {fmt(pct(rest, 99))} ms (n={len(rest)})")
    return lines + ["storm GET p99, asked in the first second after the creates were fired / later: "
                    + ", ".join(split)]


def description(s: Setup) -> list[str]:
    a, st = s.args, s.settings
    return [f"- Vigil: one `vigil web` process (uvicorn), PostgreSQL database {DB_NAME}, Redis db 7, no worker "
            f"(deliveries are stored and queued, not processed); CREATE_CONCURRENCY {st.CREATE_CONCURRENCY}, "
            f"CREATE_CONCURRENCY_PER_ACCOUNT {st.CREATE_CONCURRENCY_PER_ACCOUNT}, CREATE_FETCH_TIMEOUT_SECONDS "
            f"{st.CREATE_FETCH_TIMEOUT_SECONDS:g}, WEB_THREADS {st.WEB_THREADS}, WEB_PUBLIC_THREADS "
            f"{st.WEB_PUBLIC_THREADS}, WEB_HEADER_TIMEOUT_SECONDS {st.WEB_HEADER_TIMEOUT_SECONDS:g}, "
            f"DATABASE_MAX_CONNECTIONS {st.DATABASE_MAX_CONNECTIONS}; API and trigger rate limits raised",
            f"- Rounds: {', '.join(ROUND_ORDER)} × {a.blocks}, {a.round_seconds:g} s each: {a.concurrency} "
            f"trigger client threads (keep-alive sessions, {WEBHOOKS} unsigned webhook links, unique Idempotency-Keys) "
            f"and a process of its own GETting /approve/<token>, /login, /api/monitors in turn, one every "
            f"{a.get_interval:g} s (a keep-alive connection each, opened before the round)",
            f"- Storm: a slowloris client (one header byte a second, reconnected when closed), then {a.creates} "
            f"`monitor_create` calls at once from {SLOW_ACCOUNTS} accounts (a page source each, answering after "
            f"{a.slow_seconds:g} s), measured from the moment they are fired"]


def report(s: Setup, header: list[str], vers: str, rounds: list[Round], check_lines: list[str], half: int) -> str:
    rows = figures(s, rounds, half)
    record("web_under_load", rows)
    blocks = [rounds[i:i + len(ROUND_ORDER)] for i in range(0, len(rounds), len(ROUND_ORDER))]
    per_block = ", ".join(fmt(combined(b, "storm").triggers.rate / combined(b, "quiet").triggers.rate, 2)
                          for b in blocks)
    lines = ["# Vigil web under load: cheap paths while slow first checks are in flight", "", *header,
             f"- {vers}", *description(s), "",
             "| round | s | 202s | deliveries/s | 202 p50 ms | 202 p99 ms | /approve p99 ms | /login p99 ms | "
             "/api/monitors p99 ms | web CPU-ms/delivery | creates: created / retry / timed out / other | "
             "creates in flight (mean) | slowest create s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
             *[round_row(r, f"{r.kind} {r.n}") for r in rounds],
             round_row(combined(rounds, "quiet"), "**all quiet**"),
             round_row(combined(rounds, "storm"), "**all storm**"),
             "", *figure_rows(rows), "", f"Deliveries/s storm ÷ quiet, block by block: {per_block}", "",
             "Slow creates:", "", *create_rows(rounds), "", "Checks:", "",
             *[f"- {line}" for line in source_lines(s, rounds) + slowest_gets(rounds) + check_lines],
             f"- errors: triggers {dict(sum((r.triggers.errors for r in rounds), Counter())) or 'none'}, GETs "
             f"{dict(sum((r.get_errors for r in rounds), Counter())) or 'none'}",
             f"- load average at end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}"]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------
# main

