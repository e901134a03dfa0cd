"""The memory benchmark's worker baseline: Dramatiq on Redis with a peewee pool on PostgreSQL, nothing of Vigil.

    BARE_REDIS_URL=redis://… BARE_DATABASE=name python -m dramatiq bench.bare_worker --processes 1 --threads 4

One actor, `ping`, runs one query through the pool, opened and closed around it as Vigil's middleware does.
"""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from playhouse.pool import PooledPostgresqlDatabase

broker = RedisBroker(url=os.environ["BARE_REDIS_URL"])
dramatiq.set_broker(broker)
db = PooledPostgresqlDatabase(os.environ["BARE_DATABASE"], host="127.0.0.1", port=5432, user="vigil",
                              password="vigil", max_connections=32, stale_timeout=300, autoconnect=False)


@dramatiq.actor(max_retries=0)
def ping(n: int) -> None:
    db.connect(reuse_if_open=True)
    try:
        db.execute_sql("SELECT %s", (n,)).fetchall()
    finally:
        db.close()
