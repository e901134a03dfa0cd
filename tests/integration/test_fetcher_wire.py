"""The fetcher on the wire: a raw TCP server on 127.0.0.1 answers each request with scripted bytes and records the
bytes it was sent, so a test sees exactly what Vigil wrote (the request head) and what it made of an answer
(framing, codings, interim answers, a connection closed under it)."""

from __future__ import annotations

import gzip
import socket
import threading
import zlib

import pytest

from engine.http import FetchError, FetchPolicy, Fetcher, Validators

LOOPBACK = FetchPolicy(timeout=5, allow_loopback=True)


class Scripted:
    """Accepts connections; for each request read (its head, and a body of the Content-Length it gave) sends the
    next scripted answer, then keeps the connection open unless the answer is marked to close it."""

    def __init__(self, answers: list[bytes | tuple[bytes, str]]):
        self.answers = list(answers)
        self.requests: list[bytes] = []
        self.connections = 0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buffer = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                while len(buffer) < length:
                    buffer += conn.recv(65536)
                body, buffer = buffer[:length], buffer[length:]
                with self._lock:
                    self.requests.append(head + b"\r\n\r\n" + body)
                    answer = self.answers.pop(0) if self.answers else b"HTTP/1.1 500 Out of script\r\n\r\n"
                then = "keep"
                if isinstance(answer, tuple):
                    answer, then = answer
                conn.sendall(answer)
                if then == "close":
                    return

    def close(self) -> None:
        self._sock.close()


@pytest.fixture(autouse=True)
def clean():
    """Overrides the package's database-cleaning fixture: these tests need no database."""
    yield


@pytest.fixture
def scripted():
    servers, fetchers = [], []

    def make(*answers):
        servers.append(Scripted(list(answers)))
        fetchers.append(Fetcher(LOOPBACK))
        return servers[-1], fetchers[-1]
    yield make
    for fetcher in fetchers:
        fetcher.close()
    for server in servers:
        server.close()


def ok(body: bytes = b"hello", *headers: str) -> bytes:
    extra = "".join(f"{h}\r\n" for h in headers)
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


def head_lines(request: bytes) -> list[str]:
    return request.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")


def test_the_request_head_is_what_a_server_expects(scripted):
    server, fetcher = scripted(ok())
    fetcher.get(server.url + "/a%7eb/caf\u00e9?q=1#frag", validators=Validators('"v1"', "Wed, 21 Oct 2026 07:28:00 GMT"))
    lines = head_lines(server.requests[0])
    assert lines[0] == "GET /a~b/caf%C3%A9?q=1 HTTP/1.1"  # normalized and quoted as requests did; no fragment
    assert f"Host: 127.0.0.1:{server.port}" in lines
    assert 'If-None-Match: "v1"' in lines and "If-Modified-Since: Wed, 21 Oct 2026 07:28:00 GMT" in lines
    assert "Accept-Encoding: gzip, deflate" in lines and "Connection: keep-alive" in lines
    assert not any(line.lower().startswith("content-length") for line in lines)


def test_a_post_carries_its_body_and_its_length(scripted):
    server, fetcher = scripted(ok(b"{}"), ok(b"{}"))
    response = fetcher.call("POST", server.url + "/hook", {"Content-Type": "application/json"}, b'{"a": 1}')
    assert response.status == 200
    assert server.requests[0].endswith(b'\r\n\r\n{"a": 1}')
    assert "Content-Length: 8" in head_lines(server.requests[0])
    fetcher.call("POST", server.url + "/empty")  # no body: a length of 0, so the server does not wait for one
    assert "Content-Length: 0" in head_lines(server.requests[1])


@pytest.mark.parametrize("name, value", [("X-Token", "secret-part\r\nX-Injected: 1"),
                                         ("X-Token", "secret-part\nX-Injected: 1"),
                                         ("X Token", "secret-part"), ("X-Token", "secret-part\x00"),
                                         ("X-Token", "secret-part \u2713")])  # outside Latin-1
def test_a_header_that_would_break_the_request_is_refused_without_its_value(scripted, name, value):
    server, fetcher = scripted(ok())
    with pytest.raises(FetchError) as info:
        fetcher.call("GET", server.url + "/", {name: value})
    assert "secret-part" not in info.value.message  # a tool's header values are secrets
    assert "header" in info.value.message
    assert server.requests == [] and server.connections == 0  # refused before connecting: nothing was sent


def test_a_refused_header_leaves_the_kept_alive_connection_in_use(scripted):
    server, fetcher = scripted(ok(b"one"), ok(b"two"))
    assert fetcher.get(server.url + "/").body == b"one"
    with pytest.raises(FetchError):
        fetcher.call("GET", server.url + "/", {"X-Token": "a\r\nb"})
    assert fetcher.get(server.url + "/").body == b"two"
    assert (server.connections, len(server.requests)) == (1, 2)


def test_a_kept_alive_connection_carries_the_next_request(scripted):
    server, fetcher = scripted(ok(b"one"), ok(b"two"), ok(b"three"))
    assert [fetcher.get(server.url + "/").body for _ in range(3)] == [b"one", b"two", b"three"]
    assert server.connections == 1


def test_a_connection_the_server_closed_while_idle_is_replaced(scripted):
    """The server closes after answering, without saying so: the next get opens a new connection and succeeds."""
    server, fetcher = scripted((ok(b"one"), "close"), ok(b"two"))
    assert fetcher.get(server.url + "/").body == b"one"
    assert fetcher.get(server.url + "/").body == b"two"
    assert server.connections == 2


def test_an_answer_that_asks_to_close_is_not_reused(scripted):
    server, fetcher = scripted(ok(b"one", "Connection: close"), ok(b"two"))
    assert fetcher.get(server.url + "/").body == b"one"
    assert fetcher.get(server.url + "/").body == b"two"
    assert server.connections == 2


def test_a_body_without_length_ends_with_the_connection(scripted):
    server, fetcher = scripted((b"HTTP/1.1 200 OK\r\n\r\nuntil the end", "close"), ok(b"next"))
    assert fetcher.get(server.url + "/").body == b"until the end"
    assert fetcher.get(server.url + "/").body == b"next"
    assert server.connections == 2


def test_a_chunked_body_is_joined_and_the_connection_kept(scripted):
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n vigil\r\n0\r\n\r\n"
    server, fetcher = scripted(chunked, ok(b"again"))
    assert fetcher.get(server.url + "/").body == b"hello vigil"
    assert fetcher.get(server.url + "/").body == b"again"
    assert server.connections == 1


def test_interim_answers_are_skipped(scripted):
    early = b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
    server, fetcher = scripted(early + ok(b"the page", "X-Final: yes"))
    response = fetcher.get(server.url + "/")
    assert (response.status, response.body, response.headers["x-final"]) == (200, b"the page", "yes")
    assert "link" not in response.headers


def test_endless_interim_answers_are_a_read_failure(scripted):
    server, fetcher = scripted(b"HTTP/1.1 103 Early Hints\r\n\r\n" * 11 + ok())
    with pytest.raises(FetchError, match="failed while reading the page"):
        fetcher.get(server.url + "/")
    server2, fetcher2 = scripted(b"HTTP/1.1 103 Early Hints\r\n\r\n" * 10 + ok(b"the page"))
    assert fetcher2.get(server2.url + "/").body == b"the page"  # ten are still skipped


def test_repeated_and_folded_headers_are_merged(scripted):
    server, fetcher = scripted(ok(b"x", "Vary: Accept", "vary: Cookie", "X-Long: first", "  second"))
    headers = fetcher.get(server.url + "/").headers
    assert headers["vary"] == "Accept, Cookie"
    assert headers["x-long"] == "first second"


@pytest.mark.parametrize("coding, encode", [
    ("gzip", gzip.compress),
    ("x-gzip", gzip.compress),
    ("deflate", zlib.compress),  # zlib-wrapped, as the standard says
    ("deflate", lambda data: zlib.compress(data)[2:-4]),  # raw, as many servers send it
    ("gzip", lambda data: gzip.compress(data[:4]) + gzip.compress(data[4:])),  # two gzip members in a row
])
def test_coded_bodies_are_decoded(scripted, coding, encode):
    server, fetcher = scripted(ok(encode(b"decoded page"), f"Content-Encoding: {coding}"))
    assert fetcher.get(server.url + "/").body == b"decoded page"


def test_a_coding_not_asked_for_is_read_as_sent(scripted):
    server, fetcher = scripted(ok(b"\x1b\x00brotli?", "Content-Encoding: br"))
    assert fetcher.get(server.url + "/").body == b"\x1b\x00brotli?"


def test_a_corrupt_gzip_body_is_a_read_failure(scripted):
    server, fetcher = scripted(ok(b"\x1f\x8bnot gzip at all", "Content-Encoding: gzip"))
    with pytest.raises(FetchError) as info:
        fetcher.get(server.url + "/")
    assert info.value.message == f"The connection to 127.0.0.1:{server.port} failed while reading the page."


def test_a_decoded_body_is_cut_at_the_cap_without_inflating_past_it(scripted):
    bomb = gzip.compress(b"\0" * (8 * 1024 * 1024))
    server, _ = scripted(ok(bomb, "Content-Encoding: gzip"))
    fetcher = Fetcher(FetchPolicy(timeout=5, allow_loopback=True, max_bytes=1000))
    try:
        response = fetcher.get(server.url + "/")
    finally:
        fetcher.close()
    assert (len(response.body), response.truncated) == (1000, True)


def test_too_many_headers_is_a_read_failure_not_a_hang(scripted):
    many = "".join(f"X-{i}: {i}\r\n" for i in range(150))
    server, fetcher = scripted(f"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n{many}\r\n".encode())
    with pytest.raises(FetchError, match="failed while reading the page"):
        fetcher.get(server.url + "/")


def test_endless_folded_lines_are_a_read_failure_not_a_growing_header(scripted):
    folded = "".join(f" more {i}\r\n" for i in range(150))
    server, fetcher = scripted(f"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Long: start\r\n{folded}\r\n".encode())
    with pytest.raises(FetchError, match="failed while reading the page"):
        fetcher.get(server.url + "/")


def test_a_head_request_reads_no_body_and_keeps_the_connection(scripted):
    server, fetcher = scripted(b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n", ok(b"after"))
    response = fetcher.call("HEAD", server.url + "/")
    assert (response.status, response.body, response.headers["content-length"]) == (200, b"", "5000")
    assert fetcher.get(server.url + "/").body == b"after"
    assert server.connections == 1


def test_a_get_the_server_dropped_unanswered_on_a_reused_connection_is_sent_again(scripted):
    """The race a pool cannot see coming: the connection looked open, the server closed it on the request."""
    server, fetcher = scripted(ok(b"one"), (b"", "close"), ok(b"two"))
    assert fetcher.get(server.url + "/").body == b"one"
    assert fetcher.get(server.url + "/").body == b"two"
    assert (server.connections, len(server.requests)) == (2, 3)


def test_a_post_the_server_dropped_unanswered_is_not_sent_again(scripted):
    """It may have been carried out before the connection went: sending it again could do it twice."""
    server, fetcher = scripted(ok(b"one"), (b"", "close"), ok(b"two"))
    fetcher.call("POST", server.url + "/", body=b"first")
    with pytest.raises(FetchError, match="failed while reading the page"):
        fetcher.call("POST", server.url + "/", body=b"second")
    assert len(server.requests) == 2


def test_only_the_origins_used_last_keep_their_connections(scripted):
    """The fetcher keeps idle connections for its 16 latest origins: the 17th closes the oldest's, and a get
    to that one opens a new connection while the latest's is reused."""
    made = [scripted(ok(b"first"), ok(b"again")) for _ in range(17)]
    fetcher = made[0][1]
    for server, _ in made:
        assert fetcher.get(server.url + "/").body == b"first"
    assert fetcher.get(made[0][0].url + "/").body == b"again"
    assert fetcher.get(made[-1][0].url + "/").body == b"again"
    assert (made[0][0].connections, made[-1][0].connections) == (2, 1)
