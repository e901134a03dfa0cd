"""Embedded, a runner's small POST of records is stored on the web's event loop when SQLite's write lock is free at
once (app/runner.store_records_now, issue 27). The loop must never wait: when another writer of this process has
its turn, or another process holds the file, nothing is stored there and the POST goes to a thread, which stores
it as before. On PostgreSQL, or for a big batch, it always goes to a thread."""

from __future__ import annotations

import sqlite3
import uuid
from datetime import timedelta

import pytest
from litestar.exceptions import NotAuthorizedException

from app.runner import NOW_MAX_LINES, store_records_answer, store_records_now
from models import utcnow
from models.db import bind, database
from models.devices import add_device
from models.migrate import migrate
from models.tables import CommandRun, Conversation, Monitor, RunRecord, User
from tests.conftest import TEST_DATABASE_URL
from tests.integration.helpers import db, transaction_held_elsewhere


@pytest.fixture()
def on_sqlite(postgres, broker, tmp_path):
    """The test's database is an embedded SQLite file; a stream watch on a device, its run started."""
    path = tmp_path / "vigil.db"
    bind(f"sqlite:///{path}")
    with db():
        migrate()
        user = User.create(email="owner@example.com", password_hash="x")
        device, token = add_device(user, "laptop", utcnow())
        chat = Conversation.create(user=user, external_id="on-the-loop")
        now = utcnow()
        monitor = Monitor.create(id=uuid.uuid4().hex, user=user, conversation=chat, description="errors",
                                 source={"type": "command", "device": "laptop", "mode": "stream", "command": "x"},
                                 check={"type": "regex", "pattern": "ERROR"}, interval_seconds=60,
                                 next_check_at=now, expires_at=now + timedelta(days=1))
        run = CommandRun.create(id=uuid.uuid4().hex, device=device, monitor=monitor.id, kind="stream", command="x",
                                status="running", acked_seq=1, created_at=now, started_at=now)
    yield path, token, run.id
    database.close()
    bind(TEST_DATABASE_URL)


def _lines(seq: int, *text: str) -> list[dict]:
    return [{"seq": seq, "kind": "lines", "lines": list(text)}]


def _stored(run_id: str) -> list[int]:
    with db():
        return [r.seq for r in RunRecord.select(RunRecord.seq).where(RunRecord.run == run_id).order_by(RunRecord.seq)]


def test_a_small_post_is_stored_on_the_loop_when_the_lock_is_free(on_sqlite):
    _, token, run_id = on_sqlite
    assert store_records_now(token, run_id, _lines(2, "ERROR one")) == ({"acked": 2}, 200)
    assert _stored(run_id) == [2]
    assert store_records_now(token, run_id, _lines(2, "ERROR one")) == ({"acked": 2}, 200), "a resend"
    assert _stored(run_id) == [2]
    with pytest.raises(NotAuthorizedException):  # the route answers it 401, as from a thread
        store_records_now("vgd_not-a-device", run_id, _lines(3, "x"))
    assert _stored(run_id) == [2]


def test_another_writers_turn_is_not_waited_for_on_the_loop(on_sqlite):
    _, token, run_id = on_sqlite
    with transaction_held_elsewhere():  # another thread of this process (the in-process worker, say) writing
        # were the loop to wait for the turn, this would hang until the writer let go, and then store
        assert store_records_now(token, run_id, _lines(2, "ERROR during another write")) is None
        assert _stored(run_id) == []
    assert store_records_answer(token, run_id, _lines(2, "ERROR during another write")) == ({"acked": 2}, 200)
    assert _stored(run_id) == [2]


def test_another_process_holding_the_file_is_not_waited_for_and_the_timeout_is_put_back(on_sqlite):
    path, token, run_id = on_sqlite
    cli = sqlite3.connect(path, isolation_level=None)  # `vigil token create` in another terminal, say
    cli.execute("BEGIN IMMEDIATE")
    try:
        assert store_records_now(token, run_id, _lines(2, "ERROR while the file is held")) is None
        assert _stored(run_id) == []
    finally:
        cli.execute("ROLLBACK")
        cli.close()
    with db():  # the pooled connection the loop used waits for the file again, as every other unit of work does
        assert database.execute_sql("PRAGMA busy_timeout").fetchone()[0] == 30_000
    assert store_records_now(token, run_id, _lines(2, "ERROR while the file is held")) == ({"acked": 2}, 200)


def test_a_big_batch_goes_to_a_thread(on_sqlite):
    _, token, run_id = on_sqlite
    many = [f"ERROR {n}" for n in range(NOW_MAX_LINES + 1)]
    assert store_records_now(token, run_id, _lines(2, *many)) is None
    assert _stored(run_id) == []
    assert store_records_answer(token, run_id, _lines(2, *many)) == ({"acked": 2}, 200)


def test_on_postgresql_a_post_always_goes_to_a_thread(postgres, broker):
    assert store_records_now("vgd_any", "any-run", _lines(2, "ERROR")) is None
