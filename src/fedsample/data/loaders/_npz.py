"""NPZ archives read member by member: each member's ``.npy`` header (shape, dtype) is read and checked
before its array is allocated, and nothing is ever unpickled.

A member declares its shape and dtype in its header; :func:`read_npz` refuses a member whose declared
data is longer than the bytes the member holds (a corrupt or hostile header such as ``(10**12, 5)``
over a few bytes), or whose arrays together would not fit in this machine's memory, in one line
naming the file and the member, before any array is allocated.
"""

from __future__ import annotations

import math
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from numpy.lib import format as npy

from fedsample._memory import check_fits_in_memory
from fedsample.data.loaders._files import malformed
from fedsample.errors import FedsampleError

__all__ = ["NPZ_ERRORS", "npz_names", "read_npz"]

NPZ_ERRORS = (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error)
_SUFFIX = ".npy"
_Header = tuple[tuple[int, ...], np.dtype[Any], int]  # shape, dtype, bytes of data the member holds


def npz_names(path: Path, owner: str, parameter: str) -> tuple[str, ...]:
    """The column names of an NPZ archive (its member names without ``.npy``), read without any data;
    a name given twice, or a member that is not a ``.npy`` array, is refused."""
    try:
        with zipfile.ZipFile(path) as archive:
            return tuple(name for name, _ in _members(archive, path, owner, parameter))
    except NPZ_ERRORS as exc:
        raise _unreadable(path, owner, parameter, exc) from exc


def read_npz(path: Path, owner: str, parameter: str) -> dict[str, npt.NDArray[Any]]:
    """Every member of the NPZ archive at ``path`` as an array, by name in archive order; each header is
    checked (no Python objects, no scalar, data within the member's bytes and within memory) first."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = _members(archive, path, owner, parameter)
            total = 0
            for name, info in members:
                shape, dtype, held = _header(archive, info, name, path, owner, parameter)
                declared = math.prod(shape) * dtype.itemsize  # Python ints: a hostile shape cannot overflow
                if declared > held:
                    problem = (
                        f"member {name!r} declares shape {shape} of {dtype} ({declared} bytes) "
                        f"but holds {held} bytes of data"
                    )
                    raise malformed(owner, path, problem, parameter=parameter)
                total += declared
                what = f"the arrays of {str(path)!r} up to member {name!r} (shape {shape} of {dtype})"
                check_fits_in_memory(parameter, owner, str(path), total, what)
            return {name: _array(archive, info) for name, info in members}
    except FedsampleError:
        raise
    except NPZ_ERRORS as exc:
        raise _unreadable(path, owner, parameter, exc) from exc


def _unreadable(path: Path, owner: str, parameter: str, exc: BaseException) -> FedsampleError:
    detail = " ".join(str(exc).split())  # one line, whatever the library said
    return malformed(owner, path, f"not a readable NPZ archive of plain arrays ({detail})", parameter=parameter)


def _members(archive: zipfile.ZipFile, path: Path, owner: str, parameter: str) -> list[tuple[str, zipfile.ZipInfo]]:
    """The archive's members as (column name, entry): every member a ``.npy`` file, no name twice."""
    members: list[tuple[str, zipfile.ZipInfo]] = []
    seen: set[str] = set()
    for info in archive.infolist():
        if not info.filename.endswith(_SUFFIX):
            raise malformed(owner, path, f"member {info.filename!r} is not a .npy array", parameter=parameter)
        name = info.filename.removesuffix(_SUFFIX)
        if name in seen:  # a zip archive may hold two entries of one name; which one is the column?
            raise malformed(owner, path, f"member {name!r} appears twice in the archive", parameter=parameter)
        seen.add(name)
        members.append((name, info))
    return members


def _header(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, name: str, path: Path, owner: str, parameter: str
) -> _Header:
    """The member's declared shape and dtype, and the bytes of data after its header."""
    with archive.open(info) as handle:
        if handle.read(len(npy.MAGIC_PREFIX)) != npy.MAGIC_PREFIX:
            raise malformed(owner, path, f"member {name!r} is not a .npy array", parameter=parameter)
        version = tuple(handle.read(2))
        if version == (1, 0):
            shape, _, dtype = npy.read_array_header_1_0(handle)
        elif version == (2, 0):
            shape, _, dtype = npy.read_array_header_2_0(handle)
        else:  # 3.0 only differs for structured dtypes with non-latin-1 field names, never a column
            problem = f"member {name!r} is a .npy array of format version {version}, not 1.0 or 2.0"
            raise malformed(owner, path, problem, parameter=parameter)
        held = info.file_size - handle.tell()
    if dtype.hasobject:  # allow_pickle=False: reading it would unpickle, which can run code
        problem = f"member {name!r} holds Python objects, never unpickled"
        raise malformed(owner, path, f"not a readable NPZ archive of plain arrays ({problem})", parameter=parameter)
    if len(shape) == 0:
        raise malformed(owner, path, f"member {name!r} is a scalar, not a column", parameter=parameter)
    if dtype.itemsize == 0:
        raise malformed(owner, path, f"member {name!r} holds elements of zero bytes ({dtype})", parameter=parameter)
    return shape, dtype, held


def _array(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> npt.NDArray[Any]:
    with archive.open(info) as handle:
        return np.asarray(npy.read_array(handle, allow_pickle=False))
