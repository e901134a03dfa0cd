"""file: a file on this machine, inside the folders the operator allows (FILE_SOURCE_ROOTS)."""

from __future__ import annotations

import os
import stat

from engine.content import Content, cut_text, json_content, tidy
from engine.errors import SpecError
from engine.http import FetchError
from engine.sources.base import SourceIO, SourcePolicy, SourceSpec

FIELDS = frozenset({"type", "path"})
#: the cap when the fetcher has no policy to take it from
DEFAULT_MAX_BYTES = 1024 * 1024
_FD_LINKS = "/proc/self/fd"


def parse(raw: dict, policy: SourcePolicy) -> SourceSpec:
    roots = real_roots(policy)
    if not roots:
        raise SpecError("File sources are turned off on this Vigil (FILE_SOURCE_ROOTS is empty); "
                        "watch a page, json or feed url instead.")
    path = raw.get("path")
    if not isinstance(path, str) or not path.strip() or not os.path.isabs(path.strip()) or "\0" in path:
        raise SpecError(f"source.path is required for a file source: the absolute path of a file inside "
                        f"{_listed(roots)}.")
    path = path.strip()
    if inside(os.path.realpath(path), roots) is None:
        raise SpecError(f"source.path {path} is outside the folders file sources may read ({_listed(roots)}); "
                        "'..' and symbolic links may not lead out of them.")
    return SourceSpec(type="file", path=path)


def read(spec: SourceSpec, io: SourceIO) -> bytes:
    """The file's first bytes, up to the fetch cap; re-checked against the roots on every read."""
    roots = real_roots(io.policy)
    if not roots:
        raise FetchError("File sources are turned off on this Vigil (FILE_SOURCE_ROOTS is empty).")
    real = os.path.realpath(spec.path)
    if inside(real, roots) is None:
        raise FetchError(f"The file {spec.path} now leads outside the folders file sources may read.")
    fd = _open(spec.path, real)
    with os.fdopen(fd, "rb") as handle:
        _check_opened(spec.path, fd, roots)
        return handle.read(_max_bytes(io))


def normalize(spec: SourceSpec, body: bytes, max_text_bytes: int) -> Content:
    """Parsed JSON for a .json file, else its text with whitespace tidied."""
    if spec.path.lower().endswith(".json"):
        return json_content(body, max_text_bytes)
    return Content(text=cut_text(tidy(body.decode("utf-8", errors="replace")), max_text_bytes))


def real_roots(policy: SourcePolicy) -> tuple[str, ...]:
    """The allowed folders with their symbolic links resolved; relative ones are ignored."""
    return tuple(os.path.realpath(root) for root in policy.file_roots if root and os.path.isabs(root))


def inside(real: str, roots: tuple[str, ...]) -> str | None:
    """The root that holds the resolved path `real`, or None."""
    for root in roots:
        if os.path.commonpath([root, real]) == root:
            return root
    return None


def _open(path: str, real: str) -> int:
    """A descriptor of the regular file at `real`, never following a link swapped in since."""
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise FetchError(f"The file {path} does not exist.") from None
    except PermissionError:
        raise FetchError(f"The file {path} can't be read: permission denied.") from None
    except OSError as exc:
        raise FetchError(f"The file {path} can't be read ({exc.strerror or exc}).") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise FetchError(f"{path} is not a regular file; give the path of a file, not a folder or device.")
    return fd


def _check_opened(path: str, fd: int, roots: tuple[str, ...]) -> None:
    """Where Linux says which file was opened, it must still be inside a root."""
    link = f"{_FD_LINKS}/{fd}"
    if os.path.isdir(_FD_LINKS) and inside(os.readlink(link), roots) is None:
        raise FetchError(f"The file {path} now leads outside the folders file sources may read.")


def _max_bytes(io: SourceIO) -> int:
    policy = getattr(io.fetcher, "policy", None)
    return getattr(policy, "max_bytes", DEFAULT_MAX_BYTES)


def _listed(roots: tuple[str, ...]) -> str:
    return ", ".join(roots)
