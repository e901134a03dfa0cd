"""The reference runtime's settings, from the environment, and its one-line-per-event log."""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime, timezone
from pathlib import Path


def log(event: str, **fields) -> None:
    """One line per event on stderr: `<time> <event> key=value …`. Never pass a secret or a token here."""
    parts = [datetime.now(timezone.utc).isoformat(timespec="milliseconds"), event]
    for key, value in fields.items():
        text = str(value)
        parts.append(f"{key}={text if _PLAIN.fullmatch(text) else json.dumps(text)}")
    print(" ".join(parts), file=sys.stderr, flush=True)


_PLAIN = re.compile(r"[\w.:/@+-]+")


class Config:
    def __init__(self, env: dict) -> None:
        missing = [name for name in ("OPENAI_BASE_URL", "MODEL", "VIGIL_URL", "VIGIL_TOKEN", "RUNTIME_PUBLIC_URL")
                   if not env.get(name)]
        if missing:
            raise SystemExit(f"runtime: set {', '.join(missing)} (see examples/runtime/README.md)")
        self.openai_base = env["OPENAI_BASE_URL"].rstrip("/")
        self.openai_key = env.get("OPENAI_API_KEY", "")
        self.model = env["MODEL"]
        self.vigil = env["VIGIL_URL"].rstrip("/")
        self.token = env["VIGIL_TOKEN"]
        self.public_url = env["RUNTIME_PUBLIC_URL"].rstrip("/")
        self.host = env.get("RUNTIME_HOST", "127.0.0.1")
        self.port = int(env.get("RUNTIME_PORT", "8700"))
        self.state = Path(env.get("RUNTIME_STATE", "./runtime-state"))

    @property
    def webhook_url(self) -> str:
        return self.public_url + "/webhooks/vigil"

    @property
    def vigil_auth(self) -> dict:
        return {"Authorization": f"Bearer {self.token}"}
