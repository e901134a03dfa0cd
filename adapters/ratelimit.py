"""Per-link rate limits (a moving window): on Redis in production, in memory when embedded.

If Redis is unreachable the limit is skipped rather than the request failed: max_hits and the payload cap
still apply.
"""

from __future__ import annotations

import logging
import math
import time

from limits import RateLimitItemPerMinute
from limits.errors import StorageError
from limits.storage import MemoryStorage, storage_from_string
from limits.strategies import MovingWindowRateLimiter

log = logging.getLogger(__name__)


class LinkLimiter:
    def __init__(self, redis_url: str) -> None:
        storage = storage_from_string(redis_url, wrap_exceptions=True) if redis_url else MemoryStorage()
        self._limiter = MovingWindowRateLimiter(storage)

    def allow(self, scope: str, key: str, per_minute: int) -> bool:
        """Count one hit; False once `key` is over `per_minute` in the last minute."""
        try:
            return self._limiter.hit(RateLimitItemPerMinute(per_minute), scope, key)
        except StorageError as exc:
            log.warning("rate limit skipped, its storage is unreachable: %s", exc)
            return True

    def retry_after(self, scope: str, key: str, per_minute: int) -> int:
        """Whole seconds until `key` may be counted again (at least 1), for a Retry-After header."""
        try:
            reset = self._limiter.get_window_stats(RateLimitItemPerMinute(per_minute), scope, key).reset_time
        except StorageError:
            return 1
        return max(1, math.ceil(reset - time.time()))
