"""The memory benchmark's web baseline: a bare Litestar app under uvicorn, nothing of Vigil imported.

    python -m bench.bare_web --port P

The same uvicorn settings as `vigil web`; GET /healthz and GET /api/items (a small JSON list).
"""

from __future__ import annotations

import argparse

import uvicorn
from litestar import Litestar, get


@get("/healthz", sync_to_thread=False)
def healthz() -> dict:
    return {"ok": True}


@get("/api/items", sync_to_thread=False)
def items() -> dict:
    return {"items": [{"id": i, "name": f"item {i}", "status": "active"} for i in range(50)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    config = uvicorn.Config(Litestar(route_handlers=[healthz, items]), host="127.0.0.1", port=args.port,
                            timeout_graceful_shutdown=2, log_level="warning", proxy_headers=False)
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
