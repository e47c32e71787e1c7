"""File helpers shared by the loaders: locating files, reading (gzipped) bytes, one-line errors."""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

from fedsample.errors import FedsampleError

__all__ = ["as_directory", "find_file", "malformed", "read_bytes"]


def as_directory(directory: str | os.PathLike[str], owner: str, *, name: str = "directory", source: str) -> Path:
    """``directory`` as a Path to an existing folder; a one-line error naming where to get the data otherwise."""
    if not isinstance(directory, (str, os.PathLike)):
        raise FedsampleError(
            f"The {name!r} parameter of {owner} must be a path to a folder. Got {directory!r} instead.", parameter=name
        )
    path = Path(directory)
    if not path.is_dir():
        raise FedsampleError(f"{owner}: folder not found: {str(path)!r}. {source}", parameter=name)
    return path


def find_file(
    directory: Path, names: tuple[str, ...], owner: str, *, source: str, parameter: str = "directory"
) -> Path:
    """The first of ``names`` (each also tried with ``.gz``) present in ``directory``; a one-line error otherwise."""
    for name in names:
        for candidate in (directory / name, directory / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    expected = str(directory / names[0])
    raise FedsampleError(
        f"{owner}: file not found: {expected!r} (or {expected + '.gz'!r}). {source}", parameter=parameter
    )


def malformed(owner: str, path: Path, problem: str, *, parameter: str = "directory") -> FedsampleError:
    """The one-line error for a file that exists but is not in the expected format."""
    return FedsampleError(f"{owner}: {str(path)!r} is malformed: {problem}.", parameter=parameter)


def read_bytes(path: Path, owner: str, *, parameter: str = "directory") -> bytes:
    """The contents of ``path``, decompressed when its name ends in ``.gz``."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as handle:
                return handle.read()
        return path.read_bytes()
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise malformed(owner, path, f"not a complete gzip stream ({exc})", parameter=parameter) from exc
    except OSError as exc:
        raise FedsampleError(
            f"{owner}: cannot read {str(path)!r}: {exc.strerror or exc}.", parameter=parameter
        ) from exc
