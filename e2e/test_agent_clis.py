"""Codex and Claude Code, the real CLIs from npm at pinned versions, against a real Vigil (web, worker, scheduler)
and scripted streaming models on 127.0.0.1: each CLI creates a monitor through Vigil's /mcp set up exactly as
docs/agents.md says (the commands and config are read from it), and when the watched page changes `vigil watch`
prints the wake line.

The CLIs are installed once into .cache/agent-clis/ (gitignored) and reused. Without npm or its registry the
suite is skipped, or fails under VIGIL_REQUIRE_SERVICES=1. Each CLI runs with a temporary HOME (and CODEX_HOME),
and its HTTPS goes to a dead proxy, so nothing but 127.0.0.1 is reached. Codex exits 0 even when a tool call
failed, so the tests check what happened in Vigil, not exit codes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import re
import signal
import subprocess
import threading
import uuid
from pathlib import Path

import pytest
import requests

from e2e.api import wait_for
from tests.npm_tools import npm_bin
from tests.processes import VIGIL, vigil
from tests.scripted_agent_models import FINAL, MessagesModel, ResponsesModel

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "agents.md"
DOCUMENTED_URL = "http://127.0.0.1:8000/mcp"
EMAIL = "agent-clis-owner@example.com"
CLI_SECONDS = 180
_CONVERSATION = re.compile(r"conversation_id ([\w-]+)")


@pytest.fixture(scope="session")
def agent_clis() -> Path:
    """The directory holding `codex` and `claude` (tests/npm_tools.py installs them when missing)."""
    return npm_bin()


def documented_block(language: str, marker: str) -> str:
    """The one fenced `language` block of docs/agents.md that contains `marker`."""
    blocks = [b for b in re.findall(rf"^```{language}\n(.*?)^```", DOCS.read_text(), re.S | re.M) if marker in b]
    assert len(blocks) == 1, f"docs/agents.md should have one ```{language} block with {marker!r}, has {len(blocks)}"
    return blocks[0]


@pytest.fixture(scope="module")
def account(vigil_stack):
    """The stack with an account of this module's own, so no other test's wakes mix in."""
    vigil("user", "create", EMAIL, "--password", "a-good-agent-clis-password", env=vigil_stack.env)
    token = vigil("token", "create", "--user", EMAIL, env=vigil_stack.env).strip().splitlines()[-1]
    return dataclasses.replace(vigil_stack, token=token, email=EMAIL)


def price_page(pages, conversation: str, price: str = "95.10") -> str:
    """The conversation's own watched page, showing `price`; its URL."""
    path = f"/agent-clis/{conversation}"
    pages.set(path, f'<html><body><h1>ACMEB</h1><p>Last: <span id="price">{price}</span> USD</p></body></html>')
    return pages.url(path)


def create_arguments(page_url: str):
    """The scripted model's monitor_create arguments, with the conversation id the prompt gave."""
    def arguments(text: str) -> dict:
        found = _CONVERSATION.search(text)
        return {"conversation_id": found.group(1) if found else "no-id-in-prompt",
                "description": "ACMEB below $90",
                "source": {"type": "page", "url": page_url, "selector": "#price"},
                "check": {"type": "threshold", "op": "below", "value": 90}, "interval": "1s"}
    return arguments


def prompt(conversation: str) -> str:
    return f"Use Vigil with conversation_id {conversation}: tell me when ACMEB drops below 90."


@pytest.fixture()
def cli_env(agent_clis, account, tmp_path) -> dict:
    """A clean environment: temporary HOME, the CLIs on PATH, HTTPS to anywhere but 127.0.0.1 refused."""
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    return {"PATH": f"{agent_clis}:{Path(VIGIL).parent}:/usr/local/bin:/usr/bin:/bin", "HOME": str(home),
            "CODEX_HOME": str(home / ".codex"), "LANG": "C.UTF-8", "TMPDIR": str(tmp_path),
            "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
            "NO_PROXY": "127.0.0.1,localhost", "VIGIL_TOKEN": account.token, "VIGIL_URL": account.base,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}


def run(command: list[str] | str, env: dict, cwd: Path, timeout: float = CLI_SECONDS) -> str:
    """One CLI command to completion (bounded); its output, stdout then stderr."""
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          shell=isinstance(command, str), stdin=subprocess.DEVNULL)
    return f"{done.stdout}\n{done.stderr}"


def offered(model) -> list[str]:
    """The tool names each request offered the model (for a failure's message)."""
    return [", ".join(sorted(str(t.get("name")) for t in r.get("tools") or [])) for r in model.requests]


def live_monitors(account, conversation: str) -> list[dict]:
    response = requests.get(f"{account.base}/api/monitors", headers=account.auth, timeout=10,
                            params={"conversation_id": conversation, "status": "live"})
    response.raise_for_status()
    return response.json()["monitors"]


class VigilWatch:
    """`vigil watch` running on its own, its printed lines read as they come."""

    def __init__(self, account, state: Path, *args: str) -> None:
        self.process = subprocess.Popen([VIGIL, "watch", "--server", account.base, "--timeout", "120s",
                                         "--state-dir", str(state), *args],
                                        env={**os.environ, "VIGIL_TOKEN": account.token}, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.lines: queue.Queue = queue.Queue()
        self.printed: list[str] = []
        threading.Thread(target=lambda: [*map(self.lines.put, self.process.stdout), self.lines.put(None)],
                         daemon=True).start()

    def line(self, pattern: str, timeout: float = 90) -> re.Match:
        """The next printed line that matches `pattern`, as its match."""
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"vigil watch printed no {pattern!r}:\n{''.join(self.printed)}") from None
            assert line is not None, f"vigil watch ended without {pattern!r}:\n{''.join(self.printed)}"
            self.printed.append(line)
            if found := re.search(pattern, line):
                return found

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(timeout=15)


def documented_shell(marker: str, account, conversation: str) -> str:
    """A documented ```sh block, with its example server, token and conversation id replaced by this test's."""
    return (documented_block("sh", marker).replace("http://127.0.0.1:8000", account.base)
            .replace("vgl_…", account.token).replace("acme-price", conversation))


def assert_armed(account, conversation: str, output: str) -> None:
    monitors = live_monitors(account, conversation)
    assert monitors, f"no monitor in Vigil for {conversation}; the CLI said:\n{output[-3000:]}"
    assert [m["description"] for m in monitors] == ["ACMEB below $90"]


def test_codex_creates_a_monitor_and_its_wake_resumes_the_session_as_documented(account, pages, cli_env,
                                                                               tmp_path):
    conversation = f"codex-{uuid.uuid4().hex[:8]}"
    work, log = tmp_path / "work", tmp_path / "watcher.log"
    subprocess.run(["git", "init", "-q", str(work)], check=True)  # codex exec runs in a project's repository
    with ResponsesModel("monitor_create", create_arguments(price_page(pages, conversation))) as model:
        documented = documented_block("toml", "[mcp_servers.vigil]")
        assert DOCUMENTED_URL in documented
        (Path(cli_env["CODEX_HOME"]) / "config.toml").write_text(
            'model = "scripted"\nmodel_provider = "scripted"\n\n'
            f'[model_providers.scripted]\nname = "scripted"\nbase_url = "{model.base_url}"\nwire_api = "responses"\n\n'
            + documented.replace(DOCUMENTED_URL, f"{account.base}/mcp"))
        with open(log, "wb") as handle:
            watcher = subprocess.Popen(["bash", "-c", documented_shell("while vigil watch", account, conversation)],
                                       env=cli_env, cwd=work, stdin=subprocess.DEVNULL, stdout=handle,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for("the watcher to connect (it keeps a cursor once it has)", lambda: watcher.poll() is not None
                     or any((Path(cli_env["HOME"]) / ".vigil-watch").glob("cursor-*")), timeout=60)
            assert watcher.poll() is None, log.read_text()
            task = documented_shell('codex exec "Use Vigil', account, conversation)
            output = run(task.replace("codex exec ", "codex exec --strict-config "), cli_env, work)
            assert model.calls == ["mcp__vigil__monitor_create"], f"offered: {offered(model)}\n{output[-3000:]}"
            assert model.results and '{"ok":true' in model.results[0], f"{model.results}\n{output[-3000:]}"
            assert_armed(account, conversation, output)
            price_page(pages, conversation, "88.20")
            [resumed, *_] = wait_for("the wake line to resume the Codex session", lambda: [
                r for r in model.requests if "[vigil] ACMEB below $90" in json.dumps(r.get("input"))], timeout=120)
        finally:
            os.killpg(watcher.pid, signal.SIGTERM)
            watcher.wait(timeout=15)
    seen = json.dumps(resumed["input"])
    assert "88.20" in seen, seen[-2000:]
    assert "call_1" in seen, "the wake resumed another session than the one that created the monitor"


def test_claude_code_creates_a_monitor_through_the_documented_mcp_server_that_vigil_watch_wakes(account, pages,
                                                                                             cli_env, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    added = documented_block("sh", "claude mcp add").replace(DOCUMENTED_URL, f"{account.base}/mcp")
    output = run(added, cli_env, work)
    assert "✔ Connected" in output and "vigil" in output, output
    watch = VigilWatch(account, tmp_path / "watch", "--conversation", "new")  # as CLAUDE.md tells the agent
    try:
        conversation = watch.line(r"^\[vigil\] watching conversation (cc-[0-9a-f]{8})\b").group(1)
        with MessagesModel("monitor_create", create_arguments(price_page(pages, conversation))) as model:
            env = {**cli_env, "ANTHROPIC_BASE_URL": model.base_url, "ANTHROPIC_API_KEY": "sk-ant-scripted"}
            output = run(["claude", "-p", prompt(conversation), "--allowedTools", "mcp__vigil__monitor_create"],
                         env, work)
            assert model.calls == ["ToolSearch", "mcp__vigil__monitor_create"], f"{offered(model)}\n{output[-3000:]}"
            assert model.results and '{"ok":true' in model.results[0], f"{model.results}\n{output[-3000:]}"
            assert FINAL in output, output[-3000:]
        assert_armed(account, conversation, output)
        price_page(pages, conversation, "88.20")
        line = watch.line(r"^\[vigil\] ACMEB below \$90").string
    finally:
        watch.stop()
    assert "88.20" in line, line
