"""The child process of engine/checks/cel_runner.py: evaluates each condition it is sent, until its stdin closes.

    python -m engine.checks.cel_child
"""

from __future__ import annotations

import os
import sys

from engine.checks.cel import decide_here, value_here
from engine.checks.cel_runner import receive, send
from engine.errors import ContentError

#: the address-space cap: a condition that builds huge lists fails instead of exhausting the machine's memory
MEMORY_BYTES = 1024 * 1024 * 1024


def serve() -> None:
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    except (ImportError, ValueError, OSError):  # not every platform lets a process cap itself
        pass
    stdin, replies = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything else printed goes to stderr, never into the replies
    while True:
        try:
            expr, variables, want = receive(stdin)
        except EOFError:
            return
        try:
            reply = ("ok", decide_here(expr, variables) if want == "bool" else value_here(expr, variables))
        except ContentError as exc:
            reply = ("error", str(exc))
        except MemoryError:
            reply = ("error", "the condition could not be evaluated: it used more memory than a condition may")
        send(replies, reply)


if __name__ == "__main__":
    serve()
