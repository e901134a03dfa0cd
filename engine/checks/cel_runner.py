"""CEL conditions evaluated in a child process, with a deadline and a memory cap.

The CEL library evaluates in native code and holds the GIL throughout. Its cost is not bounded by the size
of the expression: three nested comprehensions over a 200-item list took 4 s, over 1,000 items they would
take minutes, and `x in data.items` inside a comprehension is quadratic without any nesting. In-process, such
a condition would freeze every thread of a worker (and, at monitor_create, the web process) for as long, and
no time limit can interrupt native code. Here each evaluation runs in one child process per Vigil process:
past EVAL_SECONDS the child is killed and the check gets a clear error; a fresh child serves the next call.

The child is started on first use with `python -m engine.checks.cel_child` and speaks length-prefixed
pickles over its stdin and stdout. It is this process's own helper, fed only what the parent sends.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from engine.errors import ContentError

#: how long one evaluation may take
EVAL_SECONDS = 2.0
_HEADER = struct.Struct("!I")
_ROOT = Path(__file__).resolve().parents[2]
_CHILD_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "PYTHONHOME", "TMPDIR", "SYSTEMROOT")


class Runner:
    """One child at a time, shared by this process's threads; an evaluation that overruns is killed."""

    def __init__(self, seconds: float = EVAL_SECONDS) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._child: subprocess.Popen | None = None
        self._owner = 0  # the pid that started the child: a forked copy of this process starts its own

    def decide(self, expr: str, variables: dict, want: str = "bool") -> object:
        """The condition's value (want "bool"), or any expression's value as plain data (want "value"),
        evaluated in the child; ContentError when it fails or overruns."""
        with self._lock:
            try:
                kind, value = self._ask((expr, variables, want))
            except TimeoutError:
                self._stop()
                raise ContentError(f"the condition took longer than {self.seconds:g} s to evaluate and was "
                                   "stopped; simplify it (nested comprehensions or `in` over large lists are the "
                                   "usual cause)") from None
            except (OSError, EOFError, pickle.UnpicklingError):
                self._stop()
                raise ContentError("the condition could not be evaluated: it used more memory than a condition "
                                   "may, or crashed the evaluator") from None
        if kind == "error":
            raise ContentError(value)
        return value

    def close(self) -> None:
        """Stop this process's child and reap it (at shutdown: a child left behind lingers as a zombie)."""
        with self._lock:
            if self._owner == os.getpid():
                self._stop()
            self._child = None

    def _ask(self, request: tuple) -> tuple[str, object]:
        alive = self._child is not None and self._owner == os.getpid() and self._child.poll() is None
        child = self._child if alive else self._start()
        try:
            send(child.stdin, request)
        except BrokenPipeError:  # the child died after its last answer (killed from outside): a new one
            child = self._start()
            send(child.stdin, request)
        return receive(child.stdout, time.monotonic() + self.seconds)

    def _start(self) -> subprocess.Popen:
        if self._owner != os.getpid():
            self._child = None  # the process this one was forked from owns that child
        self._stop()
        self._owner = os.getpid()
        # only what Python needs to start: the settings (database URL, keys) are none of the child's business
        env = {name: os.environ[name] for name in _CHILD_ENV if name in os.environ}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")]))
        self._child = subprocess.Popen([sys.executable, "-m", "engine.checks.cel_child"], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, env=env, cwd=_ROOT)
        return self._child

    def _stop(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            child.kill()
            child.wait()
            for pipe in (child.stdin, child.stdout):
                pipe.close()


def send(pipe, message: object) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    pipe.write(_HEADER.pack(len(data)) + data)
    pipe.flush()


def receive(pipe, deadline: float | None = None) -> object:
    header = _read(pipe, _HEADER.size, deadline)
    return pickle.loads(_read(pipe, _HEADER.unpack(header)[0], deadline))


def _read(pipe, size: int, deadline: float | None) -> bytes:
    chunks, left = [], size
    while left:
        if deadline is not None:
            ready, _, _ = select.select([pipe], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError
        chunk = os.read(pipe.fileno(), left)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
