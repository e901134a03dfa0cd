"""`vigil serve --local-runner`: a runner inside the all-in-one process, paired as device "local" of the first
account, so someone whose agent runs on the same laptop needs nothing else.

It is the same runner a device runs (runner/), talking HTTP to this server's own address; only its pairing
differs: no code, since whoever starts `vigil serve` owns this machine. Its approval mode starts as `ask`, like
any device's. Only `vigil serve` starts it: production web and worker processes never run commands.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from adapters.settings import Settings

log = logging.getLogger("vigil.local_runner")
DEVICE_NAME = "local"


def start_local_runner(settings: Settings, host: str, port: int, stop: threading.Event) -> threading.Thread:
    """The runner in a daemon thread; it waits for the first account, pairs, and runs until `stop` is set."""
    state_dir = Path(settings.VIGIL_DATA_DIR) / "local-runner"
    server = f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}"
    thread = threading.Thread(target=_run, args=(state_dir, server, stop), name="vigil-local-runner", daemon=True)
    thread.start()
    return thread


def _run(state_dir: Path, server: str, stop: threading.Event) -> None:
    from runner.agent import Runner
    from runner.state import Device, State

    state = State(str(state_dir))
    while not stop.is_set():
        paired = _pair_if_needed(state, server, Device)
        if paired:
            break
        stop.wait(2)  # no account yet: `vigil user create` comes first
    if stop.is_set():
        return
    log.info("local runner started: commands of device %r run on this machine", DEVICE_NAME)
    try:
        Runner(str(state_dir), server=server).run(stop)
    except Exception as exc:  # noqa: BLE001 — an unpaired or broken local runner must not take the server down
        log.warning("local runner stopped: %s", exc)


def _pair_if_needed(state, server: str, device_class) -> bool:
    """device.json for the first account's device "local", made once (again if that device was revoked)."""
    from models import connection, utcnow
    from models.devices import add_device, device_for_token
    from models.tables import User

    saved = state.device()
    with connection():
        if saved is not None and device_for_token(saved.token) is not None:
            return True
        owner = User.select().order_by(User.id).first()
        if owner is None:
            return False
        device, token = add_device(owner, DEVICE_NAME, utcnow())
    state.save_device(device_class(server=server, token=token, device_id=str(device.id), name=device.name))
    return True
