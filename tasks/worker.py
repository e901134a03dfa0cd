"""A Dramatiq Worker that sleeps while there is no work, and still stops at once.

Dramatiq's worker threads wait on the in-process work queue for `worker_timeout` and wake to look at their
`running` flag: that timeout is both how idle they are and how long a stop takes. IdleWorker's threads wait up to
IDLE_SECONDS and are woken by `stop()`; its consumers (tasks/wakes.py) wait for a wake or their next eta and are
interrupted by `stop()` too. With another broker (a test's own) the consumers just wait their timeout.
"""

from __future__ import annotations

import time
from queue import Empty

import dramatiq
from dramatiq import Worker
from dramatiq.worker import WorkerThread

#: the longest an idle worker thread or consumer sleeps without being woken (the Redis beat looks more often)
IDLE_SECONDS = 30.0
#: how often a paused thread looks at whether it was resumed (Dramatiq sleeps its timeout)
PAUSED_SECONDS = 0.1


class IdleWorker(Worker):
    """Dramatiq's Worker with threads that sleep until work or stop, and consumers interrupted at stop."""

    def __init__(self, broker: dramatiq.Broker, *, queues=None, worker_threads: int = 8,
                 idle_seconds: float = IDLE_SECONDS) -> None:
        super().__init__(broker, queues=queues, worker_timeout=int(idle_seconds * 1000), worker_threads=worker_threads)

    def _add_worker(self) -> None:
        thread = _IdleWorkerThread(broker=self.broker, consumers=self.consumers, work_queue=self.work_queue,
                                   worker_timeout=self.worker_timeout)
        thread.start()
        self.workers.append(thread)

    def stop(self, timeout: int = 600000) -> None:
        for thread in list(self.consumers.values()):
            interrupt = getattr(thread.consumer, "interrupt", None)
            if interrupt is not None:
                interrupt()
        super().stop(timeout)


class _IdleWorkerThread(WorkerThread):
    """Dramatiq's WorkerThread.run, waiting on the work queue's condition so that stop() can end the wait."""

    def run(self) -> None:
        self.running = True
        self.broker.emit_after("worker_thread_boot", self)
        while self.running:
            if self.paused:
                self.paused_event.set()
                time.sleep(PAUSED_SECONDS)
                continue
            item = self._take()
            if item is not None:
                self.process_message(item.message)
        self.broker.emit_before("worker_thread_shutdown", self)

    def _take(self):
        work = self.work_queue
        with work.not_empty:
            work.not_empty.wait_for(lambda: len(work.queue) > 0 or not self.running, self.timeout)
        try:
            return work.get_nowait()
        except Empty:
            return None

    def stop(self) -> None:
        super().stop()
        with self.work_queue.not_empty:
            self.work_queue.not_empty.notify_all()


def run_dramatiq_workers_idle() -> None:
    """Makes Dramatiq's CLI build IdleWorkers in this worker process.

    `dramatiq tasks.main` imports tasks.main in each worker process, then builds
    `Worker(broker, queues=…, worker_threads=…)` by the name in its own module; that name is pointed here. (Its
    own loop then only wakes once a second, to see whether it was told to stop.)
    """
    import dramatiq.cli

    dramatiq.cli.Worker = IdleWorker
