"""`vigil web` on adapters/quiet_server.py: its main loop sleeps a second at a time instead of a tenth, yet every
answer still carries the current Date and a SIGTERM still stops it at once, cleanly."""

from __future__ import annotations

import signal
import subprocess
import time
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

import requests

from tests.conftest import TEST_DATABASE_URL, TEST_REDIS_URL
from tests.processes import VIGIL, serve_vigil


def test_web_answers_with_the_current_date_and_stops_on_sigterm(postgres, tmp_path):
    env = {"DATABASE_URL": TEST_DATABASE_URL, "REDIS_URL": TEST_REDIS_URL, "SECRET_KEY": "quiet-server-test",
           "VIGIL_DATA_DIR": str(tmp_path)}
    served = serve_vigil([VIGIL, "web"], env, tmp_path / "web.log")
    try:
        for _ in range(3):  # seconds apart: a Date refreshed only at start would fall behind
            time.sleep(1.5)
            answer = requests.get(f"{served.base}/healthz", timeout=10)
            stamped = parsedate_to_datetime(answer.headers["Date"])
            assert abs((datetime.now(timezone.utc) - stamped).total_seconds()) <= 2, answer.headers["Date"]
    finally:
        served.process.send_signal(signal.SIGTERM)
        try:
            code = served.process.wait(15)
        except subprocess.TimeoutExpired:
            served.process.kill()
            raise AssertionError("vigil web did not stop within 15 s of SIGTERM") from None
    assert code == 0, (tmp_path / "web.log").read_text()[-2000:]
