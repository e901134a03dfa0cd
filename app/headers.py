"""Headers every answer carries, so a page can't be framed, sniffed into another type, or made to run script
that Vigil did not serve from /static.

The policy allows only Vigil's own origin for script, style, fetches (htmx, SSE) and forms; no inline script or
style (pages use /static/vigil.js, and htmx is told not to inject its indicator style); no framing at all. Links
carry secrets in their paths (an approval or trigger token), so no Referer leaves a page.
"""

from __future__ import annotations

from litestar.types import Message, Scope

CONTENT_SECURITY_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                           "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
                           "object-src 'none'")
HEADERS = ((b"content-security-policy", CONTENT_SECURITY_POLICY.encode()), (b"x-frame-options", b"DENY"),
           (b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"))
_NAMES = {name for name, _ in HEADERS}


async def security_headers(message: Message, scope: Scope) -> None:
    """Litestar before_send hook: adds HEADERS to every HTTP answer that does not set them itself. A hook, not a
    middleware, so the answers Litestar's router makes itself (404 for an unknown path, 405) carry them too. Async
    on purpose: Litestar runs a plain function hook in its thread pool, for every message of every answer."""
    if message["type"] != "http.response.start":
        return
    headers = list(message.get("headers", ()))
    present = {bytes(name).lower() for name, _ in headers} & _NAMES
    message["headers"] = headers + [header for header in HEADERS if header[0] not in present]  # type: ignore[typeddict-item]
