"""Client ids of a data file keep their identity (issue 32, item 2): integers of any size stay distinct,
floats that cannot be exact integers are refused, a missing id or a column named twice is one line."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedsample.data import FederatedDataset, load_leaf, load_table, read_columns
from fedsample.data.builders import has_own_clients
from fedsample.errors import FedsampleError

pa = pytest.importorskip("pyarrow")
parquet = pytest.importorskip("pyarrow.parquet")


def _csv(path: Path, ids: list[str]) -> Path:
    """A CSV of one row per id: client, a feature and a class id."""
    lines = ["client,f1,y"] + [f"{client},{k / 10},{k % 2}" for k, client in enumerate(ids)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _load(path: Path, **kwargs: Any) -> FederatedDataset:
    return load_table(path, client_column="client", target_column="y", **kwargs)


def _refused(path: Path, *fragments: str, **kwargs: Any) -> str:
    """The one-line error of loading ``path``; it names the file and holds every fragment."""
    with pytest.raises(FedsampleError) as info:
        _load(path, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    assert repr(str(kwargs.get("test_path", path))) in message or repr(str(path)) in message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_csv_ids_of_19_digits_stay_ten_clients(tmp_path: Path) -> None:
    """float64 read 2**60 + 0..9 as one number: ten clients became one."""
    ids = [str(2**60 + k) for k in range(10)]
    fed = _load(_csv(tmp_path / "ids.csv", ids * 2))
    assert fed.client_names == tuple(ids)
    assert fed.train_sizes().tolist() == [2] * 10


def test_csv_ids_beyond_int64_and_uint64_are_exact_and_sorted_as_numbers(tmp_path: Path) -> None:
    ids = [2**64 + 1, 2**63, -5, 2**63 + 1, 2**64, 3]
    fed = _load(_csv(tmp_path / "big.csv", [str(v) for v in ids]))
    assert fed.client_names == tuple(str(v) for v in sorted(ids))
    unsigned = [2**63 + k for k in range(4)]
    assert _load(_csv(tmp_path / "u.csv", [str(v) for v in unsigned])).client_names == tuple(map(str, unsigned))


def test_csv_ids_are_their_text_unless_all_plain_integers(tmp_path: Path) -> None:
    """'007' and '7', '3.0' and '3' were one float each; as text they are different clients."""
    fed = _load(_csv(tmp_path / "text.csv", ["7", "007", "3.0", "3", "7"]))
    assert fed.client_names == ("007", "3", "3.0", "7")
    assert fed.train_sizes().tolist() == [1, 1, 1, 2]
    assert _load(_csv(tmp_path / "ints.csv", ["10", "2", "10"])).client_names == ("2", "10")


def test_a_csv_test_file_id_that_rounds_onto_a_training_id_is_unknown(tmp_path: Path) -> None:
    train = _csv(tmp_path / "train.csv", [str(2**60 + k) for k in range(4)])
    test = _csv(tmp_path / "test.csv", [str(2**60 + 11)])
    _refused(tmp_path / "train.csv", f"client {2**60 + 11} has no training rows", test_path=test)
    exact = _load(train, test_path=_csv(tmp_path / "known.csv", [str(2**60 + 3)]))
    assert exact.test_sizes().tolist() == [0, 0, 0, 1]


def _npz(path: Path, client: np.ndarray, **arrays: Any) -> Path:
    rows = client.shape[0]
    with path.open("wb") as handle:
        np.savez(handle, client=client, x=np.ones((rows, 2)), y=np.arange(rows) % 2, **arrays)
    return path


def test_npz_ids_beyond_int64_stay_distinct_against_int64_test_ids(tmp_path: Path) -> None:
    """uint64 training ids against int64 test ids: 2**63 - 1 and 2**63 are two clients (as float64 they are one)."""
    train = np.array([2**63, 2**63 + 1, 7], dtype=np.uint64)
    path = _npz(tmp_path / "u.npz", train, client_test=np.array([2**63 - 1]), x_test=np.ones((1, 2)), y_test=[0])
    _refused(path, f"client {2**63 - 1} has no training rows")
    known = _npz(tmp_path / "k.npz", train, client_test=np.array([7]), x_test=np.ones((1, 2)), y_test=[0])
    fed = _load(known)
    assert fed.client_names == ("7", str(2**63), str(2**63 + 1))
    assert fed.test_sizes().tolist() == [1, 0, 0]


@pytest.mark.parametrize(
    ("ids", "fragment"),
    [
        (np.array([1e20, 1e20 + 2**17, 3.0]), "holds the float64 1e+20 at row 0"),  # merged into int64's minimum
        (np.array([3.0, 2.0**53 + 2]), "at row 1: a float client id must be a whole number of magnitude at most 2**53"),
        (np.array([1.0, 1.5]), "holds the float64 1.5 at row 1"),
        (np.array([1.0, 2.0**24 + 2], dtype=np.float32), "at most 2**24"),
        (np.array([1.0, np.inf]), "holds the float64 inf at row 1"),
    ],
)
def test_npz_float_ids_that_are_not_exact_integers_are_refused(tmp_path: Path, ids: np.ndarray, fragment: str) -> None:
    _refused(_npz(tmp_path / "f.npz", ids), "client column 'client'", fragment)


def test_npz_whole_float_ids_are_those_integers(tmp_path: Path) -> None:
    fed = _load(_npz(tmp_path / "w.npz", np.array([3.0, 1.0, 2.0**53, 3.0])))
    assert fed.client_names == ("1", "3", str(2**53))


def _parquet(path: Path, client: Any) -> Path:
    rows = len(client)
    parquet.write_table(pa.table({"client": client, "x": [0.5] * rows, "y": [k % 2 for k in range(rows)]}), path)
    return path


MISSING = "has a missing client id (an empty cell, NaN or a null) at row"


@pytest.mark.parametrize(
    ("name", "make", "row"),
    [
        ("empty cell among strings", lambda p: _csv(p / "s.csv", ["a", "b", "", "a"]), 2),  # was a client named ''
        ("empty cell among numbers", lambda p: _csv(p / "n.csv", ["1", "", "2"]), 1),
        ("NaN cell", lambda p: _csv(p / "nan.csv", ["a", "NaN"]), 1),
        ("Parquet null string", lambda p: _parquet(p / "s.parquet", pa.array(["a", None, "b"])), 1),  # was 'None'
        ("Parquet null integer", lambda p: _parquet(p / "i.parquet", pa.array([2**60, 2**60 + 1, None])), 2),
        ("NPZ NaN", lambda p: _npz(p / "nan.npz", np.array([1.0, np.nan])), 1),
        ("NPZ empty string", lambda p: _npz(p / "e.npz", np.array(["a", "", "b"])), 1),
        ("NPZ blank bytes", lambda p: _npz(p / "b.npz", np.array([b"a", b"  "])), 1),
    ],
)
def test_a_missing_client_id_names_the_file_the_column_and_the_row(
    tmp_path: Path, name: str, make: Any, row: int
) -> None:
    _refused(make(tmp_path), f"client column 'client' {MISSING} {row}")


def test_parquet_integer_ids_beyond_float64_stay_distinct(tmp_path: Path) -> None:
    ids = [2**60, 2**60 + 1, 2**63 - 1]
    assert _load(_parquet(tmp_path / "big.parquet", pa.array(ids))).client_names == tuple(map(str, ids))
    assert _load(_parquet(tmp_path / "none.parquet", pa.array(["None", "a"]))).client_names == ("None", "a")


def test_a_csv_header_naming_a_column_twice_is_refused(tmp_path: Path) -> None:
    """client,f1,y,f3,y silently used the last 'y'."""
    path = tmp_path / "dup.csv"
    path.write_text("client,f1,y,f3,y\n1,0.5,1,0.2,5\n2,0.3,0,0.1,6\n")
    _refused(path, "column 'y' appears twice in the header")
    for read in (read_columns, lambda p: has_own_clients(str(p))):
        with pytest.raises(FedsampleError, match="column 'y' appears twice in the header"):
            read(path)


def test_a_parquet_schema_naming_a_column_twice_is_one_line(tmp_path: Path) -> None:
    table = pa.table(
        [pa.array([1, 2]), pa.array([0.5, 0.3]), pa.array([0, 1]), pa.array([5, 6])], ["client", "x", "y", "y"]
    )
    path = tmp_path / "dup.parquet"
    parquet.write_table(table, path)
    _refused(path, "column 'y' appears twice in the schema")
    with pytest.raises(FedsampleError, match="column 'y' appears twice in the schema"):
        has_own_clients(str(path))


def _npy(values: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, values)
    return buffer.getvalue()


def test_an_npz_holding_a_member_twice_is_refused(tmp_path: Path) -> None:
    """A zip archive may hold two entries of one name; np.load read one of them silently."""
    path = tmp_path / "dup.npz"
    with zipfile.ZipFile(path, "w") as archive:
        for name, values in [("client", [1, 2]), ("x", [0.5, 0.3]), ("y", [0, 1])]:
            archive.writestr(f"{name}.npy", _npy(np.array(values)))
        with pytest.warns(UserWarning, match="Duplicate name"):
            archive.writestr("y.npy", _npy(np.array([1, 1])))
    _refused(path, "member 'y' appears twice in the archive")
    with pytest.raises(FedsampleError, match="member 'y' appears twice"):
        has_own_clients(str(path))


SEQ = "To be, or not to be, that is the question: Whether 'tis nobler in the mind to suf"[:80]


def _leaf(tmp_path: Path, text: str) -> str:
    folder = tmp_path / "train"
    folder.mkdir()
    (folder / "a.json").write_text(text)
    with pytest.raises(FedsampleError) as info:
        load_leaf(folder, kind="shakespeare")
    assert "\n" not in str(info.value)
    return str(info.value)


def test_leaf_user_listed_twice_is_refused(tmp_path: Path) -> None:
    """Its rows were read twice."""
    content = {"users": ["a", "a"], "user_data": {"a": {"x": [SEQ], "y": ["f"]}}}
    assert "user 'a' appears twice in 'users'" in _leaf(tmp_path, json.dumps(content))


def test_leaf_json_naming_a_user_twice_is_refused(tmp_path: Path) -> None:
    """json keeps the last of two keys silently: a user's first rows were lost."""
    record = json.dumps({"x": [SEQ], "y": ["f"]})
    text = f'{{"users": ["a"], "user_data": {{"a": {record}, "a": {record}}}}}'
    assert "the key 'a' appears twice in one JSON object" in _leaf(tmp_path, text)


def test_leaf_empty_user_name_is_a_missing_id(tmp_path: Path) -> None:
    content = {"users": ["a", ""], "user_data": {"a": {"x": [SEQ], "y": ["f"]}, "": {"x": [SEQ], "y": ["e"]}}}
    assert "missing user name (an empty string) at position 1" in _leaf(tmp_path, json.dumps(content))


def test_a_csv_client_column_that_is_also_a_feature_is_read_as_numbers(tmp_path: Path) -> None:
    path = _csv(tmp_path / "both.csv", ["2", "1"])
    fed = _load(path, feature_columns=["client", "f1"])
    assert fed.client_names == ("1", "2")
    assert fed.client_train(0)[0].tolist() == [[1.0, np.float32(0.1)]]
    with pytest.raises(FedsampleError, match="'feature_columns' parameter of load_table must be a sequence"):
        _load(path, feature_columns=5)  # was a TypeError
