"""`vigil watch` as a subprocess against `vigil web` and `vigil worker` on PostgreSQL and Redis, woken by real
trigger links: it prints exactly one `[vigil] <description>: <what was found>` line per wake; across a restart of
the server it prints only what is new, never a wake twice, and a later watch with the same --state-dir starts
after the last one it printed; --conversation keeps to one conversation, and `--conversation new` prints a fresh id
first and watches it; --timeout ends it with exit 0 and a line saying so. When Vigil can't be reached it names the
URL on stderr and keeps trying for --retry-for, then exits 3 (a wake that came during an outage is printed once
after it); a refused token exits 4 and bad arguments exit 2."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import requests

from tests.processes import VIGIL, free_port, serve_vigil, stop
from tests.integration.helpers import running_stack
from tests.reliability.stack import Stack

ENDED = "[vigil] watch ended after {} with no more wakes; run it again to keep watching."


def running(tmp_path: Path, *, worker: bool = True):
    """`vigil web` (and `vigil worker`), PUBLIC_API_BASE_URL its real address."""
    return running_stack(tmp_path, worker=worker)


@pytest.fixture()
def server(postgres, tmp_path, owner):
    with running(tmp_path) as stack:
        stack.token = owner[1]
        yield stack


def watch_env(token: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "VIGIL_TOKEN"}
    return env if token is None else {**env, "VIGIL_TOKEN": token}


class Watch:
    """A running `vigil watch`, its output in files; the token in $VIGIL_TOKEN, as its help advises."""

    def __init__(self, stack: Stack, state: Path, *args: str) -> None:
        self.stack = stack
        self.out, self.err = state.parent / f"{state.name}-{time.monotonic_ns()}.out", state.parent / "watch.err"
        with open(self.out, "wb") as out, open(self.err, "ab") as err:
            self.process = subprocess.Popen(
                [VIGIL, "watch", "--server", stack.base, "--state-dir", str(state), "--timeout", "120s", *args],
                env=watch_env(stack.token), stdout=out, stderr=err, start_new_session=True)

    def lines(self) -> list[str]:
        return self.out.read_text().splitlines()

    def wait_lines(self, count: int, timeout: float = 45) -> list[str]:
        deadline = time.monotonic() + timeout
        while len(self.lines()) < count:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the watch printed {self.lines()} (exit {self.process.poll()}), waiting for "
                                     f"{count} lines\n{self.err.read_text()}\n{self.stack.log_tails()}")
            time.sleep(0.1)
        return self.lines()

    def wait_stderr(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.err.read_text():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the watch never said {text!r}:\n{self.err.read_text()}")
            time.sleep(0.1)

    def wait_connected(self, state: Path, timeout: float = 30) -> None:
        """Until its first catch-up stored a cursor: from then on every wake reaches it."""
        deadline = time.monotonic() + timeout
        while not any(state.glob("cursor-*")):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the watch never connected\n{self.err.read_text()}\n{self.stack.log_tails()}")
            time.sleep(0.1)


def run_watch(base: str, token: str | None, state: Path, *args: str) -> subprocess.CompletedProcess:
    """`vigil watch` run to its end."""
    return subprocess.run([VIGIL, "watch", "--server", base, "--state-dir", str(state), *args],
                          env=watch_env(token), capture_output=True, text=True, timeout=60)


def hook(stack: Stack, conversation: str, description: str) -> str:
    """A webhook monitor created through the tool endpoint; its trigger link."""
    answer = requests.post(f"{stack.base}/api/tool/monitor", headers=stack.auth, timeout=30, json={
        "action": "monitor_create", "context": {"conversation_id": conversation},
        "arguments": {"description": description, "source": {"type": "webhook"}}})
    body = answer.json()
    assert body["ok"], body
    assert body["result"]["url"].startswith(f"{stack.base}/api/triggers/")
    return body["result"]["url"]


def fire(link: str, payload: dict) -> None:
    answer = requests.post(link, json=payload, timeout=30)
    assert answer.status_code == 202, answer.text


def wakes(stack: Stack, count: int, timeout: float = 30) -> list[dict]:
    """Until the account has `count` wakes (read from /api/wakes), then those."""
    deadline = time.monotonic() + timeout
    while True:
        found = requests.get(f"{stack.base}/api/wakes", params={"after": "0"}, headers=stack.auth,
                             timeout=30).json()["messages"]
        if len(found) >= count:
            return found
        assert time.monotonic() < deadline, f"{len(found)} wakes, not {count}\n{stack.log_tails()}"
        time.sleep(0.2)


DEPLOY = '[vigil] deploy hook: { "event": "done", "n": 1 }'
RELEASE = '[vigil] release hook: { "event": "released", "version": "2.0" }'
ROLLBACK = '[vigil] rollback hook: { "event": "rolled back" }'
CANARY = '[vigil] canary hook: { "healthy": true }'


def test_watch_prints_each_wake_once_across_a_server_restart_and_resumes_from_its_state(server, tmp_path):
    state = tmp_path / "watch-state"
    links = {name: hook(server, conversation, f"{name} hook") for name, conversation in
             (("deploy", "laptop-1"), ("release", "laptop-2"), ("rollback", "laptop-1"), ("canary", "laptop-2"))}
    watch = Watch(server, state)
    try:
        watch.wait_connected(state)
        fire(links["deploy"], {"event": "done", "n": 1})
        assert watch.wait_lines(1) == [DEPLOY]
        fire(links["release"], {"event": "released", "version": "2.0"})
        assert watch.wait_lines(2) == [DEPLOY, RELEASE]

        problems = server.stop_all()  # SIGTERM to web and worker; nothing fires while they are down
        assert problems == [], problems
        server.start_worker(threads=2)
        server.start_web()  # the same port
        fire(links["rollback"], {"event": "rolled back"})
        assert watch.wait_lines(3) == [DEPLOY, RELEASE, ROLLBACK]
    finally:
        stop(watch.process)
    assert watch.lines() == [DEPLOY, RELEASE, ROLLBACK]

    fire(links["canary"], {"healthy": True})  # while no watch runs
    wakes(server, 4)
    later = run_watch(server.base, server.token, state, "--timeout", "3s")
    assert later.returncode == 0, later.stderr
    assert later.stdout.splitlines() == [CANARY, ENDED.format("3s")], "only what came after the stored cursor"


def test_watch_conversation_keeps_to_one_conversation_and_timeout_exits_0(server, tmp_path):
    fire(hook(server, "laptop-1", "deploy hook"), {"event": "done", "n": 1})
    wakes(server, 1)
    fire(hook(server, "laptop-2", "release hook"), {"event": "released", "version": "2.0"})
    wakes(server, 2)
    started = time.monotonic()
    every, one = (subprocess.Popen([VIGIL, "watch", "--server", server.base, "--state-dir", str(tmp_path / name),
                                    "--after", "0", "--timeout", "3s", *args], env=watch_env(server.token),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                  for name, args in (("every", ()), ("one", ("--conversation", "laptop-1"))))
    try:
        (every_out, every_err), (one_out, one_err) = every.communicate(timeout=60), one.communicate(timeout=60)
    finally:
        for process in (every, one):
            if process.poll() is None:
                process.kill()
                process.wait()
    assert (every.returncode, one.returncode) == (0, 0), every_err + one_err
    assert every_out.splitlines() == [DEPLOY, RELEASE, ENDED.format("3s")]
    assert one_out.splitlines() == [DEPLOY, ENDED.format("3s")]
    assert time.monotonic() - started >= 3


def test_watch_exits_4_at_once_when_the_server_refuses_the_token_and_3_when_the_address_is_not_vigil(owner,
                                                                                                      tmp_path):
    with running(tmp_path, worker=False) as stack:
        refused = run_watch(stack.base, "vgl_not-a-real-token-5150", tmp_path / "state", "--timeout", "30s",
                            "--retry-for", "30s")
        elsewhere = run_watch(f"{stack.base}/not-vigil", owner[1], tmp_path / "state", "--timeout", "30s",
                              "--retry-for", "30s")
    assert refused.returncode == 4, (refused.stdout, refused.stderr)
    assert f"Vigil at {stack.base}/api/events refused the token (401)" in refused.stderr
    assert "trying again" not in refused.stderr, "a refused token is not retried"
    assert refused.stdout.splitlines() == [
        f"[vigil] watch stopped: Vigil at {stack.base}/api/events refused the token (401); set VIGIL_TOKEN to a "
        "valid runtime token (vigil token create), then run it again."]
    assert "vgl_not-a-real-token-5150" not in refused.stderr + refused.stdout
    assert elsewhere.returncode == 3, (elsewhere.stdout, elsewhere.stderr)
    assert f"can't reach Vigil at {stack.base}/not-vigil/api/events: it answered 404" in elsewhere.stderr
    assert "trying again" not in elsewhere.stderr
    assert elsewhere.stdout.startswith("[vigil] watch stopped: can't reach Vigil at ")


def test_watch_exits_3_naming_the_url_when_vigil_cannot_be_reached(tmp_path):
    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    gone = run_watch(nowhere, "vgl_any", tmp_path / "state", "--retry-for", "1s")
    assert gone.returncode == 3, (gone.stdout, gone.stderr)
    assert f"vigil watch: can't reach Vigil at {nowhere}/api/events: connection refused; trying again for up to " \
           "1s." in gone.stderr
    assert gone.stdout.splitlines() == [
        f"[vigil] watch stopped: can't reach Vigil at {nowhere}/api/events: connection refused; check --server (or "
        "$VIGIL_URL) and that Vigil is running, then run it again."]
    early = run_watch(nowhere, "vgl_any", tmp_path / "state", "--timeout", "2s")  # --timeout before --retry-for
    assert early.returncode == 3, (early.stdout, early.stderr)
    assert "watch ended" not in early.stdout and early.stdout.startswith("[vigil] watch stopped: can't reach Vigil")


def test_watch_prints_a_wake_that_came_while_vigil_was_down_once_after_it_returns(server, tmp_path):
    state = tmp_path / "watch-state"
    links = {name: hook(server, "laptop-1", f"{name} hook") for name in ("deploy", "rollback", "canary")}
    watch = Watch(server, state, "--timeout", "10m", "--retry-for", "5m")
    try:
        watch.wait_connected(state)
        fire(links["deploy"], {"event": "done", "n": 1})
        assert watch.wait_lines(1) == [DEPLOY]

        assert server.stop("web") == 0  # the worker keeps running
        watch.wait_stderr(f"can't reach Vigil at {server.base}/api/events: ")
        other = serve_vigil([VIGIL, "web", "--host", "127.0.0.1"], lambda port: {
            **server.env, "PUBLIC_API_BASE_URL": f"http://127.0.0.1:{port}"}, tmp_path / "other-web.log", timeout=60)
        try:  # the wake comes through another web process while the watch's server is down
            fire(links["rollback"].replace(server.base, other.base), {"event": "rolled back"})
            deadline = time.monotonic() + 30
            while len(requests.get(f"{other.base}/api/wakes", params={"after": "0"}, headers=server.auth,
                                   timeout=30).json()["messages"]) < 2:
                assert time.monotonic() < deadline, server.log_tails()
                time.sleep(0.2)
        finally:
            stop(other.process)
        server.start_web()  # the same port
        assert watch.wait_lines(2) == [DEPLOY, ROLLBACK]
        watch.wait_stderr(f"vigil watch: reconnected to Vigil at {server.base}.")
        fire(links["canary"], {"healthy": True})
        assert watch.wait_lines(3) == [DEPLOY, ROLLBACK, CANARY]
    finally:
        stop(watch.process)
    assert watch.lines() == [DEPLOY, ROLLBACK, CANARY], "each wake once, across the outage"


def test_watch_conversation_new_prints_its_id_first_then_watches_that_conversation(server, tmp_path):
    elsewhere = hook(server, "laptop-2", "release hook")
    watch = Watch(server, tmp_path / "watch-state", "--conversation", "new")
    try:
        first = watch.wait_lines(1)[0]
        named = re.fullmatch(r'\[vigil\] watching conversation (cc-[0-9a-f]{8}): pass conversation_id "\1" to '
                             r"monitor_create, and --conversation \1 when you run vigil watch again\.", first)
        assert named, first
        fire(elsewhere, {"event": "released", "version": "2.0"})  # as soon as the model knows the id
        fire(hook(server, named.group(1), "deploy hook"), {"event": "done", "n": 1})
        assert watch.wait_lines(2) == [first, DEPLOY]
    finally:
        stop(watch.process)
    assert watch.lines() == [first, DEPLOY]

    short = run_watch(server.base, server.token, tmp_path / "short", "--conversation", "new", "--timeout", "2s")
    assert short.returncode == 0, short.stderr
    conversation = re.search(r"cc-[0-9a-f]{8}", short.stdout).group(0)
    assert conversation != named.group(1)
    assert short.stdout.splitlines()[1:] == [f"[vigil] watch ended after 2s with no more wakes; run it again with "
                                             f"--conversation {conversation} to keep watching."]


def test_watch_help_shows_the_default_timeout_and_the_exit_codes():
    shown = subprocess.run([VIGIL, "watch", "--help"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert "(default 4m45s, under the 5 minutes after which Claude Code's Monitor stops a command)" in text
    assert "--retry-for RETRY_FOR while Vigil can't be reached, keep trying this long, then exit 3 (default 60s)" in text
    for code in ("0 --timeout was reached", "2 a bad argument", "3 Vigil could not be reached for --retry-for",
                 "4 Vigil refused the token (401/403)"):
        assert code in text


def test_watch_exits_2_on_bad_arguments(tmp_path):
    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens there: the arguments are refused first
    nonsense = run_watch(nowhere, "vgl_any", tmp_path / "state", "--timeout", "nonsense")
    assert nonsense.returncode == 2 and "--timeout must be a duration like 90s, 30m or 2h" in nonsense.stderr
    tokenless = run_watch(nowhere, None, tmp_path / "state", "--timeout", "3s")
    assert tokenless.returncode == 2 and "give --token or set VIGIL_TOKEN" in tokenless.stderr
    schemeless = run_watch("localhost:8000", "vgl_any", tmp_path / "state", "--timeout", "3s")
    assert schemeless.returncode == 2 and "--server must be Vigil's address, like http://127.0.0.1:8000 (got " \
        "'localhost:8000')." in schemeless.stderr
    retry = run_watch(nowhere, "vgl_any", tmp_path / "state", "--retry-for", "soon")
    assert retry.returncode == 2 and "--retry-for must be a duration like 90s, 30m or 2h" in retry.stderr
    assert nonsense.stdout == tokenless.stdout == schemeless.stdout == retry.stdout == ""
