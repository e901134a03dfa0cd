"""A Settings form refused for a mistake shows the page again with what was typed still in it, so the owner fixes
one field instead of typing everything again; a secret typed (bearer token, API key) is never sent back (issue 30)."""

from __future__ import annotations

import re

from tests.integration.helpers import login

SECRET = "sk-do-not-echo-this-secret-1234"


def csrf_of(client, path: str) -> str:
    return re.search(r'name="_csrf" value="([^"]+)"', client.get(path).text).group(1)


def test_connections_form_keeps_name_and_url_on_an_error_but_not_the_token(client, owner):
    login(client)
    refused = client.post("/settings/connections", follow_redirects=False, data={
        "_csrf": csrf_of(client, "/settings/connections"), "name": "Tickets Server",
        "url": "https://mcp.example.com/mcp", "bearer_token": SECRET})
    assert refused.status_code == 400 and "name must be" in refused.text
    assert 'value="Tickets Server"' in refused.text and 'value="https://mcp.example.com/mcp"' in refused.text
    assert SECRET not in refused.text


def test_models_form_keeps_what_was_typed_on_an_error_but_not_the_api_key(client, owner):
    login(client)
    refused = client.post("/settings/models", follow_redirects=False, data={
        "_csrf": csrf_of(client, "/settings/models"), "name": "my-judge", "base_url": "not a url at all",
        "model": "gpt-4o-mini", "api_key": SECRET, "api_version": "2024-06-01"})
    assert refused.status_code == 400
    for typed in ("my-judge", "not a url at all", "gpt-4o-mini", "2024-06-01"):
        assert f'value="{typed}"' in refused.text, typed
    assert SECRET not in refused.text
