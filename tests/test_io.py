"""Atomic writes: the target holds the old content or the new, never a partial file, and no temporary
file is left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedsample._io import atomic_path, write_bytes_atomic, write_text_atomic


def test_write_replaces_the_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    write_text_atomic(target, "first")
    write_text_atomic(target, "second ✓")
    assert target.read_text(encoding="utf-8") == "second ✓"
    write_bytes_atomic(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_a_failed_write_keeps_the_previous_file(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("previous")

    def interrupted() -> None:
        with atomic_path(target) as temporary:
            temporary.write_text("half of the new con")
            raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        interrupted()
    assert target.read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_the_temporary_lies_beside_the_target(tmp_path: Path) -> None:
    target = tmp_path / "figure.png"
    with atomic_path(target) as temporary:
        assert temporary.parent == tmp_path
        assert temporary.name.startswith(".figure.png.")
        assert not target.exists()
        temporary.write_bytes(b"png")
    assert target.read_bytes() == b"png"


def test_result_files_get_the_usual_mode(tmp_path: Path) -> None:
    """Not mkstemp's owner-only 0600: the mode a plain open() would give (0666 less the umask)."""
    import os

    mask = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "out.txt", "x")
    finally:
        os.umask(mask)
    assert (tmp_path / "out.txt").stat().st_mode & 0o777 == 0o644


def test_a_full_disk_is_one_line_and_keeps_the_previous_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC on a write (or on the rename): a one-line WriteError naming the file, the previous file whole,
    no temporary file left."""
    import errno

    import fedsample._io
    from fedsample._io import WriteError

    target = tmp_path / "out.txt"
    target.write_text("previous")

    def full(*args: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    for call in ("_write", "_rename"):
        with monkeypatch.context() as patched:
            patched.setattr(fedsample._io, call, full)
            with pytest.raises(WriteError, match=r"Writing '.*out\.txt' failed: No space left on device \(ENOSPC\)"):
                write_text_atomic(target, "new content")
        assert target.read_text() == "previous"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
