"""Running the pieces: the web server, the scheduler loop, and all of them in one process."""

from __future__ import annotations

import logging
import signal
import threading

import uvicorn
from dramatiq import Worker

from adapters.logs import mask_tokens
from adapters.settings import Settings

log = logging.getLogger("vigil")


def run_web(settings: Settings, host: str, port: int) -> int:
    from app import create_app

    from adapters.webserver import guarded_protocol

    config = uvicorn.Config(create_app(settings), host=host, port=port, timeout_graceful_shutdown=2,
                            log_level=settings.LOG_LEVEL.lower(), proxy_headers=False,
                            http=guarded_protocol(settings.WEB_HEADER_TIMEOUT_SECONDS))
    mask_tokens()
    for sig in (signal.SIGINT, signal.SIGTERM):
        # uvicorn shuts down on the signal, then raises it again for whatever handler was there before;
        # this one lets the caller finish its own shutdown (worker threads, scheduler) and exit 0.
        signal.signal(sig, lambda *_: None)
    uvicorn.Server(config).run()
    return 0


def start_scheduler(settings: Settings) -> threading.Event:
    """The scheduler loop in a daemon thread; set the returned event to stop it."""
    from tasks.scheduler import run

    stop = threading.Event()
    thread = threading.Thread(target=run, name="vigil-scheduler", daemon=True,
                              args=(settings.SCHEDULER_TICK_SECONDS, settings.SCHEDULER_BATCH_SIZE, stop,
                                    settings.DELIVERY_SWEEP_SECONDS))
    thread.start()
    return stop


def run_scheduler_forever(settings: Settings, stop: threading.Event) -> int:
    """The scheduler loop until `stop` (set by SIGINT or SIGTERM: vigil/cli.py installs them first thing)."""
    from tasks.scheduler import run

    if stop.is_set():
        return 0
    log.info("scheduler started (tick %ss)", settings.SCHEDULER_TICK_SECONDS)
    run(settings.SCHEDULER_TICK_SECONDS, settings.SCHEDULER_BATCH_SIZE, stop, settings.DELIVERY_SWEEP_SECONDS)
    return 0


def serve(settings: Settings, host: str, port: int) -> int:
    """Web, worker threads and scheduler in this one process."""
    from tasks.broker import setup_broker

    broker = setup_broker(settings)
    worker = Worker(broker, worker_threads=settings.WORKER_THREADS, worker_timeout=100)
    worker.start()
    stop = start_scheduler(settings)
    if settings.LOCAL_RUNNER:
        from vigil.local_runner import start_local_runner

        start_local_runner(settings, host, port, stop)
    _greet(settings, host, port)
    try:
        return run_web(settings, host, port)
    finally:
        stop.set()
        worker.stop(timeout=5000)


def _greet(settings: Settings, host: str, port: int) -> None:
    from models import connection
    from models.accounts import has_users

    with connection():
        first = not has_users()
    mode = "embedded (SQLite, in-process worker)" if settings.embedded else "with Redis"
    lines = [f"Vigil is running at http://{host}:{port} — {mode}; database {settings.DATABASE_URL}"]
    if first:
        lines += ["No account yet. In another terminal:",
                  "  .venv/bin/vigil user create you@example.com --password 'choose-a-password'",
                  f"  then sign in at http://{host}:{port}/login",
                  "  .venv/bin/vigil token create --user you@example.com   # a runtime token for your agent"]
    if settings.LOCAL_RUNNER:
        lines.append("Local runner on: command monitors of device 'local' (the first account's) run on this machine; "
                     "each command waits for your approval on its conversation page unless you set the device to "
                     "full in Settings → Devices.")
    print("\n".join(lines), flush=True)
