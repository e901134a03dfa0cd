#!/usr/bin/env python
"""Pages rendered in a browser (issue 31): CPU and wall time per rendered quiet check beside a bare Playwright loop,
and ordinary quiet checks' CPU alone beside the same while renders run.

    .venv/bin/python bench/browser_checks.py [--checks 40] [--plain 400]

A. Vigil's rendered quiet check, as the browser worker runs it (tasks/rendered.render_check: a fresh context with
   its route guard, through the guarded proxy, goto until the network is idle, the selector's text, raw hash
   equal → quiet), beside the bare loop on the same pages in the same run: one Playwright context, a new page per
   round, `goto(wait_until="networkidle")`, `inner_text(selector)`, page closed; and a second baseline, the same
   loop with a fresh context per round (the isolation Vigil gives each check). CPU is the whole process tree's
   (this process, Playwright's driver, Chromium and its renderers, the renderers that ended with their page
   included: they are most of it); the live processes alone are shown too, as this figure was read before
   2026-12-06. Each side launches its own Chromium, once. The database claim and record (one row at most,
   ~0.3 ms: bench/quiet_checks.py) are left out of both.
B. An ordinary quiet check (engine/pipeline.run_check of a plain page through the fetcher, on one thread): that
   thread's CPU per check alone, then while another thread renders pages without pause.
Local pages on 127.0.0.1 (FETCH_ALLOW_LOOPBACK), the real /usr/bin/chromium. Writes bench/results/browser_checks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import failed, figure, prepare, publish, record, tree_cpu, versions  # noqa: E402
from bench.trigger_parts import fmt  # noqa: E402

#: a shop page whose price a script writes in, with a few kilobytes of text around it
PAGE = ("<html><head><title>Shop</title></head><body><h1>Shop</h1>"
        + "".join(f"<p>Item {i}: a line of description text for the catalogue.</p>" for i in range(60))
        + "<div id='box'></div><script>document.getElementById('box').innerHTML = "
          "\"<p id='price'>Price: 95.10</p>\";</script></body></html>").encode()
PLAIN = PAGE.replace(b"<div id='box'></div>", b"<p id='price'>Price: 95.10</p>")
SELECTOR = "#price"


def serve() -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            body = PLAIN if self.path.startswith("/plain") else PAGE
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def runtime(tmp: Path):
    from adapters.settings import Settings
    from tasks.runtime import configure

    return configure(Settings(VIGIL_DATA_DIR=str(tmp), SECRET_KEY="bench", FETCH_ALLOW_LOOPBACK=True,
                              BROWSER_EXECUTABLE=shutil.which("chromium") or "/usr/bin/chromium",
                              BROWSER_CONCURRENCY=1).with_defaults())


def vigil_rendered(rt, base: str, checks: int) -> tuple[float, float, float, int]:
    """(CPU s, CPU s of the live processes alone, wall s, quiet outcomes) of `checks` rendered quiet checks, after
    one untimed baseline."""
    from engine.checks import CheckSpec
    from engine.pipeline import QUIET, Prior
    from engine.sources.base import SourceSpec
    from tasks.rendered import render_check

    source = SourceSpec(type="page", url=f"{base}/shop", selector=SELECTOR, render="browser")
    check = CheckSpec(type="change")
    first = render_check(rt, source, check, Prior(), None, {})  # launches Chromium, starts the proxy
    prior = Prior(first.raw_hash, first.content_hash, first.verdict.state)
    cpu, live, wall, quiet = tree_cpu(_pid(), reaped=True), tree_cpu(_pid()), time.monotonic(), 0
    for _ in range(checks):
        quiet += render_check(rt, source, check, prior, None, {}).kind == QUIET
    return tree_cpu(_pid(), reaped=True) - cpu, tree_cpu(_pid()) - live, time.monotonic() - wall, quiet


def bare_playwright(base: str, checks: int, fresh_context: bool = False) -> tuple[float, float, float]:
    """(CPU s, CPU s of the live processes alone, wall s) of the bare loop, on its own Chromium, after one untimed
    round; with `fresh_context`, each round on a context of its own, closed after."""
    from playwright.async_api import async_playwright

    from adapters.browser import LAUNCH_ARGS

    async def run() -> tuple[float, float, float]:
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=shutil.which("chromium") or "/usr/bin/chromium",
                                              args=list(LAUNCH_ARGS))
            context = await browser.new_context()

            async def one() -> str:
                own = await browser.new_context() if fresh_context else context
                page = await own.new_page()
                await page.goto(f"{base}/shop", wait_until="networkidle")
                text = await page.inner_text(SELECTOR)
                await (own.close() if fresh_context else page.close())
                return text
            await one()
            cpu, live, wall = tree_cpu(_pid(), reaped=True), tree_cpu(_pid()), time.monotonic()
            for _ in range(checks):
                await one()
            spent = tree_cpu(_pid(), reaped=True) - cpu, tree_cpu(_pid()) - live, time.monotonic() - wall
            await browser.close()
            return spent
    return asyncio.run(run())


def plain_checks(rt, base: str, checks: int) -> float:
    """Thread CPU seconds per ordinary quiet check of a plain page (run_check through the fetcher)."""
    from engine.checks import CheckSpec
    from engine.pipeline import Prior, run_check
    from engine.sources.base import SourceSpec

    source, check = SourceSpec(type="page", url=f"{base}/plain", selector=SELECTOR), CheckSpec(type="change")
    io = rt.source_io()
    first = run_check(io, source, check, Prior(), 256 * 1024)
    prior = Prior(first.raw_hash, first.content_hash, first.verdict.state)
    started = time.thread_time()
    for _ in range(checks):
        run_check(io, source, check, prior, 256 * 1024)
    return (time.thread_time() - started) / checks


def plain_beside_renders(rt, base: str, checks: int) -> tuple[float, int]:
    """plain_checks while another thread renders pages without pause; (CPU s per check, renders meanwhile)."""
    from engine.checks import CheckSpec
    from engine.pipeline import Prior
    from engine.sources.base import SourceSpec
    from tasks.rendered import render_check

    stop, rendered = threading.Event(), [0]
    source = SourceSpec(type="page", url=f"{base}/shop", selector=SELECTOR, render="browser")

    def renders() -> None:
        while not stop.is_set():
            render_check(rt, source, CheckSpec(type="change"), Prior(), None, {})
            rendered[0] += 1
    thread = threading.Thread(target=renders)
    thread.start()
    try:
        while rendered[0] < 1:
            time.sleep(0.05)
        per_check = plain_checks(rt, base, checks)
    finally:
        stop.set()
        thread.join()
    return per_check, rendered[0]


def _pid() -> int:
    import os

    return os.getpid()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checks", type=int, default=40, help="rendered checks each side (default 40)")
    parser.add_argument("--plain", type=int, default=400, help="ordinary quiet checks each phase (default 400)")
    args = parser.parse_args(argv)
    header, procs = prepare()
    import tempfile

    from tasks.rendered import browser

    server, base = serve()
    try:
        rt = runtime(Path(tempfile.mkdtemp(prefix="vigil-bench-browser-")))
        plain_alone = plain_checks(rt, base, args.plain)
        v_cpu, v_live, v_wall, quiet = vigil_rendered(rt, base, args.checks)
        plain_busy, renders = plain_beside_renders(rt, base, args.plain)
        browser(rt).close()
        b_cpu, b_live, b_wall = bare_playwright(base, args.checks)
        f_cpu, f_live, f_wall = bare_playwright(base, args.checks, fresh_context=True)
    except BaseException as exc:  # noqa: BLE001 - said on stderr, with the exit code
        return failed(exc)
    finally:
        server.shutdown()
    n = args.checks
    rows = [
        figure(f"rendered quiet check: CPU per check (process tree: Python, Playwright's driver, Chromium and its "
               f"renderers, ended ones included) vs a bare Playwright goto(networkidle) + inner_text loop on one "
               f"context, same pages, same run ({n} each)",
               f"{fmt(1000 * v_cpu / n)} ms", f"{fmt(1000 * b_cpu / n)} ms", v_cpu / b_cpu, "≤ 1.2",
               v_cpu / b_cpu <= 1.2),
        figure("rendered quiet check: CPU per check of the live processes alone (renderers that ended left out, "
               "as read before 2026-12-06), same comparison", f"{fmt(1000 * v_live / n)} ms",
               f"{fmt(1000 * b_live / n)} ms", v_live / b_live, "—"),
        figure("rendered quiet check: CPU per check (as the first row) vs the bare loop with a fresh context per "
               "round", f"{fmt(1000 * v_cpu / n)} ms", f"{fmt(1000 * f_cpu / n)} ms", v_cpu / f_cpu, "—"),
        figure("rendered quiet check: wall time per check vs the bare loop on one context",
               f"{fmt(1000 * v_wall / n)} ms", f"{fmt(1000 * b_wall / n)} ms", v_wall / b_wall, "—"),
        figure(f"ordinary quiet check: thread CPU per check while renders run ({renders} renders meanwhile) vs alone "
               f"({args.plain} checks each)", f"{fmt(1000 * plain_busy, 3)} ms", f"{fmt(1000 * plain_alone, 3)} ms",
               plain_busy / plain_alone, "≤ 1.1", plain_busy / plain_alone <= 1.1),
    ]
    record("browser_checks", rows)
    met = {True: "yes", False: "NO", None: "—"}
    text = "\n".join([
        "# Vigil browser checks: rendered quiet checks beside a bare Playwright loop", "", *header, f"- {versions()}",
        f"- local pages on 127.0.0.1 (~4 KB, the price written in by a script); Chromium {shutil.which('chromium')}; "
        f"quiet outcomes among Vigil's rendered checks: {quiet} of {n}", "",
        "| figure | Vigil | baseline | ratio | goal | met? |", "|---|---:|---:|---:|---:|:---:|",
        *[f"| {x['figure']} | {x['vigil']} | {x['baseline']} | "
          f"{'—' if x['ratio'] is None else format(x['ratio'], '.2f')} | {x['goal']} | {met[x['met']]} |"
          for x in rows],
        "", "What Vigil's rendered check does beyond the bare loop: a fresh browser context per check (closed after), "
        "a route for font and media file names (aborted), the guarded forward proxy (adapters/"
        "egress_proxy.py) for every connection, and the selector's outermost matches read in one evaluate."]) + "\n"
    procs.stop()
    return publish("browser_checks.md", text)


if __name__ == "__main__":
    sys.exit(main())
