"""How a CLI command hands an event to a running embedded `vigil serve`, whose event bus is in its own process.

While `vigil serve` runs without Redis it keeps $VIGIL_DATA_DIR/serve.json (mode 0600): its loopback base URL, a
random key and its pid. A command that made something an open page shows (`vigil token create`) POSTs the event to
that server's /internal/events with the key (app/local_events.py), which publishes it on the in-process bus. Nothing
polls: the file is read once per command, and a server that is not there costs the command nothing but a log line.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import secrets
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)

#: the file's name in VIGIL_DATA_DIR
SERVE_FILE = "serve.json"
#: the route that takes the events, and the header that carries the key
EVENTS_PATH = "/internal/events"
KEY_HEADER = "X-Vigil-Local-Key"
#: how long a command waits for the server before giving up (the event is then shown on the next page load)
HANDOFF_TIMEOUT_SECONDS = 2.0

_key: bytes | None = None  # this process's key while it advertises itself; None elsewhere (every request is 404)


def local_url(host: str, port: int) -> str:
    """The address a command on this machine reaches a server bound to `host`:`port` at."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


@contextmanager
def advertised(data_dir: str, host: str, port: int) -> Iterator[Path]:
    """serve.json written (0600) for the block, with a fresh key that this process then accepts; removed after,
    unless another server has replaced it since."""
    global _key
    key = secrets.token_urlsafe(32)
    path = Path(data_dir) / SERVE_FILE
    _write_private(path, {"url": local_url(host, port), "key": key, "pid": os.getpid()})
    _key = key.encode()
    try:
        yield path
    finally:
        _key = None
        if (_read(path) or {}).get("key") == key:
            path.unlink(missing_ok=True)


def key_matches(sent: bytes | None) -> bool:
    """Whether `sent` is this process's key (compared in constant time); False while it advertises none."""
    key = _key
    return key is not None and sent is not None and hmac.compare_digest(sent, key)


def _write_private(path: Path, content: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.unlink(missing_ok=True)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        os.fchmod(handle.fileno(), 0o600)
        json.dump(content, handle)
    os.replace(temporary, path)


def _read(path: Path) -> dict | None:
    try:
        content = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return content if isinstance(content, dict) else None


class ServedBus:
    """The bus a command uses to reach a running embedded server: publish() POSTs one event to it. Failing to
    reach it is not the command's failure (what it made is stored; the page shows it on reload): logged at debug."""

    def __init__(self, url: str, key: str) -> None:
        self._url = url + EVENTS_PATH
        self._key = key
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never a proxy

    def publish(self, user_id: int, name: str, data: dict) -> None:
        body = json.dumps({"user_id": user_id, "name": name, "data": data}).encode()
        request = urllib.request.Request(self._url, data=body, method="POST", headers={
            "Content-Type": "application/json", KEY_HEADER: self._key})
        try:
            with self._opener.open(request, timeout=HANDOFF_TIMEOUT_SECONDS) as answer:
                answer.read()
        except (OSError, ValueError) as exc:  # URLError and HTTPError are OSErrors
            log.debug("event %s not handed to the running vigil serve at %s: %s", name, self._url, exc)


def served_bus(data_dir: str) -> ServedBus | None:
    """The running embedded server's bus, from its serve.json; None when there is none (or its process is gone)."""
    content = _read(Path(data_dir) / SERVE_FILE)
    if not content or not isinstance(content.get("url"), str) or not isinstance(content.get("key"), str):
        return None
    if not _alive(content.get("pid")):
        log.debug("%s names a vigil serve (pid %s) that is not running", SERVE_FILE, content.get("pid"))
        return None
    return ServedBus(content["url"], content["key"])


def _alive(pid) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: not ours, but it exists
        return True
    return True
