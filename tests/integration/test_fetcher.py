import datetime
import socket
import ssl
import threading
import time
import zlib
from http.server import ThreadingHTTPServer

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from engine.http import BlockedURL, FetchError, FetchPolicy, Fetcher
from tests.httpd import Handler as RouteHandler

MIB = 1024 * 1024
LOOPBACK = FetchPolicy(timeout=5, allow_loopback=True)


def _gzip_bomb(size: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"\0" * MIB
    return b"".join(packer.compress(block) for _ in range(size // MIB)) + packer.flush()


class Handler(RouteHandler):
    bomb = b""

    def route_page(self, _):
        self.send(200, b"hello vigil", [("Content-Type", "text/plain"), ("X-Test", "yes")])

    def route_missing(self, _):
        self.send(404, b"nothing here")

    def route_status(self, arg):
        self.send(int(arg), b"status body")

    def route_chain(self, arg):
        hops = int(arg)
        if hops == 0:
            self.send(200, b"end of chain")
        else:
            self.send(302, b"moved", [("Location", f"/chain/{hops - 1}")])

    def route_to(self, arg):
        self.send(302, b"", [("Location", arg)])

    def route_echo(self, _):
        self.send(200, str(self.headers).encode(), [("Set-Cookie", "session=abc; Path=/")])

    def route_big(self, _):
        self.send(200, b"x" * (2 * MIB))

    def route_bomb(self, _):
        self.send(200, Handler.bomb, [("Content-Encoding", "gzip")])

    def route_slowheaders(self, _):
        self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        try:
            for _ in range(1000):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.25)
        except OSError:
            pass

    def route_drip(self, _):
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        try:
            for _ in range(1000):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.5)
        except OSError:
            pass


class CountingServer(ThreadingHTTPServer):
    daemon_threads = True
    accepted = 0

    def get_request(self):
        self.accepted += 1
        return super().get_request()

    def handle_error(self, request, client_address):
        pass


@pytest.fixture(autouse=True)
def clean():
    """Overrides the package's database-cleaning fixture: these tests need no database."""
    yield


@pytest.fixture(scope="module")
def server():
    Handler.bomb = _gzip_bomb(50 * MIB)
    httpd = CountingServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _self_signed(directory) -> tuple[str, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    cert, key = _self_signed(tmp_path_factory.mktemp("tls"))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd = CountingServer(("127.0.0.1", 0), Handler)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd, cert
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def base(server):
    return f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def fetch():
    fetchers = []

    def make(policy=LOOPBACK, **options):
        fetchers.append(Fetcher(policy, **options))
        return fetchers[-1]
    yield make
    for fetcher in fetchers:
        fetcher.close()


def test_fetcher_allow_loopback_fetches_page(fetch, base):
    response = fetch().get(base + "/page")
    assert response.status == 200
    assert response.body == b"hello vigil"
    assert response.truncated is False
    assert response.url == base + "/page"
    assert response.headers["x-test"] == "yes"
    assert response.headers["content-type"] == "text/plain"


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "2130706433", "[::1]"])
def test_fetcher_default_policy_blocks_loopback(fetch, server, host):
    url = f"http://{host}:{server.server_address[1]}/page"
    with pytest.raises(BlockedURL) as info:
        fetch(FetchPolicy(timeout=5)).get(url)
    assert "loopback" in info.value.message
    assert info.value.unreachable is False


@pytest.mark.parametrize("target", ["http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/"])
def test_fetcher_redirect_to_internal_address_blocked_fast(fetch, base, target):
    started = time.monotonic()
    with pytest.raises(BlockedURL):
        fetch().get(f"{base}/to/{target}")
    assert time.monotonic() - started < 1


@pytest.mark.parametrize("target", ["ftp://example.com/", "file:///etc/passwd", "http://evil@127.0.0.1/"])
def test_fetcher_redirect_to_unusable_url_blocked(fetch, base, target):
    with pytest.raises(BlockedURL) as info:
        fetch().get(f"{base}/to/{target}")
    assert "redirected" in info.value.message


def test_fetcher_five_redirects_followed(fetch, base):
    response = fetch().get(base + "/chain/5")
    assert response.body == b"end of chain"
    assert response.url == base + "/chain/0"


def test_fetcher_six_redirects_refused(fetch, base):
    with pytest.raises(FetchError) as info:
        fetch().get(base + "/chain/6")
    assert "more than 5 redirects" in info.value.message
    assert info.value.unreachable is False


def test_fetcher_large_body_truncated_at_max_bytes(fetch, base):
    response = fetch(FetchPolicy(timeout=5, allow_loopback=True, max_bytes=MIB)).get(base + "/big")
    assert response.truncated is True
    assert response.body == b"x" * MIB


def test_fetcher_body_exactly_max_bytes_not_truncated(fetch, base):
    policy = FetchPolicy(timeout=5, allow_loopback=True, max_bytes=len(b"hello vigil"))
    response = fetch(policy).get(base + "/page")
    assert response.truncated is False
    assert response.body == b"hello vigil"


def test_fetcher_gzip_bomb_stops_at_max_bytes(fetch, base):
    started = time.monotonic()
    response = fetch(FetchPolicy(timeout=5, allow_loopback=True, max_bytes=MIB)).get(base + "/bomb")
    assert response.truncated is True
    assert len(response.body) == MIB
    assert time.monotonic() - started < 2


def test_fetcher_dripping_server_times_out_at_deadline(fetch, base):
    started = time.monotonic()
    with pytest.raises(FetchError) as info:
        fetch(FetchPolicy(timeout=2, allow_loopback=True)).get(base + "/drip")
    assert 1.5 < time.monotonic() - started < 3
    assert info.value.unreachable is True
    assert "timed out" in info.value.message


def test_fetcher_not_found_is_not_unreachable(fetch, base):
    with pytest.raises(FetchError) as info:
        fetch().get(base + "/nowhere")
    assert info.value.message == "The page answered 404 Not Found."
    assert info.value.unreachable is False


@pytest.mark.parametrize("status, text", [(503, "503 Service Unavailable"), (429, "429 Too Many Requests"),
                                          (500, "500 Internal Server Error")])
def test_fetcher_server_errors_are_unreachable(fetch, base, status, text):
    with pytest.raises(FetchError) as info:
        fetch().get(f"{base}/status/{status}")
    assert info.value.message == f"The server answered {text}."
    assert info.value.unreachable is True


def test_fetcher_connection_refused_is_unreachable(fetch):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(FetchError) as info:
        fetch().get(f"http://127.0.0.1:{port}/")
    assert info.value.unreachable is True
    assert not isinstance(info.value, BlockedURL)
    assert "refused" in info.value.message


def test_fetcher_keep_alive_reuses_connection(fetch, server, base):
    fetcher = fetch()
    before = server.accepted
    fetcher.get(base + "/page")
    fetcher.get(base + "/page")
    fetcher.get(base + "/chain/2")
    assert server.accepted - before == 1


def test_fetcher_rejects_bad_url_before_connecting(fetch):
    with pytest.raises(BlockedURL) as info:
        fetch().get("gopher://example.com/")
    assert info.value.message == "The url must start with http:// or https:// (got 'gopher')."


def test_fetcher_slow_headers_time_out_at_deadline(fetch, base):
    started = time.monotonic()
    with pytest.raises(FetchError) as info:
        fetch(FetchPolicy(timeout=1, allow_loopback=True)).get(base + "/slowheaders")
    assert time.monotonic() - started < 2
    assert info.value.unreachable is True
    assert "timed out" in info.value.message


def test_fetcher_https_verifies_certificate_by_host_name(fetch, tls_server):
    httpd, cert = tls_server
    fetcher = fetch(ca_certs=cert)
    response = fetcher.get(f"https://localhost:{httpd.server_address[1]}/page")
    assert response.body == b"hello vigil"
    with pytest.raises(FetchError) as info:
        fetcher.get(f"https://127.0.0.1:{httpd.server_address[1]}/page")
    assert "secure connection" in info.value.message


def test_fetcher_https_untrusted_certificate_refused(fetch, tls_server):
    httpd, _ = tls_server
    with pytest.raises(FetchError) as info:
        fetch().get(f"https://localhost:{httpd.server_address[1]}/page")
    assert info.value.unreachable is True
    assert "secure connection" in info.value.message


def test_fetcher_cross_host_redirect_drops_credentials(fetch, server, base):
    echo = f"http://localhost:{server.server_address[1]}/echo"
    response = fetch().get(f"{base}/to/{echo}", headers={"Authorization": "Bearer s3cret", "X-Keep": "1"})
    assert b"s3cret" not in response.body
    assert b"X-Keep: 1" in response.body


def test_fetcher_sends_user_agent_and_keeps_no_cookies(fetch, base):
    fetcher = fetch()
    fetcher.get(base + "/echo")
    body = fetcher.get(base + "/echo").body
    assert b"User-Agent: Vigil/0.1 (+monitor)" in body
    assert b"session=abc" not in body


def test_fetcher_https_blocks_loopback_before_handshake(fetch, tls_server):
    httpd, _ = tls_server
    with pytest.raises(BlockedURL):
        fetch(FetchPolicy(timeout=5)).get(f"https://localhost:{httpd.server_address[1]}/page")


def test_fetcher_https_handshake_that_drips_times_out_at_deadline(fetch):
    """A server that sends its TLS record a byte at a time, never pausing as long as the fetch's timeout: the
    handshake still ends at the deadline, not at the end of the record (~55 minutes)."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def drip():
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)  # the ClientHello
            record = b"\x16\x03\x03\x40\x00" + b"\x02" * 0x4000  # a handshake record, 16 KiB long
            for byte in record:
                if stop.is_set():
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return
                time.sleep(0.2)

    threading.Thread(target=drip, daemon=True).start()
    started = time.monotonic()
    try:
        with pytest.raises(FetchError) as info:
            fetch(FetchPolicy(timeout=1, allow_loopback=True)).get(
                f"https://localhost:{listener.getsockname()[1]}/page")
    finally:
        stop.set()
        listener.close()
    assert time.monotonic() - started < 3
    assert "timed out" in info.value.message


def test_fetcher_https_keep_alive_reuses_connection(fetch, tls_server):
    httpd, cert = tls_server
    fetcher = fetch(ca_certs=cert)
    before = httpd.accepted
    bodies = [fetcher.get(f"https://localhost:{httpd.server_address[1]}/page").body for _ in range(3)]
    assert bodies == [b"hello vigil"] * 3
    assert httpd.accepted - before == 1
