"""OUTBOUND_PROXY end to end, with a real forward proxy on 127.0.0.1 (tests/forward_proxy.py) that records what it
carried: the fetcher (plain http in absolute form, https through CONNECT with the certificate still verified for
the host name), the judge's sessions (the operator's model and an account's guarded one) and wake pushes all go
through it with its credentials; NO_PROXY hosts go direct; and the SSRF guard still refuses a loopback or private
destination before the proxy is asked, so the proxy carries nothing for it."""

from __future__ import annotations

import pytest

from engine.egress import Egress
from engine.errors import BlockedURL, FetchError
from engine.http import FetchPolicy, Fetcher
from engine.judge import JudgeError, JudgeModel, judge
from engine.judge_transport import guarded_session, plain_session
from tests.forward_proxy import ForwardProxy
from tests.integration.test_fetcher import CountingServer, Handler, _self_signed
from tests.integration.test_wake_push import Receiver, attempts, receiver, register, wake_once, webhook_monitor  # noqa: F401
from tests.judge_server import JudgeServer

SECRET = "s3cr:et"
#: Basic u:s3cr:et, as the proxy must be sent it (the password percent-encoded in OUTBOUND_PROXY)
AUTHORIZATION = "Basic dTpzM2NyOmV0"


@pytest.fixture()
def proxy():
    with ForwardProxy(require=AUTHORIZATION) as running:
        yield running


def egress(proxy: ForwardProxy, no_proxy: str = "") -> Egress:
    return Egress.of(f"http://u:s3cr%3Aet@127.0.0.1:{proxy.port}", no_proxy)


@pytest.fixture(scope="module")
def site():
    import threading
    server = CountingServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def tls_site(tmp_path_factory):
    import ssl
    import threading
    cert, key = _self_signed(tmp_path_factory.mktemp("tls"))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = CountingServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, cert
    server.shutdown()
    server.server_close()


def fetcher(proxy, allow_loopback=True, no_proxy="", **kwargs) -> Fetcher:
    return Fetcher(FetchPolicy(timeout=10, allow_loopback=allow_loopback, egress=egress(proxy, no_proxy)), **kwargs)


def test_fetcher_sends_plain_http_to_the_proxy_in_absolute_form(proxy, site):
    port = site.server_address[1]
    got = fetcher(proxy).get(f"http://127.0.0.1:{port}/page/1?token=x")
    assert got.status == 200 and got.body == b"hello vigil"
    [carried] = proxy.carried
    assert (carried.method, carried.host, carried.port) == ("GET", "127.0.0.1", port)
    assert carried.target == f"http://127.0.0.1:{port}/page/1?token=x" and carried.authorization == AUTHORIZATION


def test_fetcher_tunnels_https_through_connect_and_still_verifies_the_certificate(proxy, tls_site):
    server, cert = tls_site
    port = server.server_address[1]
    got = fetcher(proxy, ca_certs=cert).get(f"https://localhost:{port}/page")
    assert got.body == b"hello vigil"
    with pytest.raises(FetchError) as untrusted:  # the tunnel carries TLS end to end: the proxy can't vouch for it
        fetcher(proxy).get(f"https://localhost:{port}/page")
    assert "secure connection" in untrusted.value.message
    assert [(c.method, c.target, c.authorization) for c in proxy.carried] == [
        ("CONNECT", f"localhost:{port}", AUTHORIZATION)] * 2


def test_fetcher_goes_direct_for_no_proxy_hosts(proxy, site):
    port = site.server_address[1]
    for no_proxy in ("127.0.0.1", "127.0.0.0/8", f"127.0.0.1:{port}", "*", "example.com, .localhost, localhost"):
        host = "localhost" if "localhost" in no_proxy else "127.0.0.1"
        assert fetcher(proxy, no_proxy=no_proxy).get(f"http://{host}:{port}/page").body == b"hello vigil"
    assert proxy.carried == []
    fetcher(proxy, no_proxy=f"127.0.0.1:{port + 1},.example.com").get(f"http://127.0.0.1:{port}/page")
    assert len(proxy.carried) == 1  # another port, another domain: through the proxy


@pytest.mark.parametrize("url, reason", [("http://127.0.0.1:{port}/page", "a loopback address"),
                                         ("http://localhost:{port}/page", "a loopback address"),
                                         ("https://10.1.2.3/", "a private address"),
                                         ("http://169.254.169.254/latest/meta-data/", "the cloud metadata address")])
def test_the_guard_still_refuses_internal_destinations_with_a_proxy_set(proxy, site, url, reason):
    with pytest.raises(BlockedURL) as refused:
        fetcher(proxy, allow_loopback=False).get(url.format(port=site.server_address[1]))
    assert reason in refused.value.message
    assert proxy.carried == []


def test_a_proxy_that_refuses_or_asks_for_credentials_is_a_clear_error(site):
    port = site.server_address[1]
    with ForwardProxy(deny=("127.0.0.1",)) as denying:
        with pytest.raises(FetchError) as denied:
            Fetcher(FetchPolicy(timeout=10, allow_loopback=True, egress=Egress.of(denying.url))).get(
                f"https://127.0.0.1:{port}/page")
    assert "refused to connect to 127.0.0.1" in denied.value.message and not denied.value.unreachable
    with ForwardProxy(require="Basic other") as asking:  # 407: Smokescreen's refusal, other proxies' "credentials?"
        for scheme in ("https", "http"):  # a CONNECT answered 407, and a plain GET answered 407 by the proxy
            with pytest.raises(FetchError) as asked:
                fetcher(asking).get(f"{scheme}://127.0.0.1:{port}/page")
            message = asked.value.message
            assert f"refused to connect to 127.0.0.1:{port} (407" in message and "OUTBOUND_PROXY" in message
            assert SECRET not in message and not asked.value.unreachable


def test_the_judge_calls_the_operators_and_an_accounts_model_through_the_proxy(proxy):
    with JudgeServer() as server:
        model = JudgeModel("default", server.base_url, "sk-test", "gpt-test")
        for session in (plain_session(egress(proxy)), guarded_session(True, None, egress(proxy))):
            verdict = judge(session, model, "Watch the lamp.", "the price is below $100", "Price: $95.10", 10)
            assert verdict.match is True
        assert [(c.method, c.target.startswith(server.base_url)) for c in proxy.carried] == [("POST", True)] * 2
        assert len(server.requests) == 2

        with pytest.raises(JudgeError) as refused:  # an account's model on this machine: refused before the proxy
            judge(guarded_session(False, None, egress(proxy)), model, "Watch the lamp.", "below $100", "x", 10)
        assert "a loopback address" in refused.value.message
        direct = plain_session(egress(proxy, no_proxy="127.0.0.1"))
        assert judge(direct, model, "Watch the lamp.", "below $100", "Price: $95.10", 10).match is True
        assert len(proxy.carried) == 2 and len(server.requests) == 3


def test_wake_pushes_go_through_the_proxy_and_the_guard_still_decides(client, owner, drain, receiver, reconfigure,
                                                                        proxy):
    """A push through the operator's proxy arrives signed as ever; with loopback refused it is refused in Vigil,
    and the proxy is never asked."""
    endpoint = register(client, owner[1], receiver.url)
    reconfigure(OUTBOUND_PROXY=f"http://u:s3cr%3Aet@127.0.0.1:{proxy.port}")
    wake_once(client, drain, webhook_monitor(client, owner[1]), "deployed-1")
    [(path, headers, raw)] = receiver.requests
    assert path == "/hook" and "proxy-authorization" not in headers
    [payload] = receiver.verified(endpoint["secret"])
    assert payload["data"]["conversation_id"] == "conv-1"
    [carried] = proxy.carried
    assert (carried.method, carried.target, carried.authorization) == ("POST", receiver.url, AUTHORIZATION)

    reconfigure(OUTBOUND_PROXY=f"http://u:s3cr%3Aet@127.0.0.1:{proxy.port}", FETCH_ALLOW_LOOPBACK=False)
    wake_once(client, drain, webhook_monitor(client, owner[1], "conv-2"), "deployed-2")
    assert len(receiver.requests) == 1 and len(proxy.carried) == 1
    last = attempts(client, owner[1], endpoint["id"])[-1]
    assert last["status_code"] is None and "a loopback address" in last["answer"]


def test_mcp_calls_go_through_the_proxy_after_the_guard(proxy):
    from adapters import mcp_client
    from adapters.mcp_client import McpError
    from tests.mcp_server import serve_mcp

    with serve_mcp(("get_status", "bump")) as server:
        tools = mcp_client.list_tools(server.url, None, allow_loopback=True, egress=egress(proxy))
        assert {tool.name for tool in tools} == {"get_status", "bump"}
        result = mcp_client.call_tool(server.url, None, "bump", {"n": 2}, allow_loopback=True, egress=egress(proxy))
        assert result.is_error is False
        carried = len(proxy.carried)
        assert carried >= 2 and {c.target.split("/mcp")[0] for c in proxy.carried} == {server.url.split("/mcp")[0]}
        assert {c.authorization for c in proxy.carried} == {AUTHORIZATION}
        before = server.calls["bump"]
        with pytest.raises(McpError) as refused:
            mcp_client.call_tool(server.url, None, "bump", {"n": 1}, allow_loopback=False, egress=egress(proxy))
        assert refused.value.kind == "blocked" and "loopback" in refused.value.message
        assert server.calls["bump"] == before and len(proxy.carried) == carried
