"""The npm packages some tests run for real, at pinned versions: Codex and Claude Code (e2e/test_agent_clis.py)
and the MCP Inspector CLI (tests/integration/test_mcp_server.py).

They are installed once, together, into .cache/agent-clis/ (gitignored) and reused; a lock keeps two test workers
from installing at once. Without npm or its registry the tests that need them are skipped with the reason, or fail
under the test command (VIGIL_REQUIRE_SERVICES=1).
"""

from __future__ import annotations

import fcntl
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REQUIRE_SERVICES

ROOT = Path(__file__).resolve().parents[1]
CLIS = ROOT / ".cache" / "agent-clis"
#: the versions tested; bump them together with docs/agents.md when a CLI changes its configuration
PINNED = {"@openai/codex": "0.171.0", "@anthropic-ai/claude-code": "2.1.332",
          "@modelcontextprotocol/inspector": "2.12.0"}
#: the commands the tests run, each from one of PINNED
COMMANDS = ("codex", "claude", "mcp-inspector")
#: what npm prints when it cannot reach the registry
_OFFLINE = re.compile(r"ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH|"
                      r"network|socket hang up", re.I)


def npm_bin() -> Path:
    """.cache/agent-clis/node_modules/.bin, with every PINNED package installed at its version."""
    bin_dir = CLIS / "node_modules" / ".bin"
    CLIS.mkdir(parents=True, exist_ok=True)
    with open(CLIS.parent / "agent-clis.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (all(_installed(p) == v for p, v in PINNED.items())
                and all((bin_dir / command).exists() for command in COMMANDS)):
            _install()
    return bin_dir


def _unavailable(message: str) -> None:
    if REQUIRE_SERVICES:
        pytest.fail(message)
    pytest.skip(message)


def _installed(package: str) -> str | None:
    try:
        return json.loads((CLIS / "node_modules" / package / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


def _install() -> None:
    npm = shutil.which("npm")
    if npm is None:
        _unavailable("npm is not installed, so the pinned CLIs cannot be installed; install Node.js 20+")
    command = [npm, "install", "--prefix", str(CLIS), "--save-exact", "--no-audit", "--no-fund", "--loglevel=error",
               *(f"{p}@{v}" for p, v in PINNED.items())]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        _unavailable("npm install of the pinned CLIs took over 10 minutes; is the npm registry reachable?")
    if done.returncode != 0:
        output = done.stdout + done.stderr
        if _OFFLINE.search(output):
            _unavailable(f"the npm registry is unreachable, so the pinned CLIs cannot be installed:\n{output[-1500:]}")
        pytest.fail(f"npm install of {', '.join(PINNED)} failed:\n{output[-3000:]}")
