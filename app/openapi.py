"""What the API's answers look like, for the OpenAPI document only: the handlers build plain dicts.

Each handler lists the statuses it really answers, so a client (or a schema fuzzer) can tell a refusal it
must fix from a server fault. The shapes are TypedDicts: documentation, never validation of what we send.
"""

from typing import Any  # no `from __future__ import annotations`: TypedDict must see NotRequired itself

from dataclasses import dataclass

from litestar.enums import MediaType
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import OpenAPIMediaType, OpenAPIType, Operation, Schema
from typing_extensions import NotRequired, TypedDict


class ErrorBody(TypedDict):
    """Every refusal: `detail` says what to fix. Litestar's own errors add status_code (and extra)."""
    detail: str
    status_code: NotRequired[int]
    extra: NotRequired[Any]


class ToolReply(TypedDict):
    """The monitor tool's answer: ok with the action's result, or not ok with one sentence for the model."""
    ok: bool
    result: NotRequired[dict[str, Any]]
    error: NotRequired[str]


class MonitorList(TypedDict):
    monitors: list[dict[str, Any]]


class MessagePage(TypedDict):
    messages: list[dict[str, Any]]
    next_cursor: str


class Accepted(TypedDict):
    accepted: bool


class Secret(TypedDict):
    secret: str


class ApprovalState(TypedDict):
    question: str
    details: str
    options: list[str]
    allow_comment: bool
    expires_at: str | None
    state: str
    decision: str | None
    comment: str | None


def _string(**extra: Any) -> Schema:
    return Schema(type=OpenAPIType.STRING, **extra)


def _optional_string() -> Schema:
    return Schema(type=[OpenAPIType.STRING, OpenAPIType.NULL])


#: The tool call's envelope; the handler checks it itself (in words for the model), so this only documents it.
#: Each action's arguments are described in tool_schema/monitor.json.
TOOL_CALL = {
    "type": OpenAPIType.OBJECT,
    "required": ["action", "context"],
    "properties": {
        "action": _string(enum=["monitor_create", "monitor_list", "monitor_cancel"]),
        "arguments": Schema(type=OpenAPIType.OBJECT, description="The action's arguments (tool_schema/monitor.json)."),
        "context": Schema(type=OpenAPIType.OBJECT, required=["conversation_id"], properties={
            "conversation_id": _string(min_length=1, max_length=200, pattern=r"\S"),
            "channel": _optional_string(), "agent_id": _optional_string()}),
    },
}

_MEANINGS = {
    400: "The request is malformed; detail says which part to fix.",
    401: "A runtime token (Authorization: Bearer) is missing or unknown, or a webhook signature is wrong.",
    403: "Refused: a missing or stale CSRF token or nonce, a foreign origin, or one of Vigil's own fetchers.",
    404: "No such thing under these credentials (unknown, cancelled and used-up links look the same).",
    405: "The method does nothing here.",
    409: "The change conflicts with the current state (already decided, already cancelled...).",
    410: "The request has expired.",
    412: "A precondition failed: If-Match names another version (read it again), or If-None-Match: * found one.",
    413: "The body is over the size limit.",
    429: "Too many requests; slow down.",
    503: "The database or Redis did not answer (a restart, say); send the same request again after Retry-After.",
}


def errors(*codes: int) -> dict[int, ResponseSpec]:
    """The error answers of one handler, each with the shared ErrorBody shape; any of them may answer 503
    (app/unavailable.py) while the database or Redis is down."""
    return {code: ResponseSpec(data_container=ErrorBody, description=_MEANINGS[code], generate_examples=False)
            for code in (*codes, 503)}


_FORM_ANSWERS = {
    200: "The page again, with what was made or changed (a new token, a pairing code...).",
    302: "Not signed in: on to /login.",
    303: "Done: back to the page the form is on (or to /login, signed out).",
}


def form_answers(*codes: int, pages: tuple[int, ...] = (), redirects: tuple[int, ...] = (303,)
                 ) -> dict[int, ResponseSpec]:
    """The answers of a Settings form POST: `redirects` (no body), the page itself as text/html for the statuses in
    `pages` (an error shown in the form), and the JSON refusals in `codes` (a stale CSRF token, no session, no such
    thing). Use with operation_class=FormPost: a page 400 may also be Litestar's own JSON refusal of the form."""
    specs = errors(*codes)
    specs.update({code: ResponseSpec(data_container=None, description=_FORM_ANSWERS[code]) for code in redirects})
    specs.update({code: ResponseSpec(data_container=str, media_type=MediaType.HTML, generate_examples=False,
                                     description=_FORM_ANSWERS.get(code, f"The page again, the refusal in it: "
                                                                         f"{_MEANINGS.get(code, '')}"))
                  for code in pages})
    return specs


@dataclass
class FormPost(Operation):
    """A form POST's operation: Litestar reads the form before the handler (a field sent twice is a JSON 400), so
    a 400 declared as the page is the page or that ErrorBody JSON."""

    def __post_init__(self) -> None:
        bad = (self.responses or {}).get("400")
        content = getattr(bad, "content", None)
        if content and MediaType.HTML.value in content:
            content[MediaType.JSON.value] = OpenAPIMediaType(schema=Schema(
                type=OpenAPIType.OBJECT, required=["detail"],
                properties={"detail": _string(), "status_code": Schema(type=OpenAPIType.INTEGER), "extra": Schema()}))
