"""Per-link rate limits (a moving window): on Redis in production, in memory when embedded.

If Redis is unreachable the limit is skipped rather than the request failed: max_hits and the payload cap
still apply.
"""

from __future__ import annotations

import logging
import math
import time

from limits import RateLimitItemPerMinute, RateLimitItemPerSecond
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

    def blocked_for(self, scope: str, key: str, amount: int, seconds: int) -> int:
        """0 while `key` has had fewer than `amount` hits in the last `seconds` (this counts nothing); otherwise
        whole seconds until the oldest of them leaves the window (at least 1), for a Retry-After header."""
        item = RateLimitItemPerSecond(amount, seconds)
        try:
            if self._limiter.test(item, scope, key):
                return 0
            reset = self._limiter.get_window_stats(item, scope, key).reset_time
        except StorageError as exc:
            log.warning("rate limit skipped, its storage is unreachable: %s", exc)
            return 0
        return max(1, math.ceil(reset - time.time()))

    def count(self, scope: str, key: str, amount: int, seconds: int) -> None:
        """Count one hit of `key` toward `amount` in `seconds` (see blocked_for)."""
        try:
            self._limiter.hit(RateLimitItemPerSecond(amount, seconds), scope, key)
        except StorageError as exc:
            log.warning("rate limit skipped, its storage is unreachable: %s", exc)
