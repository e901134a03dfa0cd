"""page: an HTML page reduced to its readable text; a CSS selector picks the part to watch.

With `render: "browser"` the page is rendered in Chromium first (issue 31), for pages that build their content
with JavaScript: the browser is a transport (adapters/browser.py, handed in as SourceIO.renderer), which answers
the selected elements' text as a person sees it, as a JSON list; from there it is hashed, normalized and checked as
the server's HTML would be.
"""

from __future__ import annotations

import json

import soupsieve

from engine.content import Content, cut_text, page_content, tidy
from engine.errors import ContentError, FetchError, SpecError
from engine.sources.base import SourceIO, SourcePolicy, SourceSpec, parse_url

FIELDS = frozenset({"type", "url", "selector", "render", "wait_for"})
#: what source.render takes: the browser; leaving it out reads the HTML the server sends
RENDERS = ("browser",)
#: the sentence a create gets where no browser is set up
NO_BROWSER = ("render: browser needs a browser, and this Vigil has none set up: its operator sets BROWSER_CDP_URL "
              "to a Chromium with --remote-debugging-port (or a browserless-style service) and runs `vigil worker "
              "--queues browser`, or, in embedded mode, installs Chromium (Debian's `chromium` on PATH, or "
              "BROWSER_EXECUTABLE). Without it, watch the page without render, or a JSON API the page reads.")


def parse(raw: dict, policy: SourcePolicy) -> SourceSpec:
    selector = _selector(raw, "selector", "'#price' or '.status'")
    render, wait_for = raw.get("render"), None
    if render is not None:
        if render not in RENDERS:
            raise SpecError(f"source.render must be \"browser\" (render the page in Chromium, for pages that build "
                            f"their content with JavaScript), or left out (got {render!r}).")
        if not policy.browser:
            raise SpecError(NO_BROWSER)
        wait_for = _selector(raw, "wait_for", "'#price' or '.loaded'")
        for name, value in (("selector", selector), ("wait_for", wait_for)):
            if value and ":-soup-" in value:
                raise SpecError(f"source.{name} uses a selector only Vigil's HTML reader knows ({value!r}); a "
                                "browser takes standard CSS selectors.")
    elif raw.get("wait_for") is not None:
        raise SpecError('source.wait_for works with render: "browser" only: add it, or take wait_for out.')
    return SourceSpec(type="page", url=parse_url("page", raw), selector=selector or None, render=render,
                      wait_for=wait_for or None)


def _selector(raw: dict, name: str, example: str) -> str | None:
    selector = raw.get(name)
    if selector is None:
        return None
    if not isinstance(selector, str) or not selector.strip() or len(selector) > 1000:
        raise SpecError(f"source.{name} must be a CSS selector such as {example}.")
    try:
        soupsieve.compile(selector)
    except Exception as exc:  # soupsieve raises its own SelectorSyntaxError and ValueError
        raise SpecError(f"source.{name} {selector!r} is not a valid CSS selector "
                        f"({str(exc).splitlines()[0]}).") from None
    return selector


def read(spec: SourceSpec, io: SourceIO) -> bytes:
    if spec.render is None:
        return io.fetcher.get(spec.url).body
    if io.renderer is None:
        raise FetchError("This Vigil process has no browser to render the page in (BROWSER_CDP_URL, or a local "
                         "Chromium); the check waits for one.", unreachable=True)
    return io.renderer.render(spec.url, spec.selector, spec.wait_for)


def normalize(spec: SourceSpec, body: bytes, max_text_bytes: int) -> Content:
    if spec.render is None:
        return page_content(body, spec.selector, max_text_bytes)
    return rendered_content(body, spec.selector, max_text_bytes)


def rendered_content(body: bytes, selector: str | None, max_text_bytes: int) -> Content:
    """A rendered page's text parts (a JSON list of strings) as one text, tidied as a server page's is."""
    try:
        parts = json.loads(body)
    except ValueError:
        raise ContentError("the browser's reading of the page could not be read back") from None
    if not isinstance(parts, list) or not all(isinstance(part, str) for part in parts):
        raise ContentError("the browser's reading of the page could not be read back")
    if not parts:
        raise ContentError(f"the selector '{selector}' matches nothing on the rendered page")
    return Content(text=cut_text(tidy("\n\n".join(tidy(part) for part in parts)), max_text_bytes))
