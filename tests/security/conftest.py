"""Security tests run on the integration fixtures: the real PostgreSQL and Redis, the app, a worker."""

import pytest

from tests.integration.conftest import *  # noqa: F401,F403  (fixtures: postgres, clean, settings, broker, client ...)
from tests.processes import VIGIL, serve_vigil, stop


@pytest.fixture()
def serve_debug(tmp_path):
    """`vigil serve` (embedded, SQLite) logging at DEBUG, with loopback sources allowed: (base, env, process, log).
    Whatever a test makes it do, its secrets must then appear nowhere in `log`."""
    env = {"VIGIL_DATA_DIR": str(tmp_path / "data"), "DATABASE_URL": "", "REDIS_URL": "", "SECRET_KEY": "",
           "ENCRYPTION_KEYS": "", "FETCH_ALLOW_LOOPBACK": "true", "LOG_LEVEL": "DEBUG",
           "API_URL": "", "JUDGE_BASE_URL": "", "JUDGE_API_KEY": "", "JUDGE_MODEL": "", "JUDGE_API_VERSION": "",
           "SCHEDULER_TICK_SECONDS": "0.2", "PYTHONUNBUFFERED": "1"}
    log = tmp_path / "serve.log"
    served = serve_vigil([VIGIL, "serve"], lambda port: {**env, "PUBLIC_API_BASE_URL": f"http://127.0.0.1:{port}"},
                         log)
    try:
        yield served.base, served.env, served.process, log
    finally:
        stop(served.process)
