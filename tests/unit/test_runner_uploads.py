"""The uploader against a real HTTP server on 127.0.0.1: lines waiting after a 503 or a short answer are sent again
within seconds, whatever Retry-After the server asks for."""

import json
import threading
import time

import pytest

from runner.client import Backoff, Client
from runner.spool import RUNNING, Spool
from runner.uploads import RETRY_MAX_SECONDS, Uploader
from tests.httpd import Handler, serve


@pytest.fixture()
def spool(tmp_path):
    spool = Spool(str(tmp_path / "spool.sqlite3"))
    spool.claim("run-1", "stream", now=1.0, output=str(tmp_path / "run-1.out"))
    spool.append("run-1", [{"kind": "started", "pid": 7}, {"kind": "lines", "lines": ["line-1"]}], status=RUNNING)
    yield spool
    spool.close()


def records_server(answers: list):
    """A server whose records calls are answered from `answers` (status, headers, body), then acked in full;
    the seqs of each call it received go to `received`."""
    received: list = []

    class Records(Handler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seqs = [record["seq"] for record in body["records"]]
            received.append(seqs)
            status, headers, answer = answers.pop(0) if answers else (200, (), {"acked": max(seqs)})
            self.send(status, json.dumps(answer).encode(), (("Content-Type", "application/json"), *headers))

    return Records, received


def upload_until_acked(spool, handler, seconds: float) -> None:
    """Run the uploader until the spool holds no record; fail after `seconds` (records would wait far longer)."""
    with serve(handler) as base:
        uploader = Uploader(spool, Client(base, "token", "session"), lambda run_id: None, lambda run_id: None,
                            lambda exc: None)
        thread = threading.Thread(target=uploader.loop, daemon=True)
        thread.start()
        deadline = time.monotonic() + seconds
        try:
            while spool.pending_count():
                assert time.monotonic() < deadline, "the records were not sent again"
                time.sleep(0.05)
        finally:
            uploader.halt()
            thread.join(5)


def test_uploader_after_a_503_sends_again_within_its_cap_whatever_the_retry_after(spool):
    handler, received = records_server([(503, (("Retry-After", "3600"),), {"detail": "database is locked"})])
    upload_until_acked(spool, handler, seconds=RETRY_MAX_SECONDS * 4)
    assert received == [[1, 2], [1, 2]]


def test_uploader_after_a_short_ack_sends_the_rest_again_soon(spool):
    handler, received = records_server([(200, (), {"acked": 0})])
    upload_until_acked(spool, handler, seconds=RETRY_MAX_SECONDS * 4)
    assert received == [[1, 2], [1, 2]]


def test_backoff_doubles_to_its_most_and_caps_a_retry_after_there():
    backoff = Backoff(0.5, 5.0)
    assert [backoff.next() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    backoff.reset()
    assert backoff.next(3.0) == 3.0
    assert backoff.next(3600) == 5.0
