"""The module `dramatiq` loads in a worker process: settings, database and broker from the environment."""

from models.db import bind
from tasks.broker import setup_broker
from adapters.settings import Settings
from adapters.logs import setup_logging

settings = Settings.from_env()
setup_logging(settings.LOG_LEVEL)
bind(settings.DATABASE_URL, settings.DATABASE_MAX_CONNECTIONS)
broker = setup_broker(settings)
