import os

import pytest

from engine.errors import ContentError, SpecError
from engine.http import FetchError, FetchPolicy
from engine.sources import SourceIO, SourcePolicy, SourceSpec, normalize, parse_source, read

MAX = 64 * 1024


class Fetcher:
    """Only its policy is used: a file is read up to the fetch cap."""

    def __init__(self, max_bytes: int = 1024 * 1024):
        self.policy = FetchPolicy(max_bytes=max_bytes)


@pytest.fixture()
def root(tmp_path):
    folder = tmp_path / "allowed"
    folder.mkdir()
    (tmp_path / "outside.txt").write_text("secret")
    return folder


def policy(*roots) -> SourcePolicy:
    return SourcePolicy(file_roots=tuple(str(r) for r in roots))


def create(path, *roots) -> SourceSpec:
    return parse_source({"type": "file", "path": str(path)}, policy(*roots))


def refused(path, *roots) -> str:
    with pytest.raises(SpecError) as info:
        create(path, *roots)
    assert str(info.value).endswith(".")
    return str(info.value)


def io(*roots, max_bytes: int = 1024 * 1024) -> SourceIO:
    return SourceIO(Fetcher(max_bytes), policy(*roots))


def fetch_error(spec, *roots) -> FetchError:
    with pytest.raises(FetchError) as info:
        read(spec, io(*roots))
    assert info.value.unreachable is False and info.value.message.endswith(".")
    return info.value


# --- parse -------------------------------------------------------------------------------------------------------------

def test_a_file_inside_a_root_is_accepted_as_written(root):
    assert create(f"  {root}/status.txt ", root) == SourceSpec(type="file", path=f"{root}/status.txt")


def test_a_file_in_any_of_several_roots(root, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    assert create(other / "a.json", root, other).path == str(other / "a.json")


def test_file_sources_are_off_without_roots(root):
    message = refused(root / "a.txt")
    assert message.startswith("File sources are turned off on this Vigil (FILE_SOURCE_ROOTS is empty);")


def test_relative_roots_are_ignored(root):
    assert "turned off" in refused(root / "a.txt", "relative/dir")


@pytest.mark.parametrize("path", [None, "", "  ", "status.txt", "./status.txt", 5])
def test_path_must_be_an_absolute_path(root, path):
    with pytest.raises(SpecError, match="source.path is required for a file source: the absolute path"):
        parse_source({"type": "file", "path": path}, policy(root))


def test_traversal_out_of_the_root_is_refused(root, tmp_path):
    assert "outside the folders file sources may read" in refused(f"{root}/../outside.txt", root)
    assert "outside" in refused(tmp_path / "outside.txt", root)
    assert "outside" in refused("/etc/passwd", root)


def test_traversal_that_stays_inside_is_accepted(root):
    (root / "sub").mkdir()
    assert create(f"{root}/sub/../a.txt", root).path == f"{root}/sub/../a.txt"


def test_a_sibling_folder_sharing_the_prefix_is_outside(root, tmp_path):
    (tmp_path / "allowed-not").mkdir()
    assert "outside" in refused(tmp_path / "allowed-not" / "a.txt", root)


def test_a_symlink_pointing_out_is_refused(root, tmp_path):
    os.symlink(tmp_path / "outside.txt", root / "link.txt")
    os.symlink(tmp_path, root / "up")
    assert "symbolic links" in refused(root / "link.txt", root)
    assert "outside" in refused(root / "up" / "outside.txt", root)


def test_a_symlink_inside_the_root_is_accepted(root):
    (root / "real.txt").write_text("x")
    os.symlink(root / "real.txt", root / "alias.txt")
    assert create(root / "alias.txt", root).path == str(root / "alias.txt")


def test_a_root_that_is_itself_a_symlink(root, tmp_path):
    os.symlink(root, tmp_path / "via")
    (root / "a.txt").write_text("hello")
    spec = create(tmp_path / "via" / "a.txt", tmp_path / "via")
    assert read(spec, io(tmp_path / "via")) == b"hello"


def test_unknown_fields_are_refused(root):
    with pytest.raises(SpecError, match="unknown field 'url'"):
        parse_source({"type": "file", "path": str(root / "a"), "url": "https://x.example.com/"}, policy(root))


# --- read --------------------------------------------------------------------------------------------------------------

def test_read_returns_the_bytes(root):
    (root / "a.txt").write_bytes(b"line 1\nline 2\n")
    assert read(create(root / "a.txt", root), io(root)) == b"line 1\nline 2\n"


def test_read_is_cut_at_the_fetch_cap(root):
    (root / "big.txt").write_bytes(b"x" * 5000)
    assert read(create(root / "big.txt", root), io(root, max_bytes=1000)) == b"x" * 1000


def test_read_cap_defaults_to_one_mib_without_a_fetch_policy(root):
    (root / "big.txt").write_bytes(b"x" * (1024 * 1024 + 10))
    body = read(create(root / "big.txt", root), SourceIO(object(), policy(root)))
    assert len(body) == 1024 * 1024


def test_a_missing_file_is_a_fetch_error_that_is_not_unreachable(root):
    error = fetch_error(create(root / "gone.txt", root), root)
    assert error.message == f"The file {root}/gone.txt does not exist."


def test_a_folder_is_not_a_file(root):
    (root / "sub").mkdir()
    assert "is not a regular file" in fetch_error(create(root / "sub", root), root).message


def test_a_symlink_swapped_in_after_create_is_refused_at_read(root, tmp_path):
    (root / "a.txt").write_text("fine")
    spec = create(root / "a.txt", root)
    os.remove(root / "a.txt")
    os.symlink(tmp_path / "outside.txt", root / "a.txt")
    assert "now leads outside the folders" in fetch_error(spec, root).message


def test_a_root_removed_from_the_setting_is_refused_at_read(root, tmp_path):
    (root / "a.txt").write_text("fine")
    spec = create(root / "a.txt", root)
    assert "now leads outside" in fetch_error(spec, tmp_path / "elsewhere").message
    assert "turned off" in fetch_error(spec).message


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_an_unreadable_file(root):
    (root / "locked.txt").write_text("x")
    os.chmod(root / "locked.txt", 0)
    assert "permission denied" in fetch_error(create(root / "locked.txt", root), root).message


def test_a_fifo_is_refused_without_blocking(root):
    os.mkfifo(root / "pipe")
    assert "is not a regular file" in fetch_error(create(root / "pipe", root), root).message


# --- normalize ---------------------------------------------------------------------------------------------------------

def test_a_json_file_is_parsed_with_sorted_keys(root):
    content = normalize(SourceSpec(type="file", path=f"{root}/status.JSON"), b'{"b": 1, "a": {"c": 2}}', MAX)
    assert content.is_json and content.data == {"a": {"c": 2}, "b": 1}
    assert content.text.index('"a"') < content.text.index('"b"')


def test_a_broken_json_file_is_a_content_error(root):
    with pytest.raises(ContentError, match="not valid JSON"):
        normalize(SourceSpec(type="file", path=f"{root}/s.json"), b"{oops", MAX)


def test_other_files_are_tidy_text(root):
    body = b"  Status:\t\tOK  \r\n\n\n\n  Build   42\n\xff end"
    content = normalize(SourceSpec(type="file", path=f"{root}/s.log"), body, MAX)
    assert content.text == "Status: OK\n\nBuild 42\n\ufffd end" and not content.is_json and content.data is None


def test_text_is_cut_at_max_text_bytes(root):
    content = normalize(SourceSpec(type="file", path=f"{root}/s.txt"), "é".encode() * 100, 51)
    assert content.text == "é" * 25
