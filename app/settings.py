"""Settings as the web app reads them."""

from engine.spec import Limits
from adapters.settings import Settings


def limits_from(settings: Settings) -> Limits:
    return Limits(default_interval=settings.MONITOR_DEFAULT_INTERVAL_SECONDS,
                  min_interval=settings.MONITOR_MIN_INTERVAL_SECONDS,
                  default_ttl=settings.MONITOR_DEFAULT_TTL_SECONDS,
                  max_ttl=settings.MONITOR_MAX_TTL_SECONDS,
                  max_wakes=settings.MONITOR_MAX_WAKES,
                  max_hits=settings.TRIGGER_MAX_HITS,
                  max_armed_per_conversation=settings.MONITOR_MAX_ARMED_PER_CONVERSATION,
                  max_armed_per_account=settings.MONITOR_MAX_ARMED_PER_ACCOUNT,
                  document_sweep=settings.DOCUMENT_SWEEP_SECONDS,
                  max_armed_tool_watches=settings.MONITOR_MAX_ARMED_TOOL_WATCHES_PER_ACCOUNT,
                  tool_min_interval=settings.TOOL_MIN_INTERVAL_SECONDS)
