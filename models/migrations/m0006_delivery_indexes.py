"""Fewer indexes to write on every delivery.

(link_id, dedupe_key) is unique and starts with link_id, so the foreign key's own index on link_id only
cost a write per delivery. The sweep looks for deliveries nobody processed: a partial index holds just
those, so it stays small however many deliveries are kept.
"""

import peewee


def up(db: peewee.Database) -> None:
    db.execute_sql("DROP INDEX IF EXISTS delivery_link_id")
    db.execute_sql("DROP INDEX IF EXISTS delivery_processed_at_received_at")
    db.execute_sql("CREATE INDEX delivery_unprocessed ON deliveries (received_at) WHERE processed_at IS NULL")
