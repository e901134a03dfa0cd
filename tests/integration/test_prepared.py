"""Prepared statements on the hot path: planned once per connection, and still correct behind a pooler."""

from __future__ import annotations

import peewee

from models import prepared
from tests.integration.helpers import db

SQL = "SELECT %s::int + %s::int"


def server_statements() -> list[str]:
    """This test's statements the connection holds (a pooled connection may hold the app's own from earlier)."""
    return [row[0] for row in prepared.database.execute_sql("SELECT name FROM pg_prepared_statements")
            if row[0].startswith("vigil_test_")]


def test_a_statement_is_prepared_once_per_connection_and_gives_the_same_answers(postgres):
    with db():
        assert prepared.execute("vigil_test_add", SQL, (2, 3)).fetchone() == (5,)
        assert prepared.execute("vigil_test_add", SQL, (40, 2)).fetchone() == (42,)
        assert server_statements() == ["vigil_test_add"]


def test_a_statement_the_server_lost_runs_as_text_then_is_prepared_again(postgres):
    """PgBouncer in transaction mode, or DISCARD ALL, drops what this connection prepared."""
    with db():
        prepared.execute("vigil_test_add", SQL, (1, 1))
        prepared.database.execute_sql("DEALLOCATE ALL")
        assert prepared.execute("vigil_test_add", SQL, (20, 1)).fetchone() == (21,)
        assert server_statements() == []
        assert prepared.execute("vigil_test_add", SQL, (7, 7)).fetchone() == (14,)
        assert server_statements() == ["vigil_test_add"]


def test_a_statement_the_server_already_holds_is_executed_from_then_on(postgres):
    """A pooler may hand this connection a server connection that prepared it already: the next uses EXECUTE
    it, instead of trying PREPARE (refused, 42P05) every time."""
    with db():
        prepared.execute("vigil_test_held", SQL, (1, 2))
        prepared._prepared[prepared.database.connection()].clear()  # as if this process had not prepared it
        assert prepared.execute("vigil_test_held", SQL, (2, 2)).fetchone() == (4,)  # refused PREPARE: as text
        assert "vigil_test_held" in prepared._prepared[prepared.database.connection()]
        assert prepared.execute("vigil_test_held", SQL, (3, 2)).fetchone() == (5,)
        assert "vigil_test_held" in server_statements()


def test_a_plan_made_while_the_table_was_small_is_made_again_once_it_has_grown(postgres):
    """A fresh install prepares its statements while its tables hold a few rows; PostgreSQL keeps the generic
    plan it made then (a whole-table scan) for the connection's life unless the statement is prepared again."""
    lookup = "SELECT pad FROM vigil_test_growing WHERE key = %s"

    def plan() -> str:
        return "\n".join(row[0] for row in prepared.database.execute_sql(
            "EXPLAIN EXECUTE vigil_test_lookup (7)"))

    with db() as database:
        database.execute_sql("CREATE TEMP TABLE vigil_test_growing (key int, pad text)")
        database.execute_sql("CREATE INDEX ON vigil_test_growing (key)")
        database.execute_sql("INSERT INTO vigil_test_growing SELECT i, 'x' FROM generate_series(1, 3) i")
        database.execute_sql("ANALYZE vigil_test_growing")
        for _ in range(10):  # past PostgreSQL's five custom plans: the generic plan is the one kept
            assert prepared.execute("vigil_test_lookup", lookup, (7,)).fetchall() == []
        assert "Seq Scan" in plan()
        # grown, as a busy table grows between two ANALYZEs (one would make PostgreSQL plan again itself)
        database.execute_sql("INSERT INTO vigil_test_growing SELECT i, repeat('x', 200) FROM generate_series(4, 50000) i")
        assert "Seq Scan" in plan()  # the kept plan reads the whole table
        for _ in range(prepared.REPLAN_FROM):  # prepared again at its 64th run, planned again after five
            assert prepared.execute("vigil_test_lookup", lookup, (7,)).fetchall() == [("x" * 200,)]
        assert "Seq Scan" not in plan() and "Index" in plan()
        database.execute_sql("DEALLOCATE vigil_test_lookup")


def test_statements_are_prepared_again_ever_less_often():
    runs = [n for n in range(1, 300_000) if prepared.replan(n)]
    assert runs[:4] == [64, 128, 256, 512] and 65_536 in runs and 131_072 in runs and 196_608 in runs
    assert len(runs) == 14


def _later_table() -> None:
    prepared.database.execute_sql("CREATE TEMPORARY TABLE IF NOT EXISTS vigil_test_later (n int PRIMARY KEY)")
    prepared.database.execute_sql("DELETE FROM vigil_test_later")


def _later_rows() -> list[int]:
    return [n for (n,) in prepared.database.execute_sql("SELECT n FROM vigil_test_later ORDER BY n")]


INSERT = "INSERT INTO vigil_test_later (n) VALUES (%s)"


def test_a_statement_sent_later_is_seen_by_the_next_and_kept_by_the_commit(postgres):
    """models/db.PooledPostgres: a transaction's BEGIN and its `later` writes ride with its next statement."""
    with db():
        _later_table()
        with prepared.database.atomic():
            prepared.execute("vigil_test_later_insert", INSERT, (1,), later=True)
            prepared.execute("vigil_test_later_insert", INSERT, (2,), later=True)
            assert _later_rows() == [1, 2], "the next statement sees what was sent with it"
            prepared.execute("vigil_test_later_insert", INSERT, (3,), later=True)
        assert _later_rows() == [1, 2, 3], "the commit carried the last one"
        with prepared.database.atomic():
            pass  # nothing ran: nothing is sent, and the connection is usable after
        assert prepared.database.execute_sql("SELECT 1").fetchone() == (1,)


def test_a_later_statement_that_fails_fails_its_whole_transaction(postgres):
    with db():
        _later_table()
        prepared.database.execute_sql(INSERT, (7,))
        try:
            with prepared.database.atomic():
                prepared.execute("vigil_test_later_insert", INSERT, (8,), later=False)
                prepared.execute("vigil_test_later_insert", INSERT, (7,), later=True)  # a duplicate key
        except peewee.IntegrityError:
            pass
        else:
            raise AssertionError("the duplicate sent with the COMMIT did not fail it")
        assert _later_rows() == [7], "8 was rolled back with the duplicate"
        with prepared.database.atomic():  # the next transaction on the same connection is a fresh one
            prepared.execute("vigil_test_later_insert", INSERT, (9,), later=True)
        assert _later_rows() == [7, 9]


def test_a_rolled_back_transaction_drops_what_it_had_not_sent(postgres):
    with db():
        _later_table()
        with prepared.database.atomic() as transaction:
            prepared.execute("vigil_test_later_insert", INSERT, (4,), later=True)
            transaction.rollback()
        assert _later_rows() == []


def test_a_later_statement_whose_prepared_plan_was_lost_is_prepared_again_next_time(postgres):
    """Behind a pooler the server may have dropped the statement; it fails where it is sent, and the next use
    prepares it again instead of failing for good."""
    with db():
        _later_table()
        prepared.execute("vigil_test_later_insert", INSERT, (1,))
        prepared.database.execute_sql("DEALLOCATE ALL")
        try:
            with prepared.database.atomic():
                prepared.execute("vigil_test_later_insert", INSERT, (2,), later=True)
        except peewee.DatabaseError:
            pass
        with prepared.database.atomic():
            prepared.execute("vigil_test_later_insert", INSERT, (3,), later=True)
        assert _later_rows() == [1, 3]
