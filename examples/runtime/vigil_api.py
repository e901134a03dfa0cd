"""The reference runtime's calls to Vigil: the tool's schema, its wake endpoint, and monitor tool calls."""

from __future__ import annotations

import json
import time

import requests

from runtime_config import Config, log
from runtime_store import write_private


def with_retries(what: str, call, attempts: int = 8):
    """Start-up calls wait for Vigil for a while (it may be starting too)."""
    for attempt in range(attempts):
        try:
            return call()
        except (requests.ConnectionError, requests.Timeout) as exc:
            if attempt == attempts - 1:
                raise SystemExit(f"runtime: {what} failed: {exc.__class__.__name__}")
            log("vigil.unreachable", step=what, retry_in=f"{min(2 ** attempt, 10)}s")
            time.sleep(min(2 ** attempt, 10))


def fetch_tool_schema(config: Config) -> dict:
    response = with_retries("fetching the tool schema", lambda: requests.get(
        f"{config.vigil}/api/tool/schema", params={"format": "openai"}, timeout=10))
    response.raise_for_status()
    schema = response.json()
    if schema.get("type") != "function" or "name" not in schema.get("function", {}):
        raise SystemExit("runtime: Vigil's /api/tool/schema?format=openai is not an OpenAI function tool")
    log("tool.schema", name=schema["function"]["name"])
    return schema


def ensure_wake_endpoint(config: Config) -> dict:
    """The registered endpoint {id, url, secret}: the stored one while Vigil still lists it, else a new one."""
    path = config.state / "endpoint.json"
    stored = json.loads(path.read_text()) if path.exists() else None
    if stored is not None:
        response = with_retries("listing wake endpoints", lambda: requests.get(
            f"{config.vigil}/api/wake-endpoints", headers=config.vigil_auth, timeout=10))
        response.raise_for_status()
        listed = {e["id"]: e for e in response.json().get("endpoints", [])}
        current = listed.get(stored["id"])
        if current is not None and current.get("url") == config.webhook_url:
            if current.get("enabled", True):
                log("endpoint.reused", id=stored["id"], url=config.webhook_url)
                return stored
            # Vigil disabled it (a 410, or days of failures): this runtime is back, so turn it on again
            enabled = requests.post(f"{config.vigil}/api/wake-endpoints/{stored['id']}/enable",
                                    headers=config.vigil_auth, timeout=10)
            if enabled.status_code == 200:
                log("endpoint.enabled", id=stored["id"], was=current.get("disabled_reason") or "disabled")
                return stored
        if current is not None:  # ours, but for another URL (or it would not enable): replace it
            requests.delete(f"{config.vigil}/api/wake-endpoints/{stored['id']}", headers=config.vigil_auth,
                            timeout=10)
        log("endpoint.gone", id=stored["id"], reason="replaced" if current else "not listed")
    response = with_retries("registering the wake endpoint", lambda: requests.post(
        f"{config.vigil}/api/wake-endpoints", headers=config.vigil_auth, timeout=10,
        json={"url": config.webhook_url, "description": "reference runtime"}))
    if response.status_code != 201:
        raise SystemExit(f"runtime: registering the wake endpoint answered {response.status_code}: "
                         f"{response.text[:300]}")
    body = response.json()
    endpoint = {"id": body["id"], "url": body["url"], "secret": body["secret"]}
    write_private(path, endpoint)
    log("endpoint.registered", id=endpoint["id"], url=endpoint["url"])
    return endpoint


def call_vigil(config: Config, arguments: str, context: dict) -> dict:
    """One monitor tool call; what Vigil answered ({"ok": …}), or an error the model can read."""
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return {"ok": False, "error": "The tool arguments were not valid JSON."}
    if not isinstance(args, dict) or not isinstance(args.get("action"), str):
        return {"ok": False, "error": "Call monitor with {\"action\": …, \"arguments\": {…}}."}
    body = {"action": args["action"], "arguments": args.get("arguments") or {}, "context": context}
    try:
        response = requests.post(f"{config.vigil}/api/tool/monitor", headers=config.vigil_auth, json=body,
                                 timeout=60)
    except requests.RequestException as exc:
        return {"ok": False, "error": f"Vigil could not be reached ({exc.__class__.__name__}); try again later."}
    try:
        answer = response.json()
    except ValueError:
        answer = None
    if response.status_code == 200 and isinstance(answer, dict) and "ok" in answer:
        return answer
    detail = answer.get("detail") if isinstance(answer, dict) else None
    return {"ok": False, "error": f"Vigil answered HTTP {response.status_code}: {detail or response.text[:300]}"}
