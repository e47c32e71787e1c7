"""Table loader (CSV, NPZ, Parquet) with a client-id column."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from fedsample.data import MissingDependencyError, load_table, read_columns
from fedsample.errors import FedsampleError

CSV = """user,f1,label,f2,note
bob,0.5,1,2,x
alice,1.5,0,3,y
bob,2.5,2,4,z
carol,3.5,1,5,w
"""


def write_csv(path: Path, text: str = CSV) -> Path:
    path.write_text(text)
    return path


def check_federation(fed: object) -> None:
    from fedsample.data import FederatedDataset

    assert isinstance(fed, FederatedDataset)
    assert fed.client_names == ("alice", "bob", "carol")  # sorted client ids
    assert fed.train_sizes().tolist() == [1, 2, 1]
    x, y = fed.client_train(1)
    assert x.tolist() == [[0.5, 2.0], [2.5, 4.0]]  # file order kept within a client
    assert y.tolist() == [1, 2]
    assert fed.train_features.dtype == np.float32
    assert fed.train_targets.dtype == np.int64
    assert fed.num_classes == 3


def test_csv_default_features_are_the_other_numeric_columns(tmp_path: Path) -> None:
    fed = load_table(write_csv(tmp_path / "clients.csv"), client_column="user", target_column="label")
    check_federation(fed)
    assert fed.name == "clients"


def test_npz(tmp_path: Path) -> None:
    path = tmp_path / "clients.npz"
    np.savez(
        path,
        user=np.array(["bob", "alice", "bob", "carol"]),
        f1=np.array([0.5, 1.5, 2.5, 3.5]),
        label=np.array([1, 0, 2, 1]),
        f2=np.array([2, 3, 4, 5]),
    )
    check_federation(load_table(path, client_column="user", target_column="label"))


def test_parquet(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    parquet = pytest.importorskip("pyarrow.parquet")
    table = pa.table(
        {
            "user": ["bob", "alice", "bob", "carol"],
            "f1": [0.5, 1.5, 2.5, 3.5],
            "label": [1, 0, 2, 1],
            "f2": [2, 3, 4, 5],
            "note": ["x", "y", "z", "w"],
        }
    )
    path = tmp_path / "clients.parquet"
    parquet.write_table(table, path)
    check_federation(load_table(path, client_column="user", target_column="label"))


def test_parquet_names_the_extra_when_pyarrow_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.parquet"
    path.write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'fedsample\[parquet\]'"):
        load_table(path, client_column="user", target_column="label")


def test_explicit_features_regression_and_test_file(tmp_path: Path) -> None:
    train = write_csv(tmp_path / "train.csv")
    test = write_csv(
        tmp_path / "test.csv", "user,f1,label,f2,note\ncarol,9.0,0.25,1,a\nbob,8.0,0.5,1,b\ncarol,7.0,1,1,c\n"
    )
    fed = load_table(
        train, client_column="user", target_column="label", feature_columns=["f2"], task="regression", test_path=test
    )
    assert fed.task == "regression"
    assert fed.num_classes is None
    assert fed.train_features.shape == (4, 1)
    assert fed.test_sizes().tolist() == [0, 1, 2]
    assert fed.client_test(2)[1].tolist() == [0.25, 1.0]
    assert fed.train_targets.dtype == np.float32


def test_numeric_client_ids(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "ids.csv", "client,x,y\n10,1,0\n2,2,1\n10,3,1\n")
    fed = load_table(path, client_column="client", target_column="y")
    assert fed.client_names == ("2", "10")
    assert fed.train_sizes().tolist() == [1, 2]


def expect(path: Path, fragment: str, **kwargs: object) -> None:
    arguments: dict[str, object] = {"client_column": "user", "target_column": "label", **kwargs}
    with pytest.raises(FedsampleError) as info:
        load_table(path, **arguments)  # type: ignore[arg-type]
    message = str(info.value)
    assert "\n" not in message
    assert fragment in message


def test_error_paths(tmp_path: Path) -> None:
    expect(tmp_path / "missing.csv", f"file not found: {str(tmp_path / 'missing.csv')!r}")
    csv = write_csv(tmp_path / "ok.csv")
    expect(csv, "no client column 'owner'", client_column="owner")
    expect(csv, "The 'target_column' parameter of load_table must be a column of 'ok.csv'", target_column="y")
    expect(csv, "feature column 'note' is not numeric (value 'x')", feature_columns=["f1", "note"])
    expect(csv, "Got 'f9' instead. Did you mean 'f1'", feature_columns=["f9"])
    expect(csv, "target column 'note' is not numeric", target_column="note")
    expect(write_csv(tmp_path / "frac.csv", "user,f1,label\na,1,0.5\n"), "non-negative integer class ids")
    expect(write_csv(tmp_path / "ragged.csv", "user,f1,label\na,1,0\nb,2\n"), "line 3 has 2 fields, the header has 3")
    expect(write_csv(tmp_path / "nan.csv", "user,f1,label\na,nan,0\n"), "missing or non-finite value at row 0")
    expect(write_csv(tmp_path / "blank.csv", "user,f1,f2,label\na,1,,0\n"), "column 'f2' has a missing or non-finite")
    expect(write_csv(tmp_path / "text.csv", "user,note,label\na,x,0\n"), "no numeric feature column")
    expect(write_csv(tmp_path / "empty.csv", ""), "no header row")
    (tmp_path / "t.xlsx").write_text("x")
    expect(tmp_path / "t.xlsx", "'path' parameter of load_table must be a .csv, .npz, .parquet or .pq file")
    test = write_csv(tmp_path / "test.csv", "user,f1,label,f2,note\ndave,1,0,1,a\n")
    expect(csv, "client 'dave' has no training rows", test_path=test)


def test_npz_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    expect(bad, "not a readable NPZ archive")
    two_d = tmp_path / "two_d.npz"  # a feature block may be N-D (tests/data/test_data_files.py); a client column not
    np.savez(two_d, user=np.zeros((2, 2)), label=np.zeros(2), x=np.zeros((2, 2)))
    expect(two_d, "client column 'user' is not 1-D (shape (2, 2))")
    ragged = tmp_path / "ragged.npz"
    np.savez(ragged, user=np.zeros(2), label=np.zeros(3), x=np.zeros(2))
    expect(ragged, "columns of different lengths")
    objects = tmp_path / "objects.npz"
    np.savez(objects, user=np.array([{"a": 1}], dtype=object), label=np.zeros(1), x=np.zeros(1))
    expect(objects, "not a readable NPZ archive")


def test_read_columns_types(tmp_path: Path) -> None:
    columns = read_columns(write_csv(tmp_path / "c.csv"))
    assert columns["f1"].dtype == np.float64
    assert columns["note"].dtype.kind == "U"
