"""503 for a request that met the database or Redis down (a restart, a failover, every connection busy).

Nothing is wrong with the request, so the caller is told to send it again shortly; a sender's repeat of a
delivery that was in fact stored is recognised by its id (or body) and not counted twice.
"""

from __future__ import annotations

import logging

from litestar import Request, Response

from tasks.broker import UNAVAILABLE
from adapters.logs import first_line, mask

log = logging.getLogger(__name__)

#: seconds a caller is asked to wait before trying again
RETRY_AFTER = 5
BODY = {"detail": "Vigil is briefly unavailable: its database or queue did not answer (a restart, say). "
                  f"Send the same request again in {RETRY_AFTER} seconds."}


def unavailable(request: Request, exc: Exception) -> Response:
    log.warning("%s %s answered 503: %s: %s", request.method, mask(request.url.path), type(exc).__name__,
                first_line(exc))
    return Response(BODY, status_code=503, headers={"Retry-After": str(RETRY_AFTER), "Cache-Control": "no-store"})


#: for Litestar(exception_handlers=…)
HANDLERS = {kind: unavailable for kind in UNAVAILABLE}
