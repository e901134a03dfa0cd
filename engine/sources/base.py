"""What every source shares: its spec, what reading may touch, and URL checking."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from engine.addresses import check_url
from engine.errors import BlockedURL, FetchError, SpecError
from engine.http import Fetcher, Response, Validators


@dataclass(frozen=True)
class SourceSpec:
    """A source as stored; each kind reads the fields it owns and leaves the rest None."""
    type: str
    url: str | None = None
    selector: str | None = None
    items_path: str | None = None
    key_path: str | None = None
    path: str | None = None
    metric: str | None = None
    labels: dict | None = None
    signature: str | None = None
    max_hits: int | None = None
    #: a webhook's expected deliveries, as given (engine/expect.py): silence past its deadline wakes
    expect: dict | None = None
    question: str | None = None
    details: str | None = None
    options: tuple[str, ...] | None = None
    allow_comment: bool | None = None
    device: str | None = None
    command: str | None = None
    cwd: str | None = None
    timeout: int | None = None
    mode: str | None = None
    #: a command source's device, resolved from `device` when the monitor is created (not an argument)
    device_id: int | None = None
    fire_at: str | None = None
    delay: int | None = None
    #: a document (or ingest) watch's document, as the platform stores it through /api/documents
    item_type: str | None = None
    item_id: str | None = None
    #: a tool watch's tool (on agent_id, default the calling agent), its arguments, and what create resolved:
    #: the registry entry and the fingerprint of its executable surface
    tool: str | None = None
    arguments: dict | None = None
    agent_id: str | None = None
    connection: str | None = None
    tool_id: int | None = None
    tool_fingerprint: str | None = None
    #: a page read as a person sees it: "browser" renders it in Chromium (issue 31); None reads the server's HTML
    render: str | None = None
    #: with render "browser", a CSS selector the rendered page must show before it is read
    wait_for: str | None = None


@dataclass(frozen=True)
class SourcePolicy:
    """What an operator allows sources to read, beyond the public web."""
    file_roots: tuple[str, ...] = ()
    #: whether this instance can render pages in a browser (BROWSER_CDP_URL, or a local Chromium)
    browser: bool = False


class Renderer(Protocol):
    """One check's browser page (adapters/browser.RenderSession): what a page source with render "browser"
    reads through, as others read through the fetcher."""

    def render(self, url: str, selector: str | None, wait_for: str | None) -> bytes:
        """The rendered page's text as a JSON list, one string per outermost match of `selector` (the body
        without one); raises FetchError when the page can't be read."""


@dataclass
class SourceIO:
    """The ways a source may read: the guarded fetcher, the allowed file roots, a browser page."""
    fetcher: Fetcher
    policy: SourcePolicy = field(default_factory=SourcePolicy)
    #: a browser page for a source rendered in one; None where none was set up for this read
    renderer: Renderer | None = None


@dataclass(frozen=True)
class Fetched:
    """A body as a check read it; through HTTP, also what the server said of it."""
    body: bytes
    #: the answer's validators, to ask with next time; None when the source has none to keep
    validators: Validators | None = None
    #: a 304: the body is the one the validators sent were taken from, and none was read
    not_modified: bool = False


class ConditionalFetcher:
    """One check's view of the fetcher: its GET asks with the monitor's validators and keeps the answer, so
    a source reads as it always does and the check still learns whether it was a 304."""

    def __init__(self, fetcher: Fetcher, validators: Validators | None):
        self._fetcher, self._validators = fetcher, validators
        self.answer: Response | None = None

    @property
    def policy(self):
        return self._fetcher.policy

    def get(self, url: str, headers: dict[str, str] | None = None) -> Response:
        self.answer = self._fetcher.get(url, headers, validators=self._validators)
        return self.answer


def parse_url(kind: str, raw: dict) -> str:
    url = raw.get("url")
    if not isinstance(url, str) or not url.strip():
        raise SpecError(f"source.url is required for a {kind} source: the http(s) address to watch.")
    try:
        check_url(url.strip())
    except BlockedURL as exc:
        raise SpecError(f"source.url can't be watched: {exc.message}") from None
    return url.strip()


def fetch_whole(io: SourceIO, url: str, what: str) -> bytes:
    """The body of a document that can only be read whole (JSON, metrics): one cut at the size limit is
    a clear error, not a parse error somewhere in the middle (a page is read up to the limit instead)."""
    response = io.fetcher.get(url)
    if response.truncated:
        limit = io.fetcher.policy.max_bytes
        raise FetchError(f"The response is larger than {limit:,} bytes, the most Vigil reads (FETCH_MAX_BYTES), "
                         f"and {what} cut short can't be read.")
    return response.body
