"""Running Vigil as docs/operations.md says operators do: the project's Procfile under honcho, with an env file,
against real PostgreSQL and Redis, drives a trigger link to its wake; and the systemd units in deploy/systemd
parse, each starting a real `vigil` command. Nothing here is timed; each wait is bounded."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import psycopg2
import pytest
import requests

from tests.conftest import TEST_DATABASE_URL, TEST_REDIS_URL
from tests.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
UNITS = ROOT / "deploy" / "systemd"
WAIT = 90  #: bound for the stack to come up, and for the wake to arrive


def _fresh_database(name: str) -> str:
    """An empty database of its own: the release step must create the schema from nothing."""
    admin = urlparse(TEST_DATABASE_URL)._replace(path="/postgres").geturl()
    conn = psycopg2.connect(admin, connect_timeout=5)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        cur.execute(f'CREATE DATABASE "{name}"')
    conn.close()
    return urlparse(TEST_DATABASE_URL)._replace(path=f"/{name}").geturl()


def _honcho(*args: str, cwd: Path, env: dict, timeout: float = 60) -> str:
    done = subprocess.run([str(BIN / "honcho"), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"honcho {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _until(check, what: str, log: Path):
    deadline = time.monotonic() + WAIT
    last = None
    while time.monotonic() < deadline:
        try:
            if result := check():
                return result
        except requests.RequestException as exc:
            last = exc
        time.sleep(0.3)
    raise AssertionError(f"not within {WAIT}s: {what} (last: {last!r})\n{log.read_text(errors='replace')[-4000:]}")


def test_honcho_runs_the_procfile_and_a_trigger_link_wakes_its_conversation(postgres, tmp_path):
    """docs/operations.md's one-box path, step by step: the env file, `honcho run vigil migrate` (the release
    step), `honcho start web worker scheduler`, the account and token from `honcho run vigil …`; then an agent's
    trigger link is posted to and the wake is read back. SIGTERM to honcho stops every process it started."""
    database = _fresh_database(urlparse(TEST_DATABASE_URL).path.strip("/") + "_honcho")
    port = free_port()
    (tmp_path / ".env").write_text("\n".join([
        f"DATABASE_URL={database}", f"REDIS_URL={TEST_REDIS_URL}", "SECRET_KEY=honcho-smoke-test-secret",
        f"VIGIL_DATA_DIR={tmp_path / 'var'}", f"PORT={port}", "WEB_HOST=127.0.0.1",
        f"PUBLIC_API_BASE_URL=http://127.0.0.1:{port}", "WORKER_PROCESSES=1", "WORKER_THREADS=2", ""]))
    shutil.copy(ROOT / "Procfile", tmp_path / "Procfile")
    # what an operator's shell has: the virtualenv's bin on PATH; nothing of this test's own environment
    env = {"PATH": f"{BIN}{os.pathsep}/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}

    assert "applied" in _honcho("run", "vigil", "migrate", cwd=tmp_path, env=env)
    log = tmp_path / "honcho.log"
    with open(log, "wb") as out:
        honcho = subprocess.Popen([str(BIN / "honcho"), "start", "web", "worker", "scheduler"], cwd=tmp_path,
                                  env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        _until(lambda: requests.get(f"{base}/readyz", timeout=5).status_code == 200, "web is ready", log)
        _honcho("run", "vigil", "user", "create", "ops@example.com", "--password", "a-long-password-1",
                cwd=tmp_path, env=env)
        token = _honcho("run", "vigil", "token", "create", "--user", "ops@example.com", cwd=tmp_path,
                        env=env).strip().splitlines()[-1]
        auth = {"Authorization": f"Bearer {token}"}
        created = requests.post(f"{base}/api/tool/monitor", headers=auth, timeout=30, json={
            "action": "monitor_create", "context": {"conversation_id": "ops-1", "channel": "chat"},
            "arguments": {"description": "the deploy webhook fires", "source": {"type": "webhook",
                                                                                "signature": "none"},
                          "on_match": "Tell the user the deploy is out."}}).json()
        assert created["ok"], created
        link = created["result"]["url"]
        assert link.startswith(f"{base}/api/triggers/")
        assert requests.post(link, json={"deploy": "v42 is out"}, timeout=30).status_code == 202

        def woke():
            messages = requests.get(f"{base}/api/conversations/ops-1/messages?after=0", headers=auth,
                                    timeout=10).json()["messages"]
            return [m for m in messages if "v42 is out" in str(m)]

        assert _until(woke, "the delivery woke ops-1", log)
        # the three really ran under honcho (a worker made the wake; the scheduler announced itself)
        text = log.read_text(errors="replace")
        assert re.search(r"^\S*\s*web\.1\s+\|", text, re.M) and re.search(r"^\S*\s*worker\.1\s+\|", text, re.M)
        assert re.search(r"^\S*\s*scheduler\.1\s+\|", text, re.M), text[-3000:]
    finally:
        if honcho.poll() is None:
            os.kill(honcho.pid, signal.SIGTERM)
        try:
            honcho.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(honcho.pid, signal.SIGKILL)
            raise
    leftovers = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
    assert not leftovers, f"processes left running after honcho stopped: {leftovers}"


def _subcommands() -> set[str]:
    done = subprocess.run([str(BIN / "vigil"), "--help"], capture_output=True, text=True, timeout=60)
    return set(re.findall(r"^\s{4}(\w[\w-]*)\s", done.stdout, re.M))


def _exec_starts() -> dict[str, str]:
    return {unit.name: line.split("=", 1)[1] for unit in sorted(UNITS.glob("*.service"))
            for line in unit.read_text().splitlines() if line.startswith("ExecStart=")}


def test_each_unit_starts_a_real_vigil_command_and_the_procfile_the_same_ones():
    starts = _exec_starts()
    assert set(starts) == {"vigil-migrate.service", "vigil-web.service", "vigil-worker.service",
                           "vigil-scheduler.service"}
    commands = _subcommands()
    for unit, line in starts.items():
        program, subcommand, *args = line.split()
        assert program == "/opt/vigil/.venv/bin/vigil" and subcommand in commands, (unit, line)
        parsed = subprocess.run([str(BIN / "vigil"), subcommand, *args, "--help"], capture_output=True, text=True,
                                timeout=60)
        assert parsed.returncode == 0, f"{unit}: `vigil {subcommand} {' '.join(args)}` is refused: {parsed.stderr}"
    procfile = dict(line.split(":", 1) for line in (ROOT / "Procfile").read_text().splitlines() if line.strip())
    assert set(procfile) == {"release", "web", "worker", "scheduler"}
    for name, command in procfile.items():
        assert command.split()[:2] == ["vigil", {"release": "migrate"}.get(name, name)], (name, command)
    for unit in ("vigil-web.service", "vigil-worker.service", "vigil-scheduler.service"):
        text = (UNITS / unit).read_text()
        assert "Requires=vigil-migrate.service" in text and "After=vigil-migrate.service" in text, unit
        assert "Restart=on-failure" in text and "EnvironmentFile=/etc/vigil/vigil.env" in text, unit


def _units_for_this_machine(folder: Path, env_file: Path) -> list[str]:
    """The units as an operator installs them, with this checkout's virtualenv in place of /opt/vigil and this
    machine's user: systemd-analyze checks that each ExecStart is an executable and each EnvironmentFile's
    directory is absolute."""
    names = []
    for unit in sorted(UNITS.iterdir()):
        text = (unit.read_text().replace("/opt/vigil/.venv/bin/vigil", str(BIN / "vigil"))
                .replace("WorkingDirectory=/opt/vigil", f"WorkingDirectory={ROOT}")
                .replace("/etc/vigil/vigil.env", str(env_file))
                .replace("User=vigil", "User=root").replace("Group=vigil", "Group=root"))
        (folder / unit.name).write_text(text)
        names.append(str(folder / unit.name))
    return names


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here")
def test_the_systemd_units_pass_systemd_analyze_verify_and_a_broken_one_does_not(tmp_path):
    env_file = tmp_path / "vigil.env"
    shutil.copy(ROOT / "deploy" / "vigil.env.example", env_file)
    units = _units_for_this_machine(tmp_path, env_file)
    done = subprocess.run(["systemd-analyze", "verify", "--man=no", *units], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    complaints = [line for line in done.stderr.splitlines() if str(tmp_path) in line or "vigil" in line]
    assert done.returncode == 0 and not complaints, done.stderr
    web = tmp_path / "vigil-web.service"
    web.write_text(web.read_text().replace(str(BIN / "vigil"), str(tmp_path / "no-such-vigil")))
    broken = subprocess.run(["systemd-analyze", "verify", "--man=no", *units], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert broken.returncode != 0 and "no-such-vigil" in broken.stderr, broken.stderr
