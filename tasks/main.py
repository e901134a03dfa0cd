"""The module `dramatiq` loads in a worker process: settings, database and broker from the environment."""

from adapters.settings import Settings
from adapters.logs import setup_logging
from adapters.metrics_dir import prepare

settings = Settings.from_env()
setup_logging(settings.LOG_LEVEL)
prepare(settings)  # this worker process's metrics files, before anything below imports prometheus_client

from models.db import bind  # noqa: E402
from tasks.broker import setup_broker  # noqa: E402
from tasks.worker import run_dramatiq_workers_idle  # noqa: E402

bind(settings.DATABASE_URL, settings.DATABASE_MAX_CONNECTIONS)
broker = setup_broker(settings)
run_dramatiq_workers_idle()  # this process's worker threads sleep until a message arrives
