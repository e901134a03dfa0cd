"""The `vigil` command: serve (all-in-one), web, worker, scheduler, migrate, user, token, runner, watch."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from adapters.settings import Settings, SettingsError


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["runner"]:  # the device side: no server settings, standard library only
        from runner.cli import main as runner_main

        return runner_main(argv[1:])
    if argv[:1] == ["watch"]:  # on the agent's machine: a client of the server, no server settings
        from vigil.watch import main as watch_main

        return watch_main(argv[1:])
    args = _parser().parse_args(argv)
    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"vigil: {exc}", file=sys.stderr)
        return 2
    from adapters.logs import setup_logging

    setup_logging(settings.LOG_LEVEL)
    if args.run in (_serve, _web, _worker, _scheduler):  # before anything imports prometheus_client
        from adapters.metrics_dir import prepare

        prepare(settings)
    return args.run(settings, args) or 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vigil", description="Lets AI agents wait for things.")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    for name, run, text in (("serve", _serve, "web, worker and scheduler in one process (embedded defaults)"),
                            ("web", _web, "the web tier only")):
        command = commands.add_parser(name, help=text)
        command.add_argument("--host", default="127.0.0.1")
        command.add_argument("--port", type=int, default=8000)
        command.set_defaults(run=run)
        if name == "serve":
            command.add_argument("--local-runner", action="store_true",
                                 help="also run a runner in this process: device 'local' of the first account")
    worker = commands.add_parser("worker", help="Dramatiq worker processes")
    worker.add_argument("--processes", type=int, default=2)
    worker.add_argument("--threads", type=int, default=8)
    worker.add_argument("--queues", nargs="+", metavar="QUEUE", default=None,
                        help="the queues to take (default: all but browser); `--queues browser` for the worker "
                             "that renders pages in the browser at BROWSER_CDP_URL")
    worker.set_defaults(run=_worker)
    commands.add_parser("scheduler", help="the loop that enqueues due checks").set_defaults(run=_scheduler)
    commands.add_parser("migrate", help="create or update the schema").set_defaults(run=_migrate)
    commands.add_parser("watch", help="print one line per wake, for coding agents (see docs/agents.md)",
                        add_help=False)
    commands.add_parser("runner", help="on a paired device: `vigil runner pair …`, then `vigil runner` (see "
                        "docs/runner.md)", add_help=False)
    user = commands.add_parser("user", help="owner accounts").add_subparsers(required=True, metavar="ACTION")
    create = user.add_parser("create", help="create an owner account")
    create.add_argument("email")
    create.add_argument("--password", required=True)
    create.set_defaults(run=_user_create)
    password = user.add_parser("password", help="set an owner's password (a forgotten one too); every browser "
                               "session of the account ends")
    password.add_argument("email")
    password.add_argument("--password", required=True)
    password.set_defaults(run=_user_password)
    token = commands.add_parser("token", help="runtime tokens").add_subparsers(required=True, metavar="ACTION")
    create = token.add_parser("create", help="create a runtime token; printed once, stored hashed")
    create.add_argument("--user", required=True, dest="email")
    create.add_argument("--label", default="")
    create.set_defaults(run=_token_create)
    device = commands.add_parser("device", help="paired devices").add_subparsers(required=True, metavar="ACTION")
    code = device.add_parser("pair-code", help="a one-time code (10 minutes) for `vigil runner pair`")
    code.add_argument("--user", required=True, dest="email")
    code.add_argument("--name", default="")
    code.set_defaults(run=_pair_code)
    return parser


def _database(settings: Settings, migrate: bool = False):
    from models import connection
    from models.db import bind
    from models.migrate import migrate as apply, pending

    bind(settings.DATABASE_URL, settings.DATABASE_MAX_CONNECTIONS)
    _wait_for_database()
    with connection():
        if migrate:
            return apply()
        missing = pending()
    if missing:
        sys.exit(f"vigil: the database needs migrating ({', '.join(missing)}); run `vigil migrate` first")
    return []


#: how long a command waits for a database that is not up yet (starting with it, or restarting)
DATABASE_WAIT_SECONDS = 60


def _wait_for_database() -> None:
    """Wait, saying so, while the database refuses connections; a process started alongside it (or during its
    restart) then runs instead of exiting. Gives up with the driver's error after DATABASE_WAIT_SECONDS."""
    import logging
    import time

    from models import connection
    from models.db import UNAVAILABLE
    from adapters.logs import first_line

    deadline = time.monotonic() + DATABASE_WAIT_SECONDS
    while True:
        try:
            with connection():
                return
        except UNAVAILABLE as exc:
            if time.monotonic() >= deadline:
                raise
            logging.getLogger("vigil").warning("waiting for the database: %s", first_line(exc))
            time.sleep(1)


def _embedded_db(settings: Settings) -> bool:
    """The SQLite file is Vigil's own, so any command may create its schema."""
    return settings.DATABASE_URL.startswith("sqlite:")


def _migrate(settings: Settings, args) -> int:
    applied = _database(settings, migrate=True)
    print(f"applied {', '.join(applied)}" if applied else "the schema is up to date")
    return 0


def _user_create(settings: Settings, args) -> int:
    from models.accounts import create_user

    user = _account_command(settings, create_user, args.email, args.password)
    if user is None:
        return 1
    print(f"created {user.email}")
    return 0


def _user_password(settings: Settings, args) -> int:
    from models.accounts import AccountError, change_password, find_user

    def change(email: str, password: str):
        user = find_user(email)
        if user is None:
            raise AccountError(f"no user with email {email}; create one with `vigil user create`")
        return user, change_password(user, password)

    changed = _account_command(settings, change, args.email, args.password)
    if changed is None:
        return 1
    user, ended = changed
    print(f"changed the password of {user.email}; {ended} browser session{'' if ended == 1 else 's'} signed out")
    return 0


def _token_create(settings: Settings, args) -> int:
    from adapters.events import make_bus
    from adapters.serve_file import served_bus
    from models.accounts import AccountError, find_user, issue_token
    from tasks.events import publish_token

    def make(email: str, label: str) -> str:
        user = find_user(email)
        if user is None:
            raise AccountError(f"no user with email {email}; create one with `vigil user create`")
        row, token = issue_token(user, label)
        # the owner's open Settings → Tokens pages list it: through Redis, or handed to a running `vigil serve`
        bus = (make_bus(settings.REDIS_URL, settings.DATABASE_URL) if settings.REDIS_URL
               else served_bus(settings.VIGIL_DATA_DIR))
        if bus is not None:
            publish_token(row, bus)
        return token

    token = _account_command(settings, make, args.email, args.label)
    if token is None:
        return 1
    print("Runtime token (shown once; send it as Authorization: Bearer <token>):")
    print(token)
    return 0


def _pair_code(settings: Settings, args) -> int:
    from models import utcnow
    from models.accounts import AccountError, find_user
    from models.devices import create_pairing_code

    def make(email: str, name: str) -> str:
        user = find_user(email)
        if user is None:
            raise AccountError(f"no user with email {email}; create one with `vigil user create`")
        return create_pairing_code(user, name, utcnow())

    code = _account_command(settings, make, args.email, args.name)
    if code is None:
        return 1
    print("On the device, within 10 minutes (the code works once):")
    print(f"  vigil runner pair --server <this Vigil's address> --code {code}")
    print(code)
    return 0


def _account_command(settings: Settings, operation, *args):
    """Run an account operation in its own connection; None (and a message) when it is refused."""
    from models import connection
    from models.accounts import AccountError

    _database(settings, migrate=_embedded_db(settings))
    with connection():
        try:
            return operation(*args)
        except AccountError as exc:
            print(f"vigil: {exc}", file=sys.stderr)
            return None


def _serve(settings: Settings, args) -> int:
    from dataclasses import replace

    from vigil.embedded import serve

    if args.local_runner:
        settings = replace(settings, LOCAL_RUNNER=True)
    settings = settings.listening_on(args.host, args.port)  # so its own requests refuse this address
    settings = settings.served_at(args.host, args.port)  # links name the port actually served
    _database(settings, migrate=True)
    return serve(settings, args.host, args.port)


def _web(settings: Settings, args) -> int:
    from vigil.embedded import run_web
    from tasks.broker import setup_broker

    settings = settings.listening_on(args.host, args.port)  # so its own requests refuse this address
    settings = settings.served_at(args.host, args.port)  # links name the port actually served
    _database(settings)
    setup_broker(settings)
    return run_web(settings, args.host, args.port)


def _worker(settings: Settings, args) -> int:
    # Its processes build IdleWorkers (tasks/main.py): woken by each enqueue, not polling (tasks/wakes.py).
    from tasks.queues import ORDINARY_QUEUES

    queues = args.queues or list(ORDINARY_QUEUES)  # renders only where asked for: they need a browser
    os.execvp(sys.executable, [sys.executable, "-m", "dramatiq", "tasks.main", "--processes",
                               str(args.processes), "--threads", str(args.threads), "--queues", *queues])


def _scheduler(settings: Settings, args) -> int:
    stop = _stop_on_signals()  # before the imports and set-up: a stop during start-up is a clean exit too
    from vigil.embedded import run_scheduler_forever
    from tasks.broker import setup_broker

    _database(settings)
    setup_broker(settings)
    return run_scheduler_forever(settings, stop)


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


if __name__ == "__main__":
    sys.exit(main())
