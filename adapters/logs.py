"""Logging set-up shared by every entrypoint, with link tokens masked wherever they would be printed."""

import logging
import re

#: link tokens, runtime tokens and device tokens are secrets: access logs print paths, so they are masked
_TOKEN = re.compile(r"\b(trg|apr|vgl|vgd)_[A-Za-z0-9_-]{8,}")


class MaskTokens(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = mask(record.msg)
        if record.args:
            record.args = tuple(mask(arg) if isinstance(arg, str) else arg for arg in record.args)
        return True


def mask(text: str) -> str:
    return _TOKEN.sub(lambda m: f"{m.group(1)}_…", text)


def first_line(exc: Exception) -> str:
    """What an error says, without a driver's multi-line hints: for one-line outage warnings."""
    return (str(exc).strip().splitlines() or [""])[0]


def setup_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    mask_tokens()


def mask_tokens() -> None:
    """Attach the mask to the loggers that print request paths (call again after uvicorn sets up its own)."""
    for name in ("uvicorn.access", "uvicorn.error", "httpx"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, MaskTokens) for f in logger.filters):
            logger.addFilter(MaskTokens())
