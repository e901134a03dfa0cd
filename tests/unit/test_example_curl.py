"""Runs each example_curl command for real against a local HTTP server and checks the signature."""

import json
import os
import re
import shutil
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from engine.signatures import SCHEMES, SECRET_ENV, example_curl, new_secret, verify

pytestmark = pytest.mark.skipif(
    not (shutil.which("bash") and shutil.which("curl") and shutil.which("openssl")),
    reason="example_curl runs bash, curl and openssl; one of them is not on PATH",
)

SENT_AT = "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
SIGNED = [s for s in SCHEMES if s != "none"]
SIGNATURE_HEADERS = {"x-hub-signature-256", "x-signature", "webhook-id", "webhook-timestamp", "webhook-signature"}


class _Recorder(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.requests.append(
            {"method": "POST", "path": self.path, "headers": dict(self.headers.items()), "body": body}
        )
        self.send_response(202)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"accepted": true}')

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    httpd.requests = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def run(command, secret, shell=("bash", "-c")):
    env = {**os.environ, SECRET_ENV: secret}
    if shell[-1] == "-c":
        return subprocess.run([*shell, command], env=env, capture_output=True, text=True, timeout=30)
    return subprocess.run(list(shell), input=command + "\n", env=env, capture_output=True, text=True, timeout=30)


def url_of(server, path="/api/triggers/trg_abc?x=1&y=2"):
    return f"http://127.0.0.1:{server.server_address[1]}{path}"


def only_request(server):
    assert len(server.requests) == 1, server.requests
    return server.requests[0]


def body_json(text="deploy finished"):
    return json.dumps({"event": text, "sent_at": SENT_AT})


@pytest.mark.parametrize("scheme", SIGNED)
def test_the_example_command_is_signed_correctly(server, scheme):
    secret = new_secret(scheme)
    result = run(example_curl(url_of(server), scheme, body_json()), secret)
    assert result.returncode == 0, result.stderr
    assert result.stdout == '{"accepted": true}'
    request = only_request(server)
    assert request["path"] == "/api/triggers/trg_abc?x=1&y=2"
    assert request["headers"]["Content-Type"] == "application/json"
    assert verify(scheme, secret, request["headers"], request["body"], time.time())
    assert not verify(scheme, new_secret(scheme), request["headers"], request["body"], time.time())
    sent = json.loads(request["body"])
    assert sent["event"] == "deploy finished"
    assert ISO.fullmatch(sent["sent_at"])  # the substitution ran, once


# Quotes, backslashes, JSON escapes, `$`, backticks, a `$(…)` that is not a date, `!`, newlines, UTF-8.
AWKWARD = 'it\'s "quoted" \\ \\n $HOME ${PATH} `id` $(id) done! !! café ✓ \t end'


@pytest.mark.parametrize("scheme", SCHEMES)
def test_awkward_bodies_are_sent_byte_for_byte(server, scheme):
    text = json.dumps({"event": AWKWARD, "sent_at": SENT_AT}, ensure_ascii=False)
    text = text.replace(", ", ",\n  ")  # a multi-line body too
    secret = new_secret(scheme)
    result = run(example_curl(url_of(server), scheme, text), secret)
    assert result.returncode == 0, result.stderr
    request = only_request(server)
    assert verify(scheme, secret, request["headers"], request["body"], time.time())
    sent = json.loads(request["body"])
    assert sent["event"] == AWKWARD
    assert ISO.fullmatch(sent["sent_at"])
    assert request["body"].decode() == text.replace(SENT_AT, sent["sent_at"])


@pytest.mark.parametrize("scheme", SIGNED)
def test_it_works_pasted_into_an_interactive_shell(server, scheme):
    """History expansion of `!` is on in an interactive bash; the command must survive it."""
    secret = new_secret(scheme)
    command = example_curl(url_of(server), scheme, body_json("done! really!"))
    result = run(command, secret, shell=("bash", "--norc", "--noprofile", "-i"))
    request = only_request(server)
    assert "event not found" not in result.stderr
    assert verify(scheme, secret, request["headers"], request["body"], time.time())
    assert json.loads(request["body"])["event"] == "done! really!"


def test_the_unsigned_command_sends_no_signature(server):
    command = example_curl(url_of(server), "none", body_json())
    assert SECRET_ENV not in command
    assert "openssl" not in command
    result = run(command, "")
    assert result.returncode == 0, result.stderr
    request = only_request(server)
    assert request["headers"]["Content-Type"] == "application/json"
    assert not SIGNATURE_HEADERS & {name.lower() for name in request["headers"]}
    assert json.loads(request["body"])["event"] == "deploy finished"


@pytest.mark.parametrize("scheme", SIGNED)
def test_signed_commands_read_the_secret_from_the_environment(server, scheme):
    secret = new_secret(scheme)
    command = example_curl(url_of(server), scheme, body_json())
    assert f"${SECRET_ENV}" in command or f"${{{SECRET_ENV}" in command
    assert secret not in command
    result = run(command, "")  # unset/empty: stop before sending anything
    assert result.returncode != 0
    assert SECRET_ENV in result.stderr
    assert server.requests == []


def test_the_url_is_quoted_for_the_shell(server):
    url = url_of(server, "/api/triggers/trg_a?x=1&y=$(id)&z='q'")
    result = run(example_curl(url, "none", "{}"), "")
    assert result.returncode == 0, result.stderr
    assert only_request(server)["path"] == "/api/triggers/trg_a?x=1&y=$(id)&z='q'"


def test_unknown_scheme_is_refused():
    with pytest.raises(ValueError):
        example_curl("http://127.0.0.1/", "rot13", "{}")


def test_the_body_stays_readable_in_the_command():
    command = example_curl("http://127.0.0.1/", "github", '{"state": "success", ' + f'"sent_at": "{SENT_AT}"' + "}")
    assert '"state": "success"' in command
    assert command.count("BODY=") == 1
    assert command.count("$(date -u") == 1
