"""What a migration's frozen models are built from: a base bound to the migration's database, and stand-ins for
the tables a new table points at (only their names matter to a foreign key). Migrations keep their own column
lists, frozen as they were written; only these two never change."""

import peewee


def base_model(db: peewee.Database) -> type[peewee.Model]:
    class Base(peewee.Model):
        class Meta:
            database = db
    return Base


def stand_in(base: type[peewee.Model], table_name: str) -> type[peewee.Model]:
    """A model for an existing table, known by its name and primary key alone."""
    return type(f"StandIn_{table_name}", (base,), {"Meta": type("Meta", (), {"table_name": table_name})})
