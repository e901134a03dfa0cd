"""The runner's state directory: the device's token, the session id, the lock, the spool and output files."""

from __future__ import annotations

import fcntl
import json
import os
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping, Optional

#: the directory under $XDG_STATE_HOME (or ~/.local/state)
DIR_NAME = "vigil-runner"


class StateError(Exception):
    """The state directory can't be used; the message says why, for the owner."""


class StateLocked(StateError):
    """Another runner holds this state directory."""


@dataclass(frozen=True)
class Device:
    """What pairing gave this machine (device.json)."""

    server: str
    token: str
    device_id: str
    name: str


def default_state_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """$XDG_STATE_HOME/vigil-runner, else ~/.local/state/vigil-runner."""
    base = environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / DIR_NAME


class State:
    """The state directory at `path` (default_state_dir() when None), created mode 0700 on first use."""

    def __init__(self, path: Optional[str] = None):
        self.path = Path(path).expanduser() if path else default_state_dir()
        self._lock_file = None

    @property
    def device_file(self) -> Path:
        """device.json: server, token, device_id, name (mode 0600)."""
        return self.path / "device.json"

    @property
    def spool_file(self) -> Path:
        """The SQLite spool."""
        return self.path / "spool.sqlite3"

    @property
    def output_dir(self) -> Path:
        """Where stream runs write their output."""
        return self.path / "output"

    def ensure(self) -> None:
        """Create the directory (and its output directory) if missing."""
        try:
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.output_dir.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise StateError(f"can't use the state directory {self.path}: {exc}") from None

    def lock(self) -> None:
        """Hold runner.lock (flock, exclusive) until unlock(); StateLocked when another runner holds it."""
        self.ensure()
        handle = open(self.path / "runner.lock", "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise StateLocked(f"another vigil runner (pid {holder}) is using {self.path}; stop it first, or give "
                              "this one its own --state-dir") from None
        handle.truncate(0)
        handle.write(str(os.getpid()))
        handle.flush()
        self._lock_file = handle

    def unlock(self) -> None:
        """Let go of runner.lock."""
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    def device(self) -> Optional[Device]:
        """The paired device, or None before pairing."""
        try:
            raw = json.loads(self.device_file.read_text())
            return Device(**{field: str(raw[field]) for field in Device.__dataclass_fields__})
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StateError(f"{self.device_file} can't be read ({exc}); pair this device again") from None

    def save_device(self, device: Device) -> None:
        """Write device.json, mode 0600, replacing any earlier pairing in one step."""
        self.ensure()
        _write_private(self.device_file, json.dumps(asdict(device), indent=2) + "\n")

    def session(self) -> str:
        """This directory's session id (X-Vigil-Session), made on first use."""
        path = self.path / "session"
        try:
            return path.read_text().strip()
        except FileNotFoundError:
            self.ensure()
            _write_private(path, secrets.token_hex(16) + "\n")
            return path.read_text().strip()


def _write_private(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
