"""Dotted paths with [index] for lists: `data.items[0].price`."""

from __future__ import annotations

import re

_SEGMENT = re.compile(r"([^.\[\]]+)?((?:\[-?\d+\])*)")
_INDEX = re.compile(r"\[(-?\d+)\]")


class PathError(ValueError):
    """The path is malformed, or the document has nothing at it."""


def parse_path(path: str) -> list[str | int]:
    """Split a path into keys and list indexes; raises PathError when malformed."""
    if not isinstance(path, str) or not path.strip():
        raise PathError("the path is empty")
    steps: list[str | int] = []
    for raw in path.strip().split("."):
        match = _SEGMENT.fullmatch(raw)
        if not raw or not match or not (match.group(1) or match.group(2)):
            raise PathError(f"'{path}' is not a dotted path like items[0].price")
        if match.group(1):
            steps.append(match.group(1))
        steps.extend(int(i) for i in _INDEX.findall(match.group(2)))
    return steps


def resolve(document: object, path: str) -> object:
    """The value at `path`; a leading `data.` names the document itself when it has no `data` key."""
    steps = parse_path(path)
    try:
        return _walk(document, steps)
    except PathError:
        has_data = isinstance(document, dict) and "data" in document
        if steps and steps[0] == "data" and len(steps) > 1 and not has_data:
            return _walk(document, steps[1:])
        raise


def _walk(document: object, steps: list[str | int]) -> object:
    node = document
    for step in steps:
        if isinstance(step, int):
            if not isinstance(node, list) or not -len(node) <= step < len(node):
                raise PathError(f"there is no item [{step}] there")
            node = node[step]
        else:
            if not isinstance(node, dict) or step not in node:
                raise PathError(f"there is no field '{step}' there")
            node = node[step]
    return node
