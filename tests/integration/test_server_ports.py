"""Test servers start on a port picked a moment before they bind it: when another process takes it in between,
the server starts again on another port instead of failing the test (issue 27)."""

from __future__ import annotations

import socket

import pytest
import requests

from tests.processes import VIGIL, free_port, listens, serve_vigil, stop


def embedded_env(tmp_path) -> dict:
    return {"VIGIL_DATA_DIR": str(tmp_path / "data"), "DATABASE_URL": "", "REDIS_URL": ""}


def test_serve_vigil_starts_again_on_another_port_when_its_port_was_taken(tmp_path):
    log = tmp_path / "serve.log"
    with socket.create_server(("127.0.0.1", 0)) as other:  # another process bound the picked port first
        taken = other.getsockname()[1]
        picks = iter([taken])
        served = serve_vigil([VIGIL, "serve"], lambda port: {**embedded_env(tmp_path), "PUBLIC_API_BASE_URL":
                                                              f"http://127.0.0.1:{port}"},
                             log, pick=lambda: next(picks, None) or free_port())
        try:
            assert served.port != taken and listens(served.process.pid, served.port)
            assert served.env["PUBLIC_API_BASE_URL"] == served.base
            assert requests.get(f"{served.base}/readyz", timeout=10).json()["ok"] is True
            assert f"('127.0.0.1', {taken}): address already in use" in log.read_text()
        finally:
            assert stop(served.process) == 0


def test_serve_vigil_reports_a_server_that_failed_for_another_reason_without_retrying(tmp_path):
    picked = []

    def pick() -> int:
        picked.append(free_port())
        return picked[-1]

    env = {**embedded_env(tmp_path), "SCHEDULER_TICK_SECONDS": "soon"}
    with pytest.raises(AssertionError, match="SCHEDULER_TICK_SECONDS") as failed:
        serve_vigil([VIGIL, "serve"], env, tmp_path / "serve.log", pick=pick)
    assert "the server exited with" in str(failed.value) and len(picked) == 1
