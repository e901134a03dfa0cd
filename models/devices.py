"""Paired devices: one-time pairing codes, device tokens, the runner's check-in, the owner's settings."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from engine.denylist import DEFAULT_PATTERNS, checked_patterns
from engine.tokens import new_token, same_secret, token_digest
from models.compiled import Prepared
from models.db import database, iso
from models.due import sooner
from models.tables import CommandRun, Device, PairingCode, User

DEVICE_TOKEN_PREFIX = "vgd_"
PAIRING_CODE_SECONDS = 600
APPROVAL_MODES = ("ask", "full")
_CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I
_NAME = re.compile(r"[^\w.@-]+")


class PairingError(ValueError):
    """A code that can't pair a device; str() says what to do."""


class AnotherRunner(Exception):
    """A second runner polls with a token whose device already has a live session."""


class DeviceError(ValueError):
    """A change to a device the owner can fix; str() says how."""


@dataclass(frozen=True)
class Presence:
    """How long a device counts as online after its last poll, and when it is offline."""
    online_seconds: int = 60
    offline_seconds: int = 90


def create_pairing_code(user: User, name: str, now: datetime) -> str:
    """A code valid PAIRING_CODE_SECONDS, for one pairing; only its digest is kept."""
    code = "-".join("".join(secrets.choice(_CODE_ALPHABET) for _ in range(4)) for _ in range(4))
    PairingCode.create(user=user, name=clean_name(name), code_digest=token_digest(_plain_code(code)),
                       expires_at=now + timedelta(seconds=PAIRING_CODE_SECONDS), created_at=now)
    return code


def _plain_code(code: str) -> str:
    return re.sub(r"[^A-Z0-9]", "", code.upper())


def clean_name(name: str) -> str:
    return _NAME.sub("-", (name or "").strip())[:100].strip("-")


def pair(code: str, name: str, hostname: str, version: str, now: datetime) -> tuple[Device, str]:
    """Trade a pairing code for a device and its token (returned once)."""
    digest = token_digest(_plain_code(code or ""))
    with database.atomic():
        row = PairingCode.get_or_none(PairingCode.code_digest == digest)
        if row is None:
            raise PairingError("This pairing code is wrong; copy it again from Settings → Devices, or make a new "
                               "one with `vigil device pair-code`.")
        if row.used_at is not None:
            raise PairingError("This pairing code was already used; make a new one in Settings → Devices.")
        if row.expires_at <= now:
            raise PairingError("This pairing code has expired (codes last 10 minutes); make a new one in "
                               "Settings → Devices.")
        if PairingCode.update(used_at=now).where((PairingCode.id == row.id) & PairingCode.used_at.is_null()).execute() != 1:
            raise PairingError("This pairing code was already used; make a new one in Settings → Devices.")
        token = new_token(DEVICE_TOKEN_PREFIX)
        device = Device.create(user=row.user_id, name=_free_name(row.user_id, clean_name(name) or row.name
                                                                 or clean_name(hostname) or "device"),
                               token_digest=token_digest(token), hostname=(hostname or "")[:200],
                               runner_version=(version or "")[:40], created_at=now)
    return device, token


def _free_name(user_id: int, wanted: str) -> str:
    taken = {d.name for d in Device.select(Device.name).where(Device.user == user_id)}
    name, n = wanted, 2
    while name in taken:
        name, n = f"{wanted}-{n}", n + 1
    return name


def add_device(user: User, name: str, now: datetime) -> tuple[Device, str]:
    """A device paired without a code (the embedded local runner); returns it with its token."""
    token = new_token(DEVICE_TOKEN_PREFIX)
    device = Device.create(user=user, name=_free_name(user.id, clean_name(name)), token_digest=token_digest(token),
                           created_at=now)
    return device, token


#: every runner call looks its device up: built once, and planned once per connection on PostgreSQL
_BY_DIGEST = Prepared("vigil_device_by_digest", lambda digest: Device.select().where(Device.token_digest == digest))
#: a runner's POST of records or of a result needs only who the device is (every batch of a busy stream asks)
_IDS_BY_DIGEST = Prepared("vigil_device_ids_by_digest", lambda digest: (
    Device.select(Device.id, Device.user, Device.token_digest, Device.revoked_at)
    .where(Device.token_digest == digest)))


def device_for_token(token: str | None, whole: bool = True) -> Device | None:
    """The live (not revoked) device of a device token, or None; `whole=False` loads only its id and owner."""
    digest = lookup_digest(token)
    if digest is None:
        return None
    return live_device((_BY_DIGEST if whole else _IDS_BY_DIGEST).first(digest), digest)


def lookup_digest(token: str | None) -> str | None:
    """The digest a device token is looked up by; None for what can't be a device token."""
    if not token or not token.startswith(DEVICE_TOKEN_PREFIX) or len(token) > 200:
        return None
    return token_digest(token)


def live_device(device: Device | None, digest: str) -> Device | None:
    """`device` (looked up by `digest`) if it is still paired; digests compared in constant time."""
    if device is None or device.revoked_at is not None or not same_secret(device.token_digest, digest):
        return None
    return device


def check_in(device: Device, session: str, version: str, now: datetime, presence: Presence) -> bool:
    """A poll: the heartbeat. Raises AnotherRunner when another session was seen within the offline window.
    Returns whether the device just came online (its owner's pages should hear of it)."""
    seen = device.last_seen_at
    if device.session_id and device.session_id != session and seen is not None \
            and (now - seen).total_seconds() < presence.offline_seconds:
        raise AnotherRunner(device.name)
    came_online = not device.online
    Device.update(session_id=session[:64], last_seen_at=now, runner_version=(version or "")[:40], online=True) \
        .where(Device.id == device.id).execute()
    device.session_id, device.last_seen_at, device.online = session[:64], now, True
    if came_online:  # quiet for the offline window from now, the scheduler marks it offline
        sooner(now + timedelta(seconds=presence.offline_seconds))
    return came_online


def is_online(device: Device, now: datetime, presence: Presence) -> bool:
    seen = device.last_seen_at
    return device.revoked_at is None and seen is not None and (now - seen).total_seconds() < presence.online_seconds


def count_online(now: datetime, presence: Presence) -> int:
    """Devices online now, as is_online counts them (for /metrics; the devices table is small)."""
    return Device.select().where(Device.revoked_at.is_null()
                                 & (Device.last_seen_at > now - timedelta(seconds=presence.online_seconds))).count()


def mark_offline(now: datetime, presence: Presence) -> list[Device]:
    """Devices not seen for the offline window, now marked offline (for their owners' pages)."""
    cutoff = now - timedelta(seconds=presence.offline_seconds)
    gone = []
    for device in Device.select().where(Device.online & (Device.last_seen_at < cutoff)):
        # seen again since the select (a poll in between): still online
        if Device.update(online=False).where((Device.id == device.id) & Device.online
                                             & (Device.last_seen_at < cutoff)).execute():
            device.online = False
            gone.append(device)
    return gone


def user_devices(user: User, include_revoked: bool = False) -> list[Device]:
    query = Device.select().where(Device.user == user)
    if not include_revoked:
        query = query.where(Device.revoked_at.is_null())
    return list(query.order_by(Device.name))


def find_device(user: User, name_or_id: str) -> Device | None:
    """One of the user's live devices, by name or id."""
    query = Device.select().where((Device.user == user) & Device.revoked_at.is_null())
    found = query.where(Device.name == name_or_id).first()
    text = str(name_or_id)
    if found is None and text.isascii() and text.isdigit():
        found = query.where(Device.id == int(text)).first()
    return found


def owned_device(user: User, device_id: int) -> Device | None:
    return Device.get_or_none((Device.id == device_id) & (Device.user == user) & Device.revoked_at.is_null())


def update_device(device: Device, changes: object) -> Device:
    """The owner's changes: approval_mode and/or denylist. Raises DeviceError."""
    if not isinstance(changes, dict) or not changes or set(changes) - {"approval_mode", "denylist"}:
        raise DeviceError("Send an object with approval_mode ('ask' or 'full') and/or denylist (a list of patterns).")
    fields = {}
    if "approval_mode" in changes:
        if changes["approval_mode"] not in APPROVAL_MODES:
            raise DeviceError("approval_mode must be 'ask' (the owner approves each command) or 'full'.")
        fields[Device.approval_mode] = changes["approval_mode"]
    if "denylist" in changes:
        try:
            fields[Device.denylist] = checked_patterns(changes["denylist"])
        except ValueError as exc:
            raise DeviceError(str(exc)) from None
    Device.update(fields).where(Device.id == device.id).execute()
    return Device.get_by_id(device.id)


def revoke_device(device: Device, now: datetime) -> Device:
    Device.update(revoked_at=now, online=False).where(Device.id == device.id).execute()
    return Device.get_by_id(device.id)


def running_commands(device: Device) -> list[CommandRun]:
    return list(CommandRun.select().where((CommandRun.device == device)
                                          & CommandRun.status.in_(("pending", "running", "stopping")))
                .order_by(CommandRun.created_at))


def device_json(device: Device, now: datetime, presence: Presence) -> dict:
    return {"id": device.id, "name": device.name, "online": is_online(device, now, presence),
            "last_seen_at": iso(device.last_seen_at), "runner_version": device.runner_version or None,
            "hostname": device.hostname or None, "approval_mode": device.approval_mode,
            "denylist": list(device.denylist or []), "default_denylist": [name for name, _ in DEFAULT_PATTERNS],
            "revoked": device.revoked_at is not None,
            "running": [{"run_id": run.id, "monitor_id": run.monitor_id, "kind": run.kind, "command": run.command,
                         "status": run.status} for run in running_commands(device)]}
