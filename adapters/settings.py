"""Every setting, read from the environment once per entrypoint and passed down.

Each field is named like its environment variable; `docs/settings.md` lists them all.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, fields, replace
from pathlib import Path


class SettingsError(ValueError):
    """A setting has a value Vigil cannot use; the message names it."""


def _bool(name: str, raw: str) -> bool:
    low = raw.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise SettingsError(f"{name} must be true or false, not {raw!r}")


def _int(name: str, raw: str) -> int:
    try:
        return int(raw.strip().replace("_", ""))
    except ValueError:
        raise SettingsError(f"{name} must be a whole number, not {raw!r}") from None


def _float(name: str, raw: str) -> float:
    try:
        return float(raw.strip())
    except ValueError:
        raise SettingsError(f"{name} must be a number, not {raw!r}") from None


@dataclass(frozen=True)
class Settings:
    VIGIL_DATA_DIR: str = "./var"
    """Where the embedded SQLite file and the generated secret key live. Default ./var."""
    DATABASE_URL: str = ""
    """postgresql://… in production; default sqlite:///$VIGIL_DATA_DIR/vigil.db."""
    REDIS_URL: str = ""
    """redis://… in production (broker, events, rate limits); default empty: in-process."""
    SECRET_KEY: str = ""
    """Signs sessions and keys encryption. Default: generated once into $VIGIL_DATA_DIR/secret_key."""
    MONITORS_ENABLED: bool = True
    """Turns the monitor tool on. Default true."""
    MONITOR_DEFAULT_INTERVAL_SECONDS: int = 900
    """Check interval when monitor_create gives none. Default 900."""
    MONITOR_MIN_INTERVAL_SECONDS: int = 300
    """Shorter intervals are raised to this, with a note. Default 300."""
    MONITOR_DEFAULT_TTL_SECONDS: int = 7 * 86400
    """Lifetime when monitor_create gives no expires_in. Default 604800 (7 days)."""
    MONITOR_MAX_TTL_SECONDS: int = 30 * 86400
    """Longer lifetimes are capped to this, with a note. Default 2592000 (30 days)."""
    MONITOR_MAX_WAKES: int = 20
    """Highest max_wakes a monitor may ask for; more is capped with a note. Default 20."""
    MONITOR_MAX_ARMED_PER_CONVERSATION: int = 10
    """Monitors one conversation may have armed (not ended: active, paused or awaiting approval); seed 001's
    limit. Cancelling one frees its slot at once. Default 10."""
    MONITOR_MAX_ARMED_PER_ACCOUNT: int = 50
    """Monitors one account may have armed across its conversations (seed 001). Default 50."""
    FETCH_TIMEOUT_SECONDS: float = 30.0
    """Overall deadline of one fetch. Default 30."""
    FETCH_MAX_BYTES: int = 1024 * 1024
    """A fetched body is cut at this size. Default 1048576 (1 MiB)."""
    FETCH_MAX_TEXT_BYTES: int = 256 * 1024
    """Normalized text is cut at this size. Default 262144 (256 KiB)."""
    FETCH_ALLOW_LOOPBACK: bool = False
    """Allow sources on 127.0.0.0/8 and ::1 (tests, local dashboards). Default false."""
    OUTBOUND_PROXY: str = ""
    """An egress forward proxy every outbound request goes through (fetches, tool steps, judge models, wake pushes,
    MCP connections, the browser's requests): http://host:port or http://user:password@host:port; https is tunnelled
    with CONNECT. The SSRF guard still runs first. Default empty: requests go direct."""
    NO_PROXY: str = ""
    """Comma-separated hosts, domains (.example.com: it and its subdomains), addresses or CIDR blocks, each with an
    optional :port, reached directly even with OUTBOUND_PROXY; `*` for all. Default empty."""
    FETCH_SHARED_CACHE_BYTES: int = 8 * 1024 * 1024
    """Memory each worker process keeps the answers of recent fetches in, so monitors of the same url share one
    fetch per interval window; 0 turns sharing off. Default 8388608 (8 MiB)."""
    MONITOR_UNREACHABLE_GRACE_SECONDS: int = 6 * 3600
    """How long a source may stay unreachable (down, timing out, 5xx, 429) before the monitor pauses
    and tells the agent. Default 21600 (6 hours)."""
    SCHEDULE_AUTOPAUSE_FAILURES: int = 3
    """Other errors in a row (404, selector gone, a failed condition) that pause a monitor, and judge
    failures in a row after which a match wakes unchecked. Default 3."""
    MONITOR_MAX_WAKES_PER_HOUR: int = 10
    """A monitor that would wake its conversation more often than this in an hour is paused (seed 000; not a
    seed 002 stream, which its own flood guard bounds). Default 10."""
    MONITOR_MAX_FIRES_PER_CONVERSATION_DAY: int = 20
    """Seed 001: fires of its watches (document, time, tool; not notices) per conversation in any 24 hours. The
    watch whose fire would go past it ends in `error` and says so once; it does not resume the next day; other
    sources neither count nor end by it. Default 20."""
    MONITOR_MAX_ARMED_TOOL_WATCHES_PER_ACCOUNT: int = 10
    """Seed 001: armed tool watches (each a recurring poll) one account may have. Default 10."""
    TOOL_MIN_INTERVAL_SECONDS: int = 300
    """Seed 001: the shortest interval a tool watch polls at; shorter ones (intervalMinutes 0 included) are raised
    to it with a note, and jitter never polls sooner. From 1 to 86400. Default 300 (5 minutes)."""
    TOOL_SOURCES_ENABLED: bool = True
    """The owner's switch for tool sources: off, no tool watch is armed and every armed one pauses at its next
    poll, saying why. Default true."""
    DOCUMENT_MAX_BYTES: int = 1024 * 1024
    """The largest document PUT /api/documents stores, as canonical JSON; over it is 413. Default 1 MiB."""
    DOCUMENT_SWEEP_SECONDS: int = 300
    """How often a document watch reads its document again without a write: for conditions that read `now`, and
    in case a write's check message was lost. Default 300 (5 minutes)."""
    MONITOR_JUDGE_TOKEN_BUDGET: int = 200_000
    """Most judge tokens one monitor may spend; past it the monitor pauses. Default 200000."""
    JUDGE_BASE_URL: str = ""
    """OpenAI-compatible base URL of the catalog entry "default" (e.g. https://api.openai.com/v1). Default empty."""
    JUDGE_API_KEY: str = ""
    """API key of the "default" judge model. Default empty."""
    JUDGE_MODEL: str = ""
    """Upstream model name of the "default" judge model. Default empty."""
    JUDGE_API_VERSION: str = ""
    """Azure OpenAI api-version for the "default" judge model, if it is an Azure deployment URL. Default empty."""
    JUDGE_ALLOW_PRIVATE_URLS: bool = False
    """Let accounts' judge models (Settings → Models) be on loopback or private addresses (a local Ollama or
    vLLM). Default false."""
    ENCRYPTION_KEYS: str = ""
    """Comma-separated Fernet keys, newest first, for secrets at rest; empty derives one from SECRET_KEY."""
    FILE_SOURCE_ROOTS: str = ""
    """Comma-separated directories file sources may read under; empty turns file sources off."""
    PUBLIC_API_BASE_URL: str = ""
    """The address the internet reaches this Vigil's API at; trigger links are built on it. Default empty."""
    API_URL: str = ""
    """Fallback for PUBLIC_API_BASE_URL. Default empty: the address `vigil serve`/`vigil web` listen on."""
    PUBLIC_APP_URL: str = ""
    """Where the web UI runs when it is not this server (e.g. http://localhost:5173); approval links use it."""
    SERVE_UI: bool = True
    """This server serves the pages (approval pages included), so approval links use its own address. Default true."""
    WEB_LISTEN_ADDRESSES: str = ""
    """Comma-separated host:port pairs the web tier listens on ([::]:8000 for IPv6), which Vigil's own requests refuse
    as Vigil itself (0.0.0.0 or [::]: every address of this machine on that port); `vigil serve` and `vigil web` add
    their --host/--port. Set it for workers on the web's machine. Default empty."""
    TRIGGER_MAX_PAYLOAD_BYTES: int = 256 * 1024
    """Largest body a trigger link accepts; more is answered 413. Default 262144 (256 KiB)."""
    TRIGGER_RATE_PER_MINUTE: int = 60
    """Deliveries per minute one link accepts (moving window); unverified requests get 4 times this. Default 60."""
    TRIGGER_DEDUPE_WINDOW_SECONDS: int = 600
    """Without a delivery id, the same body counts once within this many seconds. Default 600."""
    TRIGGER_MAX_HITS: int = 10_000
    """Highest max_hits a trigger link may ask for (default 1000 hits); more is capped with a note. Default 10000."""
    DELIVERY_SWEEP_SECONDS: int = 30
    """A stored delivery still unprocessed after this long is queued again by the scheduler. Default 30."""
    MONITOR_EVENTS_KEPT: int = 200
    """Events kept per monitor for its page (changes, fires, errors, decisions; quiet checks are counted, not
    stored). Default 200."""
    WAKE_PUSH_LEASE_SECONDS: int = 60
    """A wake push being sent is held this long; one whose worker died is sent again after it (at least 20, above
    the 15 s push timeout). Default 60."""
    WAKE_PUSH_SWEEP_SECONDS: float = 2.0
    """How often the scheduler queues due wake pushes (retries, and pushes whose message was lost). Default 2."""
    WAKE_COALESCE_SECONDS: int = 0
    """Wakes of one conversation within this many seconds of its first are delivered as one message (0 to 3600; a
    conversation's context.coalesce_seconds overrides it). Default 0: off, each wake delivered at once."""
    SCHEDULER_TICK_SECONDS: float = 1.0
    """How often the scheduler looks for due monitors. Default 1."""
    SCHEDULER_BATCH_SIZE: int = 500
    """Most monitors claimed in one tick. Default 500."""
    SCHEDULER_MAX_SLEEP_SECONDS: float = 60.0
    """Longest the scheduler sleeps between passes when nothing is due sooner: it sleeps until its next due time
    and is woken early when something falls due sooner (a monitor created or resumed…); this bounds what a lost
    wake-up costs. From 1 to 3600. Default 60."""
    WORKER_THREADS: int = 4
    """Worker threads of the embedded (vigil serve) worker. Default 4."""
    WORKER_BEAT_SECONDS: float = 2.0
    """How often an idle production worker process refreshes its Redis heartbeat and looks at every queue's length
    (picking up a message whose wake notification was lost); between beats it sleeps until a message arrives.
    From 0.1 to 30. Default 2."""
    BROWSER_CDP_URL: str = ""
    """A browser service pages with render: browser are rendered in, over the Chrome DevTools Protocol: a Chromium
    started with --remote-debugging-port (http://host:9222) or a browserless-style ws:// endpoint. Renders run on
    the `browser` queue (`vigil worker --queues browser`). Default empty: a local Chromium in embedded mode only."""
    BROWSER_EXECUTABLE: str = ""
    """The Chromium launched (once per process, reused) when BROWSER_CDP_URL is empty. Default empty: in embedded
    mode `chromium` on PATH; in production none (set BROWSER_CDP_URL instead)."""
    BROWSER_PROXY_HOST: str = "127.0.0.1"
    """The address of this machine that the browser reaches Vigil's guarded browser proxy at (it listens there, on
    a free port): 127.0.0.1 for a browser on the same machine, this worker's private address for a browser service
    elsewhere. Only this machine and BROWSER_CDP_URL's host may use the proxy. Default 127.0.0.1."""
    BROWSER_CONCURRENCY: int = 2
    """Pages one process renders at once; more renders wait their turn. Default 2."""
    BROWSER_SCREENSHOT_MAX_BYTES: int = 200 * 1024
    """The largest JPEG kept of what a rendered page showed (on its baseline and each fire); a bigger one is taken
    again at lower quality, or not kept. Default 204800 (200 KiB)."""
    MONITOR_SCREENSHOTS_KEPT: int = 5
    """Screenshots kept per monitor (a rendered page's baseline and latest fires), older ones deleted; 0 keeps
    none. Default 5."""
    CREATE_CONCURRENCY: int = 8
    """Most first checks (baseline fetches of monitor_create) one web process runs at once; a call over it is
    told to try again in a few seconds. Default 8."""
    CREATE_CONCURRENCY_PER_ACCOUNT: int = 2
    """Most first checks one account runs at once in one web process. Default 2."""
    CREATE_FETCH_TIMEOUT_SECONDS: float = 10.0
    """Overall deadline of the first check that monitor_create takes. Default 10."""
    API_RATE_PER_MINUTE: int = 600
    """Calls per minute one runtime token (or one signed-in owner) may make to the tool endpoint and the REST
    API (moving window); more are answered 429 with Retry-After. Default 600."""
    API_MAX_BODY_BYTES: int = 1024 * 1024
    """Largest request body the web accepts outside trigger links; more is answered 413 before it is read.
    Default 1048576 (1 MiB)."""
    WEB_THREADS: int = 16
    """Threads of one web process for the tool endpoint, the REST API and the owner's pages. Default 16."""
    WEB_PUBLIC_THREADS: int = 8
    """Threads of one web process kept for the cheap public paths (trigger links, approval pages, login,
    event streams, health), which the others can't take. Default 8."""
    WEB_HEADER_TIMEOUT_SECONDS: float = 10.0
    """A client must send a request's headers within this long of connecting (or of its last answer) or the
    connection is closed, so a slowloris client can't hold it. Default 10."""
    DATABASE_MAX_CONNECTIONS: int = 32
    """PostgreSQL connections one process may open (its pool); keep it above WEB_THREADS + WEB_PUBLIC_THREADS.
    Default 32."""
    DEVICE_ONLINE_SECONDS: int = 60
    """A paired device counts as online while its runner polled within this long. Default 60."""
    DEVICE_OFFLINE_SECONDS: int = 90
    """A device whose runner has not polled for this long is offline: its polled commands are unreachable,
    and a second runner may take over its token. Default 90."""
    RUNNER_POLL_SECONDS: int = 25
    """Longest a runner's long-poll is held waiting for work (under common 30 s proxy idle timeouts). Default 25."""
    LOCAL_RUNNER: bool = False
    """vigil serve also runs a runner in-process, paired as device "local" of the first account. Default false."""
    SESSION_COOKIE_SECURE: bool = False
    """Send the session cookie over HTTPS only; turn on behind TLS. Default false."""
    SESSION_IDLE_SECONDS: int = 14 * 86400
    """A browser session not used for this long ends (sign in again). Default 1209600 (14 days)."""
    SESSION_MAX_SECONDS: int = 30 * 86400
    """A browser session ends this long after its sign-in, however busy. Default 2592000 (30 days)."""
    LOGIN_FAILURES_PER_ACCOUNT: int = 5
    """Wrong passwords for one email (an account or not) within LOGIN_FAILURE_WINDOW_SECONDS after which signing
    in with it is refused, the right password too: 429 with Retry-After. Default 5."""
    LOGIN_FAILURES_PER_ADDRESS: int = 20
    """Wrong passwords from one client address within LOGIN_FAILURE_WINDOW_SECONDS after which signing in from it
    is refused (429 with Retry-After). Default 20."""
    LOGIN_FAILURE_WINDOW_SECONDS: int = 900
    """The moving window login failures are counted in. Default 900 (15 minutes)."""
    SETUP_TRUST_LOOPBACK: bool = True
    """While there is no account, /setup lets a browser on this machine create it without the setup code (a
    request from 127.0.0.1 or ::1 that carries no proxy header). Default true."""
    METRICS_TOKEN: str = ""
    """When set, GET /metrics needs Authorization: Bearer <it>; empty leaves /metrics open. Default empty."""
    METRICS_DIR: str = ""
    """Where this machine's processes keep their metrics files (PROMETHEUS_MULTIPROC_DIR). Default
    $VIGIL_DATA_DIR/metrics."""
    LOG_LEVEL: str = "INFO"
    """Python logging level. Default INFO."""

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "Settings":
        env = dict(os.environ if env is None else env)
        values = {}
        for f in fields(cls):
            if f.name in env:
                values[f.name] = _parse(f.name, f.type, env[f.name])
        settings = cls(**values)
        return settings.with_defaults()

    def with_defaults(self) -> "Settings":
        """Fill the defaults that depend on other settings (database file, secret key)."""
        data_dir = Path(self.VIGIL_DATA_DIR)
        changes = {}
        if not self.DATABASE_URL:
            changes["DATABASE_URL"] = f"sqlite:///{(data_dir / 'vigil.db').resolve()}"
        if not self.SECRET_KEY:
            changes["SECRET_KEY"] = _stored_secret(data_dir)
        if self.MONITOR_MIN_INTERVAL_SECONDS < 1:
            raise SettingsError("MONITOR_MIN_INTERVAL_SECONDS must be at least 1")
        if not 1 <= self.TOOL_MIN_INTERVAL_SECONDS <= 86400:
            raise SettingsError("TOOL_MIN_INTERVAL_SECONDS must be from 1 to 86400 (a day, the longest tool interval)")
        self.listen_addresses  # noqa: B018 - a bad WEB_LISTEN_ADDRESSES fails here, at start-up
        self.egress  # noqa: B018 - and a bad OUTBOUND_PROXY or NO_PROXY
        for name in ("MONITOR_EVENTS_KEPT", "CREATE_CONCURRENCY", "CREATE_CONCURRENCY_PER_ACCOUNT", "API_RATE_PER_MINUTE",
                     "API_MAX_BODY_BYTES", "WEB_THREADS", "WEB_PUBLIC_THREADS", "DATABASE_MAX_CONNECTIONS"):
            if getattr(self, name) < 1:
                raise SettingsError(f"{name} must be at least 1")
        if self.BROWSER_CONCURRENCY < 1 or self.MONITOR_SCREENSHOTS_KEPT < 0 or self.BROWSER_SCREENSHOT_MAX_BYTES < 1024:
            raise SettingsError("BROWSER_CONCURRENCY must be at least 1, MONITOR_SCREENSHOTS_KEPT 0 or more, and "
                                "BROWSER_SCREENSHOT_MAX_BYTES at least 1024")
        if not 0.1 <= self.WORKER_BEAT_SECONDS <= 30:
            raise SettingsError("WORKER_BEAT_SECONDS must be from 0.1 to 30 (other workers count a process silent "
                                "for 60 s as dead)")
        if not 1 <= self.SCHEDULER_MAX_SLEEP_SECONDS <= 3600:
            raise SettingsError("SCHEDULER_MAX_SLEEP_SECONDS must be from 1 to 3600")
        if not 0 <= self.WAKE_COALESCE_SECONDS <= 3600:
            raise SettingsError("WAKE_COALESCE_SECONDS must be from 0 (off) to 3600")
        if self.FETCH_SHARED_CACHE_BYTES < 0:
            raise SettingsError("FETCH_SHARED_CACHE_BYTES must be 0 (sharing off) or more")
        if self.WAKE_PUSH_LEASE_SECONDS < 20:
            raise SettingsError("WAKE_PUSH_LEASE_SECONDS must be at least 20 (a push may take 15 s)")
        for name in ("SESSION_IDLE_SECONDS", "SESSION_MAX_SECONDS", "LOGIN_FAILURES_PER_ACCOUNT",
                     "LOGIN_FAILURES_PER_ADDRESS", "LOGIN_FAILURE_WINDOW_SECONDS"):
            if getattr(self, name) < 1:
                raise SettingsError(f"{name} must be at least 1")
        for name in ("CREATE_FETCH_TIMEOUT_SECONDS", "WEB_HEADER_TIMEOUT_SECONDS", "WAKE_PUSH_SWEEP_SECONDS"):
            if getattr(self, name) <= 0:
                raise SettingsError(f"{name} must be more than 0")
        return replace(self, **changes) if changes else self

    @property
    def file_roots(self) -> tuple[str, ...]:
        return tuple(os.path.realpath(root.strip()) for root in self.FILE_SOURCE_ROOTS.split(",") if root.strip())

    @property
    def listen_addresses(self) -> tuple[tuple[str, int], ...]:
        """WEB_LISTEN_ADDRESSES as (host, port) pairs, an IPv6 host without its brackets."""
        pairs = []
        for item in filter(None, (part.strip() for part in self.WEB_LISTEN_ADDRESSES.split(","))):
            host, _, port = item.rpartition(":")
            if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
                raise SettingsError(f"WEB_LISTEN_ADDRESSES must list host:port pairs such as 0.0.0.0:8000 or "
                                    f"[::]:8000, not {item!r}")
            pairs.append((host.strip("[]"), int(port)))
        return tuple(pairs)

    @property
    def egress(self):
        """OUTBOUND_PROXY and NO_PROXY as an engine.egress.Egress, or None when no proxy is set."""
        from engine.egress import Egress, ProxySettingError
        try:
            return Egress.of(self.OUTBOUND_PROXY, self.NO_PROXY)
        except ProxySettingError as exc:
            raise SettingsError(str(exc)) from None

    def listening_on(self, host: str, port: int) -> "Settings":
        """These settings with `host`:`port` added to WEB_LISTEN_ADDRESSES (what `vigil serve`/`vigil web` bind)."""
        pair = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return replace(self, WEB_LISTEN_ADDRESSES=",".join(filter(None, (self.WEB_LISTEN_ADDRESSES, pair))))

    def served_at(self, host: str, port: int) -> "Settings":
        """These settings with API_URL set to the address `vigil serve`/`vigil web` bind, unless PUBLIC_API_BASE_URL
        or API_URL already names one: the links Vigil hands out then point at the port actually served."""
        if self.PUBLIC_API_BASE_URL or self.API_URL:
            return self
        local = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
        return replace(self, API_URL=f"http://[{local}]:{port}" if ":" in local else f"http://{local}:{port}")

    @property
    def embedded(self) -> bool:
        """No Redis: broker, events and rate limits stay in this process."""
        return not self.REDIS_URL


def _parse(name: str, kind: str, raw: str):
    parser = {"bool": _bool, "int": _int, "float": _float}.get(kind)
    return parser(name, raw) if parser else raw


def _stored_secret(data_dir: Path) -> str:
    path = data_dir / "secret_key"
    if path.exists():
        return path.read_text().strip()
    data_dir.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(48)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(key)
    return key
