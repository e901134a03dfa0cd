"""Security tests run on the integration fixtures: the real PostgreSQL and Redis, the app, a worker."""

from tests.integration.conftest import *  # noqa: F401,F403  (fixtures: postgres, clean, settings, broker, client ...)
