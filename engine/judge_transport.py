"""The sessions the judge calls a model through.

An account's model (Settings → Models) is called through a session whose every connection is opened only to an
address the SSRF guard (engine/addresses.py) approves, checked when it connects: a base URL whose name resolves
somewhere else later (DNS rebinding) is refused at the call, not only when it was saved. The operator's own
JUDGE_* default is trusted as configured and goes through a plain session. Both go through the operator's egress
proxy when OUTBOUND_PROXY is set (engine/egress.py), the guard still deciding first for an account's model.
"""

from __future__ import annotations

import functools
import socket
import threading
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError
from urllib3.util.connection import create_connection

from engine.addresses import Own, resolve_guarded
from engine.egress import Egress

USER_AGENT = "Vigil/0.1 (+judge)"

_local = threading.local()


def plain_session(egress: Egress | None = None) -> requests.Session:
    """A session for the operator's model: no proxy from the environment, no guard; through the operator's egress
    proxy (OUTBOUND_PROXY) when `egress` has one."""
    session = requests.Session()
    session.trust_env = False
    session.headers["User-Agent"] = USER_AGENT
    if egress is not None:
        _mount(session, EgressAdapter(egress))
    return session


def guarded_session(allow_private: bool, own: Own | None = None, egress: Egress | None = None) -> requests.Session:
    """This thread's session for accounts' models; `allow_private` (JUDGE_ALLOW_PRIVATE_URLS) lets a model
    server on loopback or the local network through, never Vigil itself (`own`). Its connections are kept alive
    between calls; with `egress`, they go through the operator's proxy after the guard approved the model's host."""
    sessions = getattr(_local, "sessions", None)
    if sessions is None:
        sessions = _local.sessions = {}
    if (allow_private, own, egress) not in sessions:
        session = sessions[allow_private, own, egress] = plain_session()
        _mount(session, GuardedAdapter(allow_private, own, egress))
    return sessions[allow_private, own, egress]


def _mount(session: requests.Session, adapter: HTTPAdapter) -> None:
    session.mount("http://", adapter)
    session.mount("https://", adapter)


class EgressAdapter(HTTPAdapter):
    """requests' adapter that sends each request through the operator's proxy unless NO_PROXY names its host
    (requests reads NO_PROXY only from the environment, which Vigil's sessions ignore): plain http in absolute
    form, https through a CONNECT tunnel, with the proxy's credentials."""

    def __init__(self, egress: Egress | None = None) -> None:
        self.egress = egress
        super().__init__()

    def send(self, request, stream=False, timeout=None, verify=True, cert=None, proxies=None):
        parts = urlsplit(request.url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        proxy = self.egress.proxy_for(parts.hostname or "", port) if self.egress else None
        if proxy is not None:
            self.check(parts.hostname or "", port)
        return super().send(request, stream=stream, timeout=timeout, verify=verify, cert=cert,
                            proxies={parts.scheme: f"http://{proxy.shown}"} if proxy else {})

    def check(self, host: str, port: int) -> None:
        """The guard to run before a proxied request (the connection then goes to the proxy): none for the
        operator's own model."""

    def proxy_headers(self, proxy: str) -> dict[str, str]:
        authorization = self.egress.proxy.authorization if self.egress else ""
        return {"Proxy-Authorization": authorization} if authorization else {}


class GuardedAdapter(EgressAdapter):
    """requests' adapter whose pools open guarded connections; a proxied request is guarded before it is sent."""

    def __init__(self, allow_private: bool, own: Own | None = None, egress: Egress | None = None) -> None:
        self.allow_private, self.own = allow_private, own
        super().__init__(egress)

    def check(self, host: str, port: int) -> None:
        resolve_guarded(host, port, False, self.own, allow_private=self.allow_private)

    def init_poolmanager(self, *args, **kwargs) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _pools(self.allow_private, self.own)


class _GuardedConnect:
    """Resolves the host, refuses it (BlockedURL) unless every address is allowed, then connects by address;
    TLS still verifies the certificate for the host name."""
    allow_private = False
    own: Own | None = None

    def _new_conn(self) -> socket.socket:
        addresses = resolve_guarded(self._dns_host, self.port, False, self.own, allow_private=self.allow_private)
        error: OSError | None = None
        for address in addresses:
            try:
                return create_connection((address, self.port), self.timeout, source_address=self.source_address,
                                         socket_options=self.socket_options)
            except socket.timeout as exc:
                raise ConnectTimeoutError(self, f"Connection to {self.host} timed out.") from exc
            except OSError as exc:
                error = exc
        raise NewConnectionError(self, f"Failed to establish a new connection: {error}")


@functools.cache
def _pools(allow_private: bool, own: Own | None = None) -> dict[str, type]:
    """The pool classes, per scheme, whose connections are guarded with `allow_private` and `own`."""
    guard = {"allow_private": allow_private, "own": own}
    http = type("GuardedHTTPConnection", (_GuardedConnect, HTTPConnection), guard)
    https = type("GuardedHTTPSConnection", (_GuardedConnect, HTTPSConnection), guard)
    return {"http": type("GuardedHTTPPool", (HTTPConnectionPool,), {"ConnectionCls": http}),
            "https": type("GuardedHTTPSPool", (HTTPSConnectionPool,), {"ConnectionCls": https})}
