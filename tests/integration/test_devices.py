"""Paired devices end to end: a real `vigil runner` subprocess paired to two real `vigil web` processes (a
round-robin proxy alternates its requests between them), with a worker and a scheduler, on PostgreSQL and
Redis. Commands run on the "device" (this machine, in the runner's process groups), never in the web."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import requests

from models.tables import Monitor
from tests.conftest import TEST_DATABASE_URL, TEST_REDIS_URL
from tests.integration.conftest import _account
from tests.integration.helpers import db, wait_for
from tests.processes import (
    VIGIL, group_gone, processes_with, serve_vigil, start, stop, terminate, vigil,
)
from tests.proxy import RoundRobinProxy

PASSWORD = "a-device-test-password"
ENV = {"DATABASE_URL": TEST_DATABASE_URL, "REDIS_URL": TEST_REDIS_URL, "SECRET_KEY": "devices-test-secret",
       "MONITOR_MIN_INTERVAL_SECONDS": "1", "SCHEDULER_TICK_SECONDS": "0.2", "DEVICE_ONLINE_SECONDS": "4",
       "DEVICE_OFFLINE_SECONDS": "6", "RUNNER_POLL_SECONDS": "2", "MONITOR_UNREACHABLE_GRACE_SECONDS": "3",
       "DELIVERY_SWEEP_SECONDS": "3", "MONITOR_MAX_WAKES_PER_HOUR": "1000", "MONITOR_MAX_FIRES_PER_CONVERSATION_DAY": "100000", "dramatiq_worker_timeout": "100",
       "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def stack(postgres, tmp_path_factory):
    root = tmp_path_factory.mktemp("devices")
    proxy = RoundRobinProxy()  # the web processes join it once each holds a port of its own
    env = {**ENV, "VIGIL_DATA_DIR": str(root / "data"), "PUBLIC_API_BASE_URL": proxy.base}
    ports = []
    processes = {}
    try:
        for n in range(2):
            served = serve_vigil([VIGIL, "web"], env, root / f"web{n}.log")
            processes[f"web{n}"] = served.process
            ports.append(served.port)
            proxy.add(("127.0.0.1", served.port))
        processes["worker"] = start([VIGIL, "worker", "--processes", "1", "--threads", "2"], env, root / "worker.log")
        processes["scheduler"] = start([VIGIL, "scheduler"], env, root / "scheduler.log")
        yield {"base": proxy.base, "env": env, "root": root, "proxy": proxy, "ports": ports}
    finally:
        for name, process in processes.items():
            (terminate if name == "worker" else stop)(process)
        proxy.close()


class Owner:
    """An account: its runtime token, a signed-in browser session, and its paired runners."""

    def __init__(self, stack, postgres, email: str, tmp_path: Path) -> None:
        self.stack, self.email, self.tmp = stack, email, tmp_path
        self.user, self.token = _account(postgres, email, PASSWORD)
        self.session = requests.Session()
        page = self.session.get(f"{stack['base']}/login", timeout=10).text
        csrf = re.search(r'name="_csrf" value="([^"]+)"', page).group(1)
        self.session.post(f"{stack['base']}/login", data={"email": email, "password": PASSWORD, "_csrf": csrf},
                          timeout=10)
        page = self.session.get(f"{stack['base']}/settings/devices", timeout=10).text
        self.csrf = re.search(r'"X-CSRF-Token": "([^"]+)"', page).group(1)
        self.runners: list[subprocess.Popen] = []

    def pair(self, name: str, mode: str = "full") -> tuple[int, Path]:
        """`vigil device pair-code`, `vigil runner pair`, then `vigil runner` in the background."""
        code = vigil("device", "pair-code", "--user", self.email, "--name", name, env=self.stack["env"]).split()[-1]
        state = self.tmp / f"runner-{name}"
        paired = subprocess.run([VIGIL, "runner", "pair", "--server", self.stack["base"], "--code", code,
                                 "--state-dir", str(state)], capture_output=True, text=True, timeout=30)
        assert paired.returncode == 0, paired.stderr
        self.start_runner(state)
        device = self.device(name)
        if mode == "full":
            self.patch(device["id"], {"approval_mode": "full"})
        wait(lambda: self.device(name)["online"], "the device never came online")
        return device["id"], state

    def start_runner(self, state: Path) -> subprocess.Popen:
        runner = start([VIGIL, "runner", "--state-dir", str(state)], {}, state.with_suffix(".log"))
        self.runners.append(runner)
        return runner

    def device(self, name: str) -> dict:
        devices = requests.get(f"{self.stack['base']}/api/devices", headers=self.auth, timeout=10).json()["devices"]
        return next(d for d in devices if d["name"] == name)

    def patch(self, device_id: int, changes: dict) -> requests.Response:
        return self.session.patch(f"{self.stack['base']}/api/devices/{device_id}", json=changes,
                                  headers={"X-CSRF-Token": self.csrf}, timeout=10)

    @property
    def auth(self) -> dict:
        return {"Authorization": f"Bearer {self.token}"}

    def tool(self, action: str, arguments: dict | None = None, conversation: str = "conv-1") -> dict:
        return requests.post(f"{self.stack['base']}/api/tool/monitor", headers=self.auth, timeout=30,
                             json={"action": action, "arguments": arguments or {},
                                   "context": {"conversation_id": conversation}}).json()

    def wakes(self, conversation: str = "conv-1") -> list[dict]:
        answer = requests.get(f"{self.stack['base']}/api/conversations/{conversation}/messages?after=0&limit=100",
                              headers=self.auth, timeout=10)
        return [m for m in answer.json()["messages"] if m["role"] == "wake"] if answer.status_code == 200 else []

    def close(self) -> None:
        for runner in self.runners:
            if runner.poll() is None:
                stop(runner)


@pytest.fixture()
def owner(stack, postgres, tmp_path):
    account = Owner(stack, postgres, "device-owner@example.com", tmp_path)
    yield account
    account.close()


def wait(predicate, message: str, seconds: float = 30):
    return wait_for(predicate, seconds, message)


def test_stream_watcher_wakes_on_error_lines_and_cancel_kills_its_group(owner, stack, tmp_path):
    owner.pair("laptop")
    log = tmp_path / "app.log"
    log.write_text("")
    created = owner.tool("monitor_create", {"description": "app errors", "source": {
        "type": "command", "device": "laptop", "mode": "stream", "cwd": str(tmp_path),
        "command": "tail -F app.log | grep --line-buffered ERROR"}})
    assert created["ok"] is True and created["result"]["status"] == "active", created
    monitor_id = created["result"]["monitor_id"]
    groups = wait(lambda: processes_with("tail -F app.log"), "the watcher never ran")
    with log.open("a") as fh:
        fh.write("INFO all good\nERROR disk full\nINFO still fine\n")
    first = wait(lambda: owner.wakes(), "no wake for the ERROR line")
    assert "ERROR disk full" in first[0]["content"] and "INFO" not in first[0]["content"]
    assert first[0]["metadata"]["wake"]["source"] == "command"
    with log.open("a") as fh:
        fh.write("ERROR second one\n")
    wait(lambda: len(owner.wakes()) == 2, "no wake for the second ERROR line")
    assert "ERROR second one" in owner.wakes()[1]["content"]

    assert owner.tool("monitor_cancel", {"monitor_id": monitor_id})["ok"] is True
    pgids = {pgid for _, pgid in groups}
    wait(lambda: all(group_gone(pgid) for pgid in pgids), "the watcher's process group outlived its cancel")
    assert not processes_with("tail -F app.log")
    with log.open("a") as fh:
        fh.write("ERROR after the cancel\n")
    time.sleep(1)
    assert len(owner.wakes()) == 2
    assert all(count > 0 for count in stack["proxy"].connections.values()), "the runner used one web process only"


def test_polled_command_threshold_regex_and_exit_code(owner, tmp_path):
    owner.pair("ci-box")
    status = tmp_path / "status.txt"
    status.write_text("queue depth 120, all PASSED\n")
    common = {"device": "ci-box", "cwd": str(tmp_path), "type": "command"}
    depth = owner.tool("monitor_create", {"description": "queue drains below 100", "interval": "1s",
                                          "source": {**common, "command": "cat status.txt"},
                                          "check": {"type": "threshold", "op": "below", "value": 100}})
    failing = owner.tool("monitor_create", {"description": "tests fail", "interval": "1s", "max_wakes": 5,
                                            "source": {**common, "command": "cat status.txt"},
                                            "check": {"type": "regex", "pattern": "FAILED"}})
    flag = owner.tool("monitor_create", {"description": "the deploy flag appears", "interval": "1s",
                                         "source": {**common, "command": "test -f deployed.flag"},
                                         "check": {"type": "status", "value_path": "data.exit_code", "values": [0]}},
                      conversation="conv-2")
    for created in (depth, failing, flag):
        assert created["ok"] is True and created["result"]["status"] == "active", created
    wait(lambda: all(_baseline(c["result"]["monitor_id"]) for c in (depth, failing, flag)), "no baseline arrived")
    assert owner.wakes() == [] and owner.wakes("conv-2") == []
    status.write_text("queue depth 80, 1 FAILED\n")
    (tmp_path / "deployed.flag").write_text("yes")
    wait(lambda: len(owner.wakes()) == 2, "the threshold and the regex did not both fire")
    texts = " ".join(m["content"] for m in owner.wakes())
    assert "80" in texts and "FAILED" in texts
    flagged = wait(lambda: owner.wakes("conv-2"), "the exit-code status check did not fire")
    assert "deploy flag" in flagged[0]["content"]


def _baseline(monitor_id: str) -> bool:
    with db():
        monitor = Monitor.get_by_id(monitor_id)
        return monitor.check_state is not None and monitor.check_count >= 1


def test_offline_device_is_unreachable_then_paused(owner, tmp_path):
    owner.pair("flaky")
    created = owner.tool("monitor_create", {"description": "uptime", "interval": "1s", "source": {
        "type": "command", "device": "flaky", "command": "echo up"}})
    monitor_id = created["result"]["monitor_id"]
    wait(lambda: _baseline(monitor_id), "no baseline arrived")
    for runner in owner.runners:
        runner.send_signal(signal.SIGKILL)
        runner.wait(5)
    wait(lambda: not owner.device("flaky")["online"], "the device never went offline", seconds=20)
    paused = wait(lambda: [m for m in owner.wakes() if m["metadata"]["wake"]["source"] == "monitor_paused"],
                  "the monitor never paused", seconds=30)
    assert "unreachable" in paused[0]["content"] and "offline" in paused[0]["content"]
    with db():
        assert Monitor.get_by_id(monitor_id).status == "paused"


def test_revoke_unpairs_the_runner_and_pauses_its_monitors(owner, stack, tmp_path):
    device_id, state = owner.pair("old-laptop")
    created = owner.tool("monitor_create", {"description": "a watcher", "source": {
        "type": "command", "device": "old-laptop", "mode": "stream", "command": "sleep 300"}})
    monitor_id = created["result"]["monitor_id"]
    # the shell and its sleep, in the group of their own the runner started them in
    [watcher_group] = {group for _, group in wait(lambda: processes_with("sleep 300"), "the watcher never ran")}
    answer = owner.session.post(f"{stack['base']}/api/devices/{device_id}/revoke", headers={"X-CSRF-Token": owner.csrf},
                                timeout=10)
    assert answer.status_code == 200
    runner = owner.runners[-1]
    assert runner.wait(30) == 3
    assert "unpaired" in state.with_suffix(".log").read_text()
    wait(lambda: group_gone(watcher_group), "the runner left its watcher running after it was unpaired: "
                                            f"{processes_with('sleep 300')}, group {watcher_group}")
    with db():
        assert Monitor.get_by_id(monitor_id).status == "paused"
    assert any("revoked" in m["content"] for m in owner.wakes())
    assert owner.tool("monitor_list")["result"]["monitors"][0]["status"] == "paused"


def test_approval_card_arms_the_exact_command(owner, stack, tmp_path):
    owner.pair("asks", mode="ask")
    created = owner.tool("monitor_create", {"description": "greeting", "source": {
        "type": "command", "device": "asks", "mode": "stream", "command": "echo hello from the device"}})
    result = created["result"]
    assert result["status"] == "awaiting_approval" and result["approve_url"].endswith(f"/commands/{result['monitor_id']}")
    time.sleep(1)
    assert owner.wakes() == [] and not processes_with("hello from the device")
    refused = requests.post(f"{stack['base']}/api/monitors/{result['monitor_id']}/approve", headers=owner.auth,
                            timeout=10)
    assert refused.status_code == 403
    page = owner.session.get(result["approve_url"], timeout=10).text
    assert "echo hello from the device" in page and "Approve" in page
    approved = owner.session.post(f"{stack['base']}/api/monitors/{result['monitor_id']}/approve",
                                  headers={"X-CSRF-Token": owner.csrf}, timeout=10)
    assert approved.status_code == 200 and approved.json()["status"] == "active"
    woke = wait(lambda: [m for m in owner.wakes() if "hello from the device" in m["content"]], "no wake after approval")
    assert woke
    ended = wait(lambda: [m for m in owner.wakes() if "watcher exited (code 0)" in m["content"]], "no exit wake")
    assert len(ended) == 1


def test_seed_002_start_list_stop(owner):
    owner.pair("only-one")
    started = owner.tool("start", {"command": "while true; do echo tick; sleep 1; done", "description": "ticks"})
    message = started["result"]["message"]
    assert message.startswith("Started monitor mon_") and 'watching "ticks"' in message
    watch_id = started["result"]["id"]
    assert f"Stop it with action=stop, id={watch_id}." in message
    assert [w["id"] for w in owner.tool("list")["result"]["watches"]] == [watch_id]
    wait(lambda: [m for m in owner.wakes() if "tick" in m["content"]], "no tick arrived")
    assert owner.tool("stop", {"id": watch_id})["ok"] is True
    wait(lambda: not processes_with("do echo tick"), "the watcher survived its stop")
    assert owner.tool("list")["result"]["watches"] == []


def test_second_runner_with_the_same_token_is_refused(owner, tmp_path):
    _, state = owner.pair("shared")
    copy = tmp_path / "copied-state"
    copy.mkdir()
    (copy / "device.json").write_bytes((state / "device.json").read_bytes())
    os.chmod(copy / "device.json", 0o600)
    second = owner.start_runner(copy)
    assert second.wait(30) == 4
    assert "Another runner is already connected" in copy.with_suffix(".log").read_text()
    assert owner.runners[0].poll() is None
