"""command: a shell command run on one of the owner's paired devices, never on Vigil's own hosts.

Polled (`mode: poll`, the default): the device runs it at the monitor's interval and sends back its exit code
and combined output; that result is the content, through the same pipeline as any polled source. Streamed
(`mode: stream`, seed 002): a long-lived watcher whose printed lines come back as numbered records, each batch
a wake. Either way nothing is fetched here: `read` refuses, and the result enters at the hash step.
"""

from __future__ import annotations

import json

from engine.content import Content, cut_text
from engine.errors import ContentError, SpecError
from engine.http import FetchError
from engine.sources.base import SourceIO, SourcePolicy, SourceSpec

FIELDS = frozenset({"type", "device", "command", "cwd", "timeout", "mode"})
MODES = ("poll", "stream")
MAX_COMMAND_BYTES = 4096
DEFAULT_TIMEOUT_SECONDS = 30
MAX_TIMEOUT_SECONDS = 600


def parse(raw: dict, policy: SourcePolicy) -> SourceSpec:
    mode = raw.get("mode", "poll")
    if mode not in MODES:
        raise SpecError(f"source.mode must be 'poll' (run it at the interval) or 'stream' (a watcher whose every "
                        f"printed line wakes you) (got {mode!r}).")
    return SourceSpec(type="command", device=_device(raw.get("device")), command=_command(raw.get("command")),
                      cwd=_cwd(raw.get("cwd")), timeout=_timeout(raw.get("timeout"), mode), mode=mode)


def _device(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecError("source.device is required for a command source: the name of one of the user's paired "
                        "devices (Settings → Devices).")
    return value.strip()


def _command(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecError("source.command is required: the shell command to run on the device, e.g. "
                        "'cat status.txt' or, to stream, 'tail -F app.log | grep --line-buffered ERROR'.")
    size = len(value.encode("utf-8"))
    if size > MAX_COMMAND_BYTES:
        raise SpecError(f"source.command is {size:,} bytes long; keep it under {MAX_COMMAND_BYTES:,} "
                        "(put a longer script in a file on the device and run that).")
    return value.strip()


def _cwd(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith("/") or "\x00" in value:
        raise SpecError(f"source.cwd must be an absolute path on the device, like /home/me/project (got {value!r}).")
    return value


def _timeout(value: object, mode: str) -> int | None:
    if mode == "stream":
        if value is not None:
            raise SpecError("source.timeout applies to polled commands; a stream runs until it exits or is stopped.")
        return None
    if value is None:
        return DEFAULT_TIMEOUT_SECONDS
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TIMEOUT_SECONDS:
        raise SpecError(f"source.timeout must be a whole number of seconds from 1 to {MAX_TIMEOUT_SECONDS} "
                        f"(got {value!r}).")
    return value


def read(spec: SourceSpec, io: SourceIO) -> bytes:
    raise FetchError("A command runs on its device; its result is sent back from there.")


def result_body(exit_code: int | None, output: str) -> bytes:
    """A polled run's result as the bytes that are hashed: the same result, the same bytes."""
    return json.dumps({"exit_code": exit_code, "output": output}, sort_keys=True, ensure_ascii=False).encode()


def normalize(spec: SourceSpec, body: bytes, max_text_bytes: int) -> Content:
    """The output is the text (thresholds read its first number, regexes search it); status and CEL also
    read data.exit_code and data.output."""
    try:
        result = json.loads(body)
        exit_code, output = result["exit_code"], result["output"]
    except (ValueError, KeyError, TypeError):
        raise ContentError("the device sent a result Vigil can't read") from None
    text = cut_text(output, max_text_bytes)
    data = {"exit_code": exit_code, "output": text}
    return Content(text=text if text.strip() else "(no output)", data=data, is_json=True,
                   fingerprint=json.dumps(data, sort_keys=True, ensure_ascii=False))
