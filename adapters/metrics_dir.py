"""The directory where this machine's Vigil processes keep their Prometheus counters (multiprocess mode).

prometheus_client chooses multiprocess mode when it is imported, from PROMETHEUS_MULTIPROC_DIR, so each
entrypoint calls `prepare(settings)` before anything imports it (vigil/cli.py for web, worker, scheduler and
serve; tasks/main.py in each Dramatiq worker process). Every process writes its own files there
(`counter_<pid>.db`, `gauge_livesum_<pid>.db`); the web process's /metrics adds them all up.

Files of processes that are gone are tidied when a process starts: live gauges are dropped (what they counted
went with the process) and counters are folded into `counter_archive.db`, so the totals never go down and the
directory does not grow by a file per restart. A process also drops its own live gauges when it exits
normally. The folding and a scrape take a lock on `.lock`, so a scrape never sees a counter twice or not at all.
"""

from __future__ import annotations

import atexit
import fcntl
import glob
import logging
import os
import sys
from contextlib import contextmanager
from pathlib import Path

from adapters.settings import Settings

log = logging.getLogger(__name__)

ENV = "PROMETHEUS_MULTIPROC_DIR"
ARCHIVE = "counter_archive.db"


def directory(settings: Settings) -> Path:
    """METRICS_DIR, or $VIGIL_DATA_DIR/metrics."""
    return Path(settings.METRICS_DIR or Path(settings.VIGIL_DATA_DIR) / "metrics").resolve()


def prepare(settings: Settings) -> str:
    """Point this process's metrics at the directory (created if missing) and tidy what dead processes left.
    A directory it can't write is logged, and the metrics stay in this process: they never stop it starting."""
    path = str(directory(settings))
    if "prometheus_client" in sys.modules and os.environ.get(ENV) != path:
        log.warning("prometheus_client was imported before %s was set; this process's metrics stay in it", ENV)
    try:
        os.makedirs(path, exist_ok=True)
        with locked(path, fcntl.LOCK_SH):
            pass  # writable
    except OSError as exc:
        log.warning("METRICS_DIR %s can't be used (%s); this process's metrics stay in it", path, exc)
        return ""
    os.environ[ENV] = path  # before tidy() imports prometheus_client: the import reads it
    try:
        tidy(path)
    except Exception as exc:  # noqa: BLE001 — tidying is housekeeping; a file it can't read must not stop a start
        log.warning("could not tidy the metrics files in %s: %s", path, exc)
    atexit.register(_exited, os.getpid(), path)
    return path


def tidy(path: str) -> None:
    """Drop the live gauges of processes that are gone, and fold their counters into the archive. This
    process's own pid counts as gone: it has written nothing yet, and an earlier process with the same pid
    (a container's pid 1 after a restart) must not lend it its gauges."""
    with locked(path, fcntl.LOCK_EX):
        dead = [f for f in glob.glob(os.path.join(path, "*.db")) if _gone(f)]
        for name in dead:
            if os.path.basename(name).startswith("gauge_live"):
                os.remove(name)
        counters = [f for f in dead if os.path.basename(f).startswith("counter_")]
        if counters:
            _fold(path, counters)


@contextmanager
def locked(path: str, mode: int):
    """flock on the directory's lock file: shared for a scrape, exclusive for tidying."""
    with open(os.path.join(path, ".lock"), "a") as handle:
        fcntl.flock(handle, mode)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _gone(name: str) -> bool:
    pid = os.path.basename(name)[:-3].rsplit("_", 1)[-1]
    if not pid.isdigit():
        return False  # the archive
    if int(pid) == os.getpid():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    return False


def _fold(path: str, counters: list[str]) -> None:
    """Add the counters of `counters` to the archive (one new file, swapped in), then remove them."""
    from prometheus_client.mmap_dict import MmapedDict, mmap_key
    from prometheus_client.multiprocess import MultiProcessCollector

    archive = os.path.join(path, ARCHIVE)
    sources = counters + ([archive] if os.path.exists(archive) else [])
    merged = MultiProcessCollector.merge(sources, accumulate=False)
    staged = archive + ".new"
    if os.path.exists(staged):
        os.remove(staged)
    out = MmapedDict(staged)
    try:
        for metric in merged:
            for sample in metric.samples:
                key = mmap_key(metric.name, sample.name, list(sample.labels), list(sample.labels.values()),
                               metric.documentation)
                out.write_value(key, sample.value, 0.0)
    finally:
        out.close()
    os.replace(staged, archive)
    for name in counters:
        os.remove(name)


def _exited(pid: int, path: str) -> None:
    """At a normal exit: this process's live gauges (SSE clients) go with it."""
    if pid != os.getpid():
        return  # a forked child inherited the hook
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid, path)
