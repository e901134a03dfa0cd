"""The runner's kept-alive connections against a real HTTP/1.1 server on 127.0.0.1: a busy stream's POSTs share
one connection, a connection the server dropped while idle costs nothing but a fresh one, and a proxy from the
environment still carries the calls (runner/keepalive.py)."""

import json
import threading

import pytest

from runner.client import Client, Unreachable
from runner.keepalive import direct
from tests.httpd import Handler, serve


def counting_server(drop_after_first: bool = False):
    """Acks every records POST; `connections` counts the TCP connections it was given. With `drop_after_first`
    it closes the first connection after answering, without saying so (as a server whose keep-alive ran out)."""
    connections: list = []
    lock = threading.Lock()

    class Counting(Handler):
        def setup(self):
            super().setup()
            with lock:
                connections.append(self.client_address)

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seqs = [record["seq"] for record in body["records"]]
            self.send(200, json.dumps({"acked": max(seqs)}).encode(), (("Content-Type", "application/json"),))
            if drop_after_first and len(connections) == 1:
                self.close_connection = True

    return Counting, connections


def lines(seq: int) -> list:
    return [{"seq": seq, "kind": "lines", "lines": [f"line {seq}"]}]


def test_a_streams_posts_share_one_connection(monkeypatch):
    monkeypatch.delenv("http_proxy", raising=False)
    monkeypatch.delenv("HTTP_PROXY", raising=False)
    handler, connections = counting_server()
    with serve(handler) as base:
        client = Client(base, "token", "session")
        assert [client.records("run-1", lines(seq)) for seq in range(1, 6)] == [1, 2, 3, 4, 5]
    assert len(connections) == 1, connections


def test_a_connection_the_server_closed_while_idle_is_replaced_and_the_call_still_goes_through(monkeypatch):
    monkeypatch.delenv("http_proxy", raising=False)
    monkeypatch.delenv("HTTP_PROXY", raising=False)
    handler, connections = counting_server(drop_after_first=True)
    with serve(handler) as base:
        client = Client(base, "token", "session")
        assert client.records("run-1", lines(1)) == 1
        assert client.records("run-1", lines(2)) == 2, "sent again on a fresh connection"
        assert client.records("run-1", lines(3)) == 3
    assert len(connections) == 2, connections


def test_calls_after_abort_fail_as_unreachable_even_on_a_kept_connection(monkeypatch):
    monkeypatch.delenv("http_proxy", raising=False)
    monkeypatch.delenv("HTTP_PROXY", raising=False)
    handler, _ = counting_server()
    with serve(handler) as base:
        client = Client(base, "token", "session")
        assert client.records("run-1", lines(1)) == 1
        client.abort()
        with pytest.raises(Unreachable):
            client.records("run-1", lines(2))


def test_a_proxy_from_the_environment_is_still_used(monkeypatch):
    """With http_proxy set the calls go through urllib, which sends them to the proxy (here the server itself,
    which sees the absolute-form request line a proxy gets)."""
    paths: list = []

    class Proxy(Handler):
        def do_POST(self):
            paths.append(self.path)
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send(200, b'{"acked": 1}', (("Content-Type", "application/json"),))

    with serve(Proxy) as proxy:
        monkeypatch.setenv("http_proxy", proxy)
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("NO_PROXY", raising=False)
        assert not direct("http://vigil.example:8000")
        assert Client("http://vigil.example:8000", "token", "session").records("run-1", lines(1)) == 1
    assert paths == ["http://vigil.example:8000/api/runner/runs/run-1/records"]


def test_no_proxy_and_no_environment_proxy_go_direct(monkeypatch):
    monkeypatch.setenv("http_proxy", "http://proxy.example:3128")
    monkeypatch.setenv("no_proxy", "vigil.internal")
    assert direct("http://vigil.internal:8000")
    assert not direct("http://vigil.example:8000")
    monkeypatch.delenv("http_proxy")
    monkeypatch.delenv("HTTP_PROXY", raising=False)
    assert direct("http://vigil.example:8000")
