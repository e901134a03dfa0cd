"""The guarded forward proxy a rendered page's requests must pass (adapters/egress_proxy.py), driven over real sockets:
CONNECT and absolute-form GETs to loopback (by address and by a name that resolves to it) are refused with 403 and
never reach the listener; with FETCH_ALLOW_LOOPBACK (the tests' switch) the same listener is reached, while one that
is Vigil's own (WEB_LISTEN_ADDRESSES) stays refused; with OUTBOUND_PROXY it chains through the operator's proxy.
Each refusal is shown beside an allowed request in the same setting, so none passes because the proxy was down."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from adapters.egress_proxy import start_guarded_proxy
from adapters.settings import Settings
from tests.conftest import REQUIRE_SERVICES
from tests.forward_proxy import ForwardProxy


class Listener:
    """An HTTP server on 127.0.0.1 that counts the requests that reached it."""

    def __init__(self) -> None:
        listener = self
        self.hits: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                listener.hits.append(self.path)
                body = b"reached " + self.path.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def listener():
    served = Listener()
    yield served
    served.close()


def proxied(proxy, url: str) -> requests.Response:
    """A plain-http GET through `proxy`, as a browser sends it: absolute-form."""
    session = requests.Session()
    session.trust_env = False
    return session.get(url, proxies={"http": proxy.url}, timeout=10)


def tunnel(proxy, authority: str, path: str = "/tunnel") -> tuple[int, bytes]:
    """CONNECT `authority` through `proxy`; when it opens, a plain GET inside the tunnel. (status, what came back)."""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
        sock.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
        answer = _read_head(sock)
        status = int(answer.split(b" ", 2)[1])
        if status != 200:
            return status, answer
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        return status, data


def _read_head(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(1)
        if not chunk:
            break
        data += chunk
    if b"Content-Length:" in data:
        length = int(data.split(b"Content-Length: ")[1].split(b"\r\n")[0])
        while len(data.split(b"\r\n\r\n", 1)[1]) < length:
            data += sock.recv(65536)
    return data


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_browser_proxy_refuses_loopback_by_address_and_by_name(listener, host):
    with start_guarded_proxy(Settings()) as proxy:
        answer = proxied(proxy, f"http://{host}:{listener.port}/secret?token=abc")
        status, said = tunnel(proxy, f"{host}:{listener.port}")
        assert proxy.refused == 2 and proxy.carried == 0
    assert answer.status_code == 403
    assert "a loopback address (this machine)" in answer.text
    assert status == 403 and b"a loopback address" in said
    assert listener.hits == []
    refusal = proxy.refusals[-1]
    assert (refusal.host, refusal.port) == (host, listener.port)


def test_browser_proxy_carries_allowed_hosts_and_refuses_vigil_itself(listener):
    """FETCH_ALLOW_LOOPBACK lets the page server through; a second listener that is Vigil's own web stays refused."""
    own = Listener()
    try:
        settings = Settings(FETCH_ALLOW_LOOPBACK=True, WEB_LISTEN_ADDRESSES=f"127.0.0.1:{own.port}")
        with start_guarded_proxy(settings) as proxy:
            allowed = proxied(proxy, f"http://127.0.0.1:{listener.port}/page?q=1")
            status, through = tunnel(proxy, f"localhost:{listener.port}")
            refused = proxied(proxy, f"http://127.0.0.1:{own.port}/api/monitors")
            own_status, _ = tunnel(proxy, f"127.0.0.1:{own.port}")
        assert allowed.status_code == 200 and allowed.text == "reached /page?q=1"
        assert status == 200 and through.endswith(b"reached /tunnel")
        assert refused.status_code == 403 and "which is Vigil itself" in refused.text
        assert own_status == 403
        assert listener.hits == ["/page?q=1", "/tunnel"] and own.hits == []
    finally:
        own.close()


def test_browser_proxy_refuses_private_and_metadata_targets():
    with start_guarded_proxy(Settings(FETCH_ALLOW_LOOPBACK=True)) as proxy:
        for authority, reason in (("10.0.0.1:80", "a private address"),
                                  ("169.254.169.254:80", "the cloud metadata address")):
            answer = proxied(proxy, f"http://{authority}/latest/meta-data/")
            assert answer.status_code == 403 and reason in answer.text
            status, said = tunnel(proxy, authority)
            assert status == 403 and reason.encode() in said


def test_browser_proxy_answers_what_is_not_a_proxy_request(listener):
    with start_guarded_proxy(Settings(FETCH_ALLOW_LOOPBACK=True)) as proxy:
        direct = requests.get(f"{proxy.url}/page", timeout=10)  # origin-form: not a proxy request
        status, _ = tunnel(proxy, "127.0.0.1")  # CONNECT without a port
    assert direct.status_code == 400 and status == 400
    assert listener.hits == []


def test_browser_proxy_chains_through_the_outbound_proxy(listener):
    """With OUTBOUND_PROXY the guarded proxy still checks, then asks the operator's proxy (with its credentials)."""
    with ForwardProxy(require="Basic dTpwQHNz") as upstream:  # u:p@ss
        settings = Settings(FETCH_ALLOW_LOOPBACK=True, OUTBOUND_PROXY=f"http://u:p%40ss@127.0.0.1:{upstream.port}")
        with start_guarded_proxy(settings) as proxy:
            allowed = proxied(proxy, f"http://127.0.0.1:{listener.port}/chained")
            status, through = tunnel(proxy, f"127.0.0.1:{listener.port}")
            refused = proxied(proxy, "http://10.0.0.1/")
        assert allowed.status_code == 200 and allowed.text == "reached /chained"
        assert status == 200 and through.endswith(b"reached /tunnel")
        assert refused.status_code == 403
        assert [(c.method, c.port, c.authorization) for c in upstream.carried] == [
            ("GET", listener.port, "Basic dTpwQHNz"), ("CONNECT", listener.port, "Basic dTpwQHNz")]
        assert upstream.carried[0].target == f"http://127.0.0.1:{listener.port}/chained"
    assert listener.hits == ["/chained", "/tunnel"]


def test_browser_proxy_goes_direct_for_no_proxy_hosts(listener):
    with ForwardProxy() as upstream:
        settings = Settings(FETCH_ALLOW_LOOPBACK=True, OUTBOUND_PROXY=upstream.url, NO_PROXY="127.0.0.0/8")
        with start_guarded_proxy(settings) as proxy:
            assert proxied(proxy, f"http://127.0.0.1:{listener.port}/direct").status_code == 200
        assert upstream.carried == []
    assert listener.hits == ["/direct"]


def test_browser_proxy_bounds_its_connections(listener):
    """Past max_tunnels a connection is answered 503 at once; one idle past idle_seconds is closed."""
    with start_guarded_proxy(Settings(FETCH_ALLOW_LOOPBACK=True), max_tunnels=1, idle_seconds=0.5) as proxy:
        held = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
        held.sendall(f"CONNECT 127.0.0.1:{listener.port} HTTP/1.1\r\n\r\n".encode())
        assert _read_head(held).startswith(b"HTTP/1.1 200")
        over = proxied(proxy, f"http://127.0.0.1:{listener.port}/over")
        assert over.status_code == 503
        assert held.recv(1) == b""  # nothing moved for idle_seconds: the proxy closed the tunnel
        held.close()
        while proxy.active:  # the proxy counts the closed tunnel out just after closing it
            threading.Event().wait(0.01)
        assert proxied(proxy, f"http://127.0.0.1:{listener.port}/after").status_code == 200
    assert listener.hits == ["/after"]


def test_browser_proxy_keeps_a_tunnel_that_moves_one_way():
    """A slow download (a chunk every 0.2 s, for twice idle_seconds, the browser sending nothing meanwhile) is not
    idle: it arrives whole; once nothing moves either way, the tunnel is closed."""
    origin, done = socket.create_server(("127.0.0.1", 0)), threading.Event()

    def trickle() -> None:
        conn, _ = origin.accept()
        for _ in range(6):
            conn.sendall(b"x" * 100)
            time.sleep(0.2)
        done.wait(30)  # then silent, and open: only the proxy can end the tunnel (recv times out otherwise)
        conn.close()
    threading.Thread(target=trickle, daemon=True).start()
    with start_guarded_proxy(Settings(FETCH_ALLOW_LOOPBACK=True), idle_seconds=0.5) as proxy:
        tunnel = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
        tunnel.sendall(f"CONNECT 127.0.0.1:{origin.getsockname()[1]} HTTP/1.1\r\n\r\n".encode())
        assert _read_head(tunnel).startswith(b"HTTP/1.1 200")
        received = b""
        while chunk := tunnel.recv(4096):
            received += chunk
        assert received == b"x" * 600
        tunnel.close()
    done.set()
    origin.close()


# --- the real Chromium, told to use the proxy ------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]
needs_chromium = pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK) and not REQUIRE_SERVICES,
                                    reason="Chromium is not installed (apt-get install chromium)")

PAGE = """<html><body><p id="out"></p><img id="pic" src="http://127.0.0.1:{port}/img">
<script>
const seen = [];
const done = (what) => {{ seen.push(what); document.getElementById('out').textContent = seen.sort().join(','); }};
const pic = document.getElementById('pic');
pic.onerror = () => done('img-failed'); pic.onload = () => done('img-loaded');
fetch('http://127.0.0.1:{port}/fetch', {{mode: 'no-cors'}}).then(() => done('fetch-answered'), () => done('fetch-failed'));
fetch('http://localhost:{port}/named', {{mode: 'no-cors'}}).then(() => done('named-answered'), () => done('named-failed'));
const socket = new WebSocket('ws://127.0.0.1:{port}/socket');
socket.onerror = () => done('ws-failed'); socket.onopen = () => done('ws-open');
</script></body></html>"""


class PageSite(Listener):
    """The allowed origin: /page aims an image, two fetches and a websocket at another port; /redirect sends the
    browser there."""

    def __init__(self, target_port: int) -> None:
        super().__init__()
        site = self

        class Handler(self.server.RequestHandlerClass):
            def do_GET(self) -> None:
                site.hits.append(self.path)
                if self.path == "/redirect":
                    self.send_response(302)
                    self.send_header("Location", f"http://127.0.0.1:{target_port}/redirected")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = PAGE.format(port=target_port).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server.RequestHandlerClass = Handler


@contextlib.contextmanager
def chromium(proxy, where: str):
    """A Chromium told to use `proxy` at launch or for its context (as a browser service over CDP would be)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launch = {"proxy": proxy.playwright} if where == "launch" else {}
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True, **launch)
        try:
            context = browser.new_context(**({"proxy": proxy.playwright} if where == "context" else {}))
            yield context.new_page()
        finally:
            browser.close()


@needs_chromium
@pytest.mark.parametrize("where", ["launch", "context"])
def test_a_rendered_page_never_reaches_a_guarded_listener(where):
    """A page from an allowed origin aims an <img>, fetch() by address and by name, a websocket and a redirect at
    Vigil's own listener: through the guarded proxy none of them arrives, while the page itself does."""
    own = Listener()
    site = PageSite(own.port)
    settings = Settings(FETCH_ALLOW_LOOPBACK=True, WEB_LISTEN_ADDRESSES=f"127.0.0.1:{own.port}")
    try:
        with start_guarded_proxy(settings) as proxy, chromium(proxy, where) as page:
            assert page.goto(f"http://127.0.0.1:{site.port}/page").status == 200
            page.wait_for_function("document.getElementById('out').textContent.split(',').length === 4")
            outcome = page.inner_text("#out")
            redirected = page.goto(f"http://127.0.0.1:{site.port}/redirect")
            assert redirected is not None and redirected.status == 403
            assert "which is Vigil itself" in page.inner_text("body")
            refused = {(refusal.host, refusal.port) for refusal in proxy.refusals}
        assert own.hits == []
        assert [hit for hit in site.hits if hit != "/favicon.ico"] == ["/page", "/redirect"]
        assert "img-loaded" not in outcome and "ws-open" not in outcome, outcome
        assert refused == {("127.0.0.1", own.port), ("localhost", own.port)}
    finally:
        site.close()
        own.close()


@needs_chromium
def test_a_rendered_page_on_loopback_is_refused_without_the_test_switch(listener):
    with start_guarded_proxy(Settings()) as proxy, chromium(proxy, "context") as page:
        answer = page.goto(f"http://localhost:{listener.port}/page")
        assert answer is not None and answer.status == 403
        assert "a loopback address (this machine)" in page.inner_text("body")
    assert listener.hits == []


def _this_machines_address() -> str | None:
    """A non-loopback address of this machine (the one its default route leaves from), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the route
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address


def test_browser_proxy_beyond_loopback_serves_only_the_browser_service(listener):
    """BROWSER_PROXY_HOST makes the proxy reachable from a browser service elsewhere; a peer that is neither this
    machine's loopback nor BROWSER_CDP_URL's host is refused (it would get Vigil's egress)."""
    address = _this_machines_address()
    if address is None:
        pytest.skip("this machine has no address besides loopback")

    def through(proxy) -> bytes:
        with socket.create_connection((address, proxy.port), timeout=10, source_address=(address, 0)) as sock:
            sock.sendall(f"GET http://127.0.0.1:{listener.port}/far HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            return _read_head(sock)

    base = dict(FETCH_ALLOW_LOOPBACK=True, BROWSER_PROXY_HOST=address)
    with start_guarded_proxy(Settings(**base)) as stranger_proxy:
        assert stranger_proxy.url == f"http://{address}:{stranger_proxy.port}"
        refused = through(stranger_proxy)
    with start_guarded_proxy(Settings(**base, BROWSER_CDP_URL=f"http://{address}:9222")) as service_proxy:
        served = through(service_proxy)
    assert refused.startswith(b"HTTP/1.1 403") and b"BROWSER_CDP_URL" in refused
    assert served.startswith(b"HTTP/1.0 200") or served.startswith(b"HTTP/1.1 200"), served
    assert listener.hits == ["/far"]
