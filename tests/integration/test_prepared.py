"""Prepared statements on the hot path: planned once per connection, and still correct behind a pooler."""

from __future__ import annotations

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
