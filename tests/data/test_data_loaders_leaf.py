"""LEAF JSON loader (Shakespeare, FEMNIST) on small files in LEAF's layout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedsample.data import SHAKESPEARE_VOCABULARY, encode_characters, load_leaf
from fedsample.errors import FedsampleError


def write_leaf(folder: Path, name: str, users: dict[str, tuple[list[Any], list[Any]]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    content = {
        "users": list(users),
        "num_samples": [len(y) for _, y in users.values()],
        "user_data": {u: {"x": x, "y": y} for u, (x, y) in users.items()},
    }
    (folder / name).write_text(json.dumps(content))


LINE = "To be, or not to be, that is the question: Whether 'tis nobler in the mind to suf"
SEQ = LINE[:80]


def shakespeare_fixture(root: Path) -> tuple[Path, Path]:
    train, test = root / "train", root / "test"
    write_leaf(train, "b.json", {"HAMLET": ([SEQ, SEQ[1:] + "f"], ["f", "e"])})
    write_leaf(train, "a.json", {"OPHELIA": ([SEQ[::-1]], ["~"])})  # '~' is outside the vocabulary
    write_leaf(test, "all.json", {"HAMLET": ([SEQ], ["r"])})
    return train, test


def test_vocabulary_is_leafs_80_characters() -> None:
    assert len(SHAKESPEARE_VOCABULARY) == 80
    assert len(set(SHAKESPEARE_VOCABULARY)) == 80
    ids = encode_characters(SHAKESPEARE_VOCABULARY)
    assert ids.tolist() == list(range(1, 81))  # LEAF's index + 1
    assert encode_characters("\n a}").tolist() == [1, 2, 54, 80]
    assert encode_characters("~é_{").tolist() == [0, 0, 0, 0]  # outside LEAF's letters


def test_load_shakespeare(tmp_path: Path) -> None:
    train, test = shakespeare_fixture(tmp_path)
    fed = load_leaf(train, kind="shakespeare", test_directory=test)
    assert fed.client_names == ("OPHELIA", "HAMLET")  # files sorted by name, users in order
    assert fed.train_sizes().tolist() == [1, 2]
    assert fed.test_sizes().tolist() == [0, 1]
    assert fed.train_features.shape == (3, 80)
    assert fed.train_features.dtype == np.int64
    assert fed.num_classes == 81
    x, y = fed.client_train(1)
    assert x[0].tolist() == encode_characters(SEQ).tolist()
    assert y.tolist() == encode_characters("fe").tolist()
    assert fed.client_train(0)[1].tolist() == [0]
    assert fed.client_test(1)[1].tolist() == encode_characters("r").tolist()
    assert fed.name == "shakespeare"
    without_test = load_leaf(train, kind="shakespeare")
    assert without_test.test_sizes().sum() == 0


def test_load_femnist(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    pixels = rng.random((3, 784)).round(3)
    write_leaf(
        tmp_path / "train", "f.json", {"f0001": (pixels[:2].tolist(), [3, 61]), "f0002": (pixels[2:].tolist(), [0])}
    )
    write_leaf(tmp_path / "test", "f.json", {"f0002": (pixels[:1].tolist(), [7])})
    fed = load_leaf(tmp_path / "train", kind="femnist", test_directory=tmp_path / "test")
    assert fed.train_features.shape == (3, 1, 28, 28)
    assert fed.train_features.dtype == np.float32
    assert np.allclose(fed.train_features.reshape(3, 784), pixels)
    assert fed.train_targets.tolist() == [3, 61, 0]
    assert fed.num_classes == 62
    assert fed.test_sizes().tolist() == [0, 1]
    assert fed.federation().sizes.tolist() == [2, 1]


def expect_error(tmp_path: Path, content: object, fragment: str, kind: str = "shakespeare") -> None:
    folder = tmp_path / "bad"
    folder.mkdir(exist_ok=True)
    path = folder / "x.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(FedsampleError) as info:
        load_leaf(folder, kind=kind)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    assert fragment in message


def test_malformed_files(tmp_path: Path) -> None:
    expect_error(tmp_path, "{not json", "not valid JSON")
    expect_error(tmp_path, [1, 2], "top level is not a JSON object")
    expect_error(tmp_path, {"users": ["a"]}, "missing key 'user_data'")
    expect_error(tmp_path, {"users": ["a"], "user_data": {}}, "user 'a' has no 'x' and 'y'")
    expect_error(tmp_path, {"users": ["a"], "user_data": {"a": {"x": [SEQ], "y": []}}}, "same length")
    expect_error(
        tmp_path,
        {"users": ["a"], "num_samples": [3], "user_data": {"a": {"x": [SEQ], "y": ["a"]}}},
        "num_samples says 3 but there are 1",
    )
    expect_error(
        tmp_path, {"users": ["a"], "user_data": {"a": {"x": ["short"], "y": ["a"]}}}, "string of 80 characters"
    )
    expect_error(tmp_path, {"users": ["a"], "user_data": {"a": {"x": [SEQ], "y": ["ab"]}}}, "single character")
    expect_error(
        tmp_path,
        {"users": ["a"], "user_data": {"a": {"x": [[0.0] * 10], "y": [1]}}},
        "784 pixel values",
        kind="femnist",
    )
    expect_error(
        tmp_path,
        {"users": ["a"], "user_data": {"a": {"x": [[0.0] * 784], "y": [62]}}},
        "class id in [0, 61]",
        kind="femnist",
    )


def test_test_users_must_be_training_users(tmp_path: Path) -> None:
    train, test = shakespeare_fixture(tmp_path)
    write_leaf(test, "all.json", {"MACBETH": ([SEQ], ["r"])})
    with pytest.raises(FedsampleError, match="test user 'MACBETH' has no training samples"):
        load_leaf(train, kind="shakespeare", test_directory=test)


def test_missing_folders_and_empty_folders(tmp_path: Path) -> None:
    with pytest.raises(FedsampleError) as info:
        load_leaf(tmp_path / "missing", kind="femnist")
    assert "folder not found" in str(info.value)
    assert "github.com/TalwalkarLab/leaf" in str(info.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FedsampleError, match=r"no \.json file"):
        load_leaf(tmp_path / "empty", kind="femnist")
    with pytest.raises(FedsampleError, match="'kind' parameter of load_leaf"):
        load_leaf(tmp_path, kind="reddit")
