"""A browser that opens a page that is not there, or not its own, gets an HTML page saying so; the API keeps
answering JSON whatever it is sent with (issue 30)."""

from __future__ import annotations

from tests.integration.helpers import login

BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


def assert_error_page(response, status: int, words: str) -> None:
    assert response.status_code == status
    assert response.headers["content-type"].startswith("text/html")
    assert "<h1>" in response.text and words in response.text and '"status_code"' not in response.text


def test_error_pages_are_html_for_a_browser_on_page_routes(client, owner):
    login(client)
    assert_error_page(client.get("/monitors/doesnotexist", headers=BROWSER), 404, "Not found")
    assert_error_page(client.get("/conversations/999", headers=BROWSER), 404, "Not found")
    assert_error_page(client.get("/setup", headers=BROWSER), 404, "Not found")
    assert_error_page(client.get("/no/such/page", headers=BROWSER), 404, "Not found")


def test_error_pages_stay_json_for_the_api_and_other_clients(client, owner):
    login(client)
    for path, headers in (("/monitors/doesnotexist", {"Accept": "application/json"}),
                          ("/conversations/999", {}),
                          ("/api/monitors/doesnotexist", BROWSER),
                          ("/monitors/doesnotexist", {**BROWSER, "HX-Request": "true"})):
        response = client.get(path, headers=headers)
        assert response.status_code == 404, path
        assert response.headers["content-type"].startswith("application/json"), path
        assert response.json()["status_code"] == 404
