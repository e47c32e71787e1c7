"""Opening the files a user names as input (size lists, configs, saved states, traces) without hanging.

``open(path, "rb")`` waits, in the open itself, for a writer when ``path`` is a FIFO: a command given
a named pipe that nobody writes would hang for ever. :func:`open_input` opens without waiting, then
reads as usual, so a FIFO without a writer reads as an empty file (refused by its reader) while a
pipe that is being written (``/dev/stdin`` of ``cat sizes.txt | fedsample stats --sizes-file
/dev/stdin``) reads what is written.

A JSON file is read with bounds (:func:`read_json_file`): its size, and how deeply it nests
(:func:`json_depth`), checked before it is parsed.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, BinaryIO

import numpy as np

from fedsample._interrupts import deferred
from fedsample.errors import FedsampleError

__all__ = ["MAX_JSON_DEPTH", "json_depth", "open_input", "read_json_file"]

_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # absent on Windows, which has no FIFOs in the file system


def open_input(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for reading bytes, as ``open(path, "rb")`` (same ``OSError`` family) but never
    blocking in the open; the caller closes it (``with open_input(path) as handle: ...``)."""
    # A SIGINT or SIGTERM waits for the file object (fedsample._interrupts): raised half-way in fdopen, which
    # then closes the descriptor, it would make the close below fail, and the file look unreadable.
    with deferred():
        descriptor = os.open(path, os.O_RDONLY | _NONBLOCK)
        try:
            if _NONBLOCK:
                os.set_blocking(descriptor, True)
            return os.fdopen(descriptor, "rb")
        except BaseException:  # a directory (IsADirectoryError): fdopen leaves the descriptor open
            os.close(descriptor)
            raise


# A fedsample JSON file nests a few levels (an object, its fields, a nested design, an array
# entry): refusing anything deeper before parsing keeps a crafted file from exhausting the stack.
MAX_JSON_DEPTH = 64
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_OPENERS = np.zeros(256, dtype=np.int8)
_OPENERS[[ord("["), ord("{")]] = 1
_OPENERS[[ord("]"), ord("}")]] = -1


def json_depth(data: bytes) -> int:
    """How deeply the arrays and objects of the JSON text ``data`` nest (0 for a bare value)."""
    body = _JSON_STRING.sub(b'""', data) if b'"' in data else data
    codes = np.frombuffer(body, dtype=np.uint8)
    steps = _OPENERS[codes[np.flatnonzero(_OPENERS[codes])]].astype(np.int32)
    return int(np.cumsum(steps).max()) if steps.size else 0


def read_json_file(path: str | os.PathLike[str], *, parameter: str, max_bytes: int) -> Any:
    """The JSON value in the file at ``path``, read with bounds: at most ``max_bytes`` bytes of UTF-8
    text nested at most :data:`MAX_JSON_DEPTH` deep. Every failure is one :class:`FedsampleError`."""
    name = str(path)
    try:
        with open_input(path) as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise FedsampleError(
            f"The {parameter!r} parameter must name a readable file. Got {name!r} ({exc.strerror or exc}) instead.",
            parameter=parameter,
        ) from None
    problem = ""
    if len(data) > max_bytes:
        problem = f"more than {max_bytes} bytes"
    else:
        try:
            text = data.decode("utf-8-sig")  # a byte-order mark (an editor's) is not part of the JSON
        except UnicodeDecodeError as exc:
            problem = f"not UTF-8 text (byte {exc.start})"
        else:
            depth = json_depth(data)
            if depth > MAX_JSON_DEPTH:
                problem = f"JSON nested {depth} deep, beyond {MAX_JSON_DEPTH}"
            else:
                try:
                    return json.loads(text)
                except json.JSONDecodeError as exc:
                    problem = f"not JSON (line {exc.lineno}: {exc.msg})"
                except ValueError:  # Python reads no int of more than 4300 digits (int_max_str_digits)
                    problem = "an int of more than 4300 digits"
    raise FedsampleError(
        f"The {parameter!r} parameter must name a JSON file of at most {max_bytes} bytes. Got {name!r} "
        f"({problem}) instead.",
        parameter=parameter,
    )
