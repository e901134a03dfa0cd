"""The runner's records POST answered below Litestar (app/runner_records.py, issue 27) answers as the Litestar
route does: a real `vigil web` on the integration database and the in-process app are sent the same requests, bad
and good, and give the same status and body; every answer carries the security headers; an unknown token or
someone else's run is refused and nothing is stored."""

from __future__ import annotations

import json
import socket

import pytest
import requests

from app.headers import HEADERS
from app.json_depth import MAX_DEPTH
from models.tables import RunRecord
from tests.integration.helpers import db, running_stack
from tests.integration.test_runner_api import pair, poll, runner

COMMAND = "tail -f /dev/null"


def _stream_run(client, owner, token: str) -> str:
    """A stream command monitor on the device of `token`, and its run's id (from the device's poll)."""
    created = client.post("/api/tool/monitor", headers={"Authorization": f"Bearer {owner[1]}"}, json={
        "action": "monitor_create", "context": {"conversation_id": "records-route"},
        "arguments": {"description": "errors", "source": {"type": "command", "device": "laptop", "mode": "stream",
                                                          "command": COMMAND}}}).json()
    assert created["ok"], created
    [assignment] = poll(client, token).json()["assignments"]
    return assignment["run_id"]


@pytest.fixture()
def served(tmp_path, postgres):
    with running_stack(tmp_path, worker=False) as stack:
        yield stack.base


def test_served_and_in_process_records_answers_are_the_same(served, client, owner):
    device = pair(client, owner[0])
    run_id = _stream_run(client, owner, device["token"])
    other = pair(client, owner[0], name="desktop")
    deep = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    cases = {
        "no token": (None, f"/api/runner/runs/{run_id}/records", json.dumps({"records": [{"seq": 1, "kind": "started"}]})),
        "unknown token": ("vgd_not-a-device", f"/api/runner/runs/{run_id}/records",
                          json.dumps({"records": [{"seq": 1, "kind": "started"}]})),
        "not json": (device["token"], f"/api/runner/runs/{run_id}/records", "{records: ["),
        "too deep": (device["token"], f"/api/runner/runs/{run_id}/records", '{"records": ' + deep + "}"),
        "no records": (device["token"], f"/api/runner/runs/{run_id}/records", json.dumps({"records": []})),
        "bad kind": (device["token"], f"/api/runner/runs/{run_id}/records",
                     json.dumps({"records": [{"seq": 1, "kind": "shout"}]})),
        "record too large": (device["token"], f"/api/runner/runs/{run_id}/records",
                             json.dumps({"records": [{"seq": 1, "kind": "lines", "lines": ["x" * 300_000]}]})),
        "another device's run": (other["token"], f"/api/runner/runs/{run_id}/records",
                                 json.dumps({"records": [{"seq": 1, "kind": "started"}]})),
        "unknown run": (device["token"], "/api/runner/runs/0123456789abcdef/records",
                        json.dumps({"records": [{"seq": 1, "kind": "started"}]})),
    }
    for name, (token, path, body) in cases.items():
        headers = {"Content-Type": "application/json", **(runner(token) if token else {})}
        over_http = requests.post(f"{served}{path}", data=body.encode(), headers=headers, timeout=10)
        in_process = client.post(path, content=body.encode(), headers=headers)
        assert over_http.status_code == in_process.status_code, (name, over_http.text, in_process.text)
        assert over_http.status_code >= 400, (name, over_http.text)
        if name not in ("not json",):  # Litestar words a body it can't parse its own way
            assert over_http.json() == in_process.json(), (name, over_http.text, in_process.text)
        assert over_http.headers["Cache-Control"] == "no-store", name
        for header, value in HEADERS:
            assert over_http.headers[header.decode()] == value.decode(), (name, header)
    with db():
        assert RunRecord.select().count() == 0, "a refused POST stored a record"

    # the real thing, twice (a resend): stored once, acked the same, over HTTP as in process
    body = {"records": [{"seq": 1, "kind": "started", "pid": 7}, {"seq": 2, "kind": "lines", "lines": ["ok"]}]}
    first = requests.post(f"{served}/api/runner/runs/{run_id}/records", json=body, headers=runner(device["token"]),
                          timeout=10)
    again = client.post(f"/api/runner/runs/{run_id}/records", json=body, headers=runner(device["token"]))
    assert first.status_code == again.status_code == 200 and first.json() == again.json() == {"acked": 2}
    with db():
        assert [r.seq for r in RunRecord.select().order_by(RunRecord.seq)] == [1, 2]


def test_a_body_over_the_cap_is_refused_before_it_is_read(served, client, owner):
    device = pair(client, owner[0])
    host, port = served.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"POST /api/runner/runs/abc/records HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                     f"Authorization: Bearer {device['token']}\r\nContent-Length: {2 * 1024 * 1024}\r\n\r\n".encode())
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), head
    assert b"connection: close" in head.lower()
    assert json.loads(payload)["detail"] == ("The request body is over 1048576 bytes (API_MAX_BODY_BYTES); "
                                             "send less.")
