"""Running the pieces: the web server, the scheduler loop, and all of them in one process."""

from __future__ import annotations

import logging
import signal
import threading

import uvicorn

from adapters.logs import mask_tokens
from adapters.quiet_server import QuietServer
from adapters.settings import Settings

log = logging.getLogger("vigil")


def run_web(settings: Settings, host: str, port: int, greet: bool = True) -> int:
    """The web tier; `greet` prints how to create the first account while there is none (serve has already)."""
    from app import create_app
    from app.first_run import first_run_lines
    from app.runner_records import records_route

    from adapters.webserver import guarded_protocol

    if greet and (lines := first_run_lines(settings.SECRET_KEY, f"http://{host}:{port}")):
        print("\n".join(lines), flush=True)

    # a runner's records POST is answered below Litestar: a busy stream sends one every 200 ms (issue 27)
    app = records_route(create_app(settings), settings.API_MAX_BODY_BYTES)
    config = uvicorn.Config(app, host=host, port=port, timeout_graceful_shutdown=2,
                            log_level=settings.LOG_LEVEL.lower(), proxy_headers=False,
                            http=guarded_protocol(settings.WEB_HEADER_TIMEOUT_SECONDS))
    mask_tokens()
    for sig in (signal.SIGINT, signal.SIGTERM):
        # uvicorn shuts down on the signal, then raises it again for whatever handler was there before;
        # this one lets the caller finish its own shutdown (worker threads, scheduler) and exit 0.
        signal.signal(sig, lambda *_: None)
    QuietServer(config).run()  # uvicorn's own main loop wakes ten times a second (adapters/quiet_server.py)
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
    from tasks.worker import IdleWorker

    broker = setup_broker(settings)
    worker = IdleWorker(broker, worker_threads=settings.WORKER_THREADS)  # asleep until a message or its eta
    worker.start()
    stop = start_scheduler(settings)
    if settings.LOCAL_RUNNER:
        from vigil.local_runner import start_local_runner

        start_local_runner(settings, host, port, stop)
    _greet(settings, host, port)
    try:
        with _advertised(settings, host, port):
            return run_web(settings, host, port, greet=False)
    finally:
        stop.set()
        worker.stop(timeout=5000)


def _advertised(settings: Settings, host: str, port: int):
    """Embedded, serve.json tells `vigil token create` where to hand its event (adapters/serve_file.py); with Redis
    the command publishes there itself."""
    from contextlib import nullcontext

    from adapters.serve_file import advertised

    return advertised(settings.VIGIL_DATA_DIR, host, port) if settings.embedded else nullcontext()


def _greet(settings: Settings, host: str, port: int) -> None:
    from app.first_run import first_run_lines

    mode = "embedded (SQLite, in-process worker)" if settings.embedded else "with Redis"
    url = f"http://{host}:{port}"
    lines = [f"Vigil is running at {url} — {mode}; database {settings.DATABASE_URL}"]
    lines += first_run_lines(settings.SECRET_KEY, url)
    if settings.LOCAL_RUNNER:
        lines.append("Local runner on: command monitors of device 'local' (the first account's) run on this machine; "
                     "each command waits for your approval on its conversation page unless you set the device to "
                     "full in Settings → Devices.")
    print("\n".join(lines), flush=True)
