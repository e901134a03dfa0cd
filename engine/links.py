"""Absolute links to this Vigil, and whether the internet can reach them."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

DEFAULT_BASE = "http://127.0.0.1:8000"


def public_base(public_api_base_url: str, api_url: str) -> str:
    """PUBLIC_API_BASE_URL, else API_URL, else the local default; without a trailing slash."""
    return (public_api_base_url or api_url or DEFAULT_BASE).rstrip("/")


def unreachable_reason(base_url: str) -> str | None:
    """Why outside services can't reach `base_url` (localhost, a private address, a bare host), or None."""
    host = (urlsplit(base_url).hostname or "").lower()
    if host in ("localhost", "") or host.endswith(".localhost") or host.endswith(".local"):
        return f"its host {host or '(none)'} is this machine"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None if "." in host else f"{host} is a bare container or machine name"
    return None if address.is_global else f"{host} is not a public address"


def app_base(public_app_url: str, serve_ui: bool, api_base: str) -> str:
    """Where the pages live: PUBLIC_APP_URL when the UI runs elsewhere, else this server's own address."""
    if public_app_url:
        return public_app_url.rstrip("/")
    return api_base if serve_ui else DEFAULT_BASE


def origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()
