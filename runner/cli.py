"""`vigil runner`: pair this machine with a Vigil server, then run the commands it assigns (docs/runner.md)."""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
import threading
from typing import Optional

from runner import __version__
from runner.agent import NotPaired, Runner
from runner.client import AnotherRunner, Client, Refused, Unpaired, Unreachable
from runner.state import Device, State, StateError

#: exit statuses
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNPAIRED, EXIT_ANOTHER_RUNNER = 0, 1, 2, 3, 4

UNPAIRED_TEXT = "this device was unpaired from Vigil; pair it again with `vigil runner pair`"


def main(argv: Optional[list] = None) -> int:
    """Run `vigil runner [pair] ...`; the exit status."""
    args = _parser().parse_args(argv)
    if args.command == "pair":
        return _pair(args)
    return _run(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vigil runner", description="Run the commands a Vigil server assigns to this paired device. "
        "Without a command: run in the foreground until stopped.")
    parser.add_argument("--state-dir", help="where the token, spool and output live "
                        "(default $XDG_STATE_HOME/vigil-runner, else ~/.local/state/vigil-runner)")
    parser.add_argument("--version", action="version", version=f"vigil-runner {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    pair = commands.add_parser("pair", help="trade a one-time pairing code for this device's token")
    pair.add_argument("--server", required=True, help="the Vigil server's URL, e.g. https://vigil.example.com")
    pair.add_argument("--code", required=True, help="the pairing code from Settings → Devices")
    pair.add_argument("--name", help="the device's name in Vigil (default: the server's choice)")
    pair.add_argument("--state-dir", default=argparse.SUPPRESS, help="as above")
    run = commands.add_parser("run", help="run in the foreground until stopped (the default)")
    run.add_argument("--state-dir", default=argparse.SUPPRESS, help="as above")
    return parser


def _pair(args) -> int:
    if not args.server.startswith(("https://", "http://")):
        print(f"vigil runner: --server must be an http(s) URL (got {args.server!r})", file=sys.stderr)
        return EXIT_USAGE
    state = State(args.state_dir)
    try:
        device = _trade_code(state, args.server.rstrip("/"), args.code.strip(), args.name)
    except Refused as exc:
        print(f"vigil runner: pairing refused: {exc.detail}", file=sys.stderr)
        return EXIT_USAGE
    except (Unreachable, Unpaired) as exc:
        print(f"vigil runner: pairing failed: {exc.detail}", file=sys.stderr)
        return EXIT_FAILED
    except StateError as exc:
        print(f"vigil runner: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"Paired as device {device.name!r}. The token is stored in {state.device_file}.")
    print("Start it with `vigil runner` (or `python3 vigil-runner.pyz`).")
    return EXIT_OK


def _trade_code(state: State, server: str, code: str, name: Optional[str]) -> Device:
    """Trade the code for a token and keep it in device.json, holding the state directory's lock meanwhile."""
    state.lock()
    try:
        answer = Client(server).pair(code, name, socket.gethostname())
        try:
            device = Device(server=server, token=str(answer["token"]), device_id=str(answer["device_id"]),
                            name=str(answer["name"]))
        except KeyError as exc:
            raise Unreachable(f"the answer has no {exc}; is {server} a Vigil server?") from None
        state.save_device(device)
        return device
    finally:
        state.unlock()


def _run(args) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s vigil-runner: %(message)s")
    stop = threading.Event()
    _stop_on_signals(stop)
    try:
        Runner(args.state_dir).run(stop)
    except Unpaired:
        print(f"vigil runner: {UNPAIRED_TEXT}", file=sys.stderr)
        return EXIT_UNPAIRED
    except AnotherRunner as exc:
        print(f"vigil runner: {exc.detail}", file=sys.stderr)
        return EXIT_ANOTHER_RUNNER
    except NotPaired as exc:
        print(f"vigil runner: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except StateError as exc:
        print(f"vigil runner: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _stop_on_signals(stop: threading.Event) -> None:
    """SIGTERM and SIGINT stop the runner cleanly; a second SIGINT ends it at once."""
    if threading.current_thread() is not threading.main_thread():
        return

    def handle(signum, frame):
        stop.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
