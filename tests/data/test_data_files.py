"""A user's own data file as a federation (``FederationSpec(dataset="mine.npz")``): reading, task, partition,
test rows, determinism and errors, on small files written here in the real formats."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedsample import FedsampleError
from fedsample.data import load_table, read_table
from fedsample.data.builders import FederationSpec, build_federation, has_own_clients, is_data_file

# --- files -------------------------------------------------------------------------------------------


def keras_npz(path: Path, *, train: int = 120, test: int = 30, seed: int = 0) -> Path:
    """A Keras-style MNIST archive: x_train, y_train, x_test, y_test (uint8 images, uint8 labels)."""
    rng = np.random.default_rng(seed)
    np.savez(
        path,
        x_train=rng.integers(0, 256, (train, 28, 28), dtype=np.uint8),
        y_train=rng.integers(0, 10, train).astype(np.uint8),
        x_test=rng.integers(0, 256, (test, 28, 28), dtype=np.uint8),
        y_test=rng.integers(0, 10, test).astype(np.uint8),
    )
    return path


def clients_csv(path: Path, *, rows: int = 60, clients: int = 5, seed: int = 0, target: str = "class") -> Path:
    """A CSV with a client column of strings, two numeric features, a text column and integer targets."""
    rng = np.random.default_rng(seed)
    lines = ["user,f1,note,f2,label"]
    for _ in range(rows):
        user = f"u{int(rng.integers(clients))}"
        label = int(rng.integers(3)) if target == "class" else round(float(rng.normal()), 3)
        lines.append(f"{user},{rng.normal():.4f},x,{rng.normal():.4f},{label}")
    path.write_text("\n".join(lines) + "\n")
    return path


def centralised_npz(path: Path, *, rows: int = 200, seed: int = 0, **extra: Any) -> Path:
    rng = np.random.default_rng(seed)
    columns = {"a": rng.normal(size=rows), "b": rng.normal(size=(rows, 3)), "y": rng.integers(0, 4, rows)}
    np.savez(path, **{**columns, **extra})
    return path


def build(path: Path, **kwargs: Any) -> Any:
    return build_federation(FederationSpec(dataset=str(path), **kwargs))


def refused(fragment: str, parameter: str, path: Path | None = None, **kwargs: Any) -> FedsampleError:
    """The one-line error of building ``path`` with ``kwargs``; it names ``parameter`` and holds ``fragment``."""
    with pytest.raises(FedsampleError) as caught:
        build_federation(FederationSpec(**({"dataset": str(path)} if path else {}), **kwargs))
    message = str(caught.value)
    assert "\n" not in message
    assert fragment in message, message
    assert caught.value.parameter == parameter, (caught.value.parameter, message)
    return caught.value


# --- the dataset key -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mine.npz", "data/mine.CSV", "/abs/t.parquet", "t.Pq", "../x.npz"])
def test_a_path_with_a_data_suffix_is_a_dataset(name: str) -> None:
    assert is_data_file(name)
    assert FederationSpec(dataset=name).dataset == name


@pytest.mark.parametrize("name", ["mine.npy", "mine", ".npz", "a\nb.npz", "", "DIGITS"])
def test_other_names_are_refused_with_the_constraint(name: str) -> None:
    with pytest.raises(FedsampleError) as caught:
        FederationSpec(dataset=name)
    error = caught.value
    assert (error.parameter, error.value) == ("dataset", name)
    assert "or a path to a .npz, .csv, .parquet or .pq file" in str(error)
    assert str(error.constraint).startswith("one of {'cifar10', 'digits', 'fashion-mnist'")  # sorted
    assert not is_data_file(name)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("target_column", "label"),
        ("client_column", "user"),
        ("feature_columns", ["a"]),
        ("task", "regression"),
        ("test_path", "t.npz"),
    ],
)
def test_file_keys_keep_their_defaults_with_a_built_in_dataset(key: str, value: Any) -> None:
    with pytest.raises(FedsampleError) as caught:
        FederationSpec(dataset="digits", **{key: value})
    assert caught.value.parameter == key
    assert "for the built-in dataset 'digits'" in str(caught.value)


def test_feature_columns_are_held_as_a_tuple_and_checked() -> None:
    assert FederationSpec(dataset="m.npz", feature_columns=["a", "b"]).feature_columns == ("a", "b")
    for bad in ([], ["a", "a"], "a", [""], [1]):
        with pytest.raises(FedsampleError) as caught:
            FederationSpec(dataset="m.npz", feature_columns=bad)
        assert caught.value.parameter == "feature_columns"


def test_test_path_must_be_of_the_dataset_format_family() -> None:
    assert FederationSpec(dataset="a.parquet", test_path="b.PQ").test_path == "b.PQ"
    with pytest.raises(FedsampleError, match=r"'test_path' parameter .* a path to a \.npz file like the dataset"):
        FederationSpec(dataset="a.npz", test_path="b.csv")


# --- reading: N-D features and dtypes ------------------------------------------------------------------------


def test_a_4d_uint8_image_block_stays_4d_in_0_1(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (40, 3, 8, 8), dtype=np.uint8)
    images[0, 0, 0, 0], images[1, 0, 0, 0] = 0, 255
    np.savez(tmp_path / "images.npz", x=images, y=rng.integers(0, 2, 40))
    fed = build(tmp_path / "images.npz", partition="iid", num_clients=4)
    assert fed.sample_shape == (3, 8, 8)
    assert fed.train_features.dtype == np.float32
    assert (fed.train_features.min(), fed.train_features.max()) == (0.0, 1.0)
    table = read_table(tmp_path / "images.npz")
    np.testing.assert_array_equal(table.train.features, images.astype(np.float32) / np.float32(255))


def test_a_single_integer_block_stays_int64_token_ids(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 80, (30, 12)).astype(np.int16)
    np.savez(tmp_path / "text.npz", tokens=tokens, y=rng.integers(0, 80, 30))
    table = read_table(tmp_path / "text.npz")
    assert table.train.features.dtype == np.int64
    assert table.train.features.shape == (30, 12)
    np.testing.assert_array_equal(table.train.features, tokens)
    assert build(tmp_path / "text.npz", partition="iid", num_clients=3).sample_shape == (12,)


def test_several_columns_are_flattened_and_concatenated_as_float32(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    a, b, c = rng.normal(size=20), rng.integers(0, 9, (20, 2, 2)), rng.integers(0, 256, (20, 3), dtype=np.uint8)
    np.savez(tmp_path / "mixed.npz", a=a, b=b, y=rng.integers(0, 2, 20), c=c)
    table = read_table(tmp_path / "mixed.npz")
    assert table.train.features.shape == (20, 1 + 4 + 3)
    assert table.train.features.dtype == np.float32
    expected = np.concatenate([a[:, None], b.reshape(20, 4), c / 255.0], axis=1).astype(np.float32)
    np.testing.assert_allclose(table.train.features, expected, rtol=1e-6)
    one = read_table(tmp_path / "mixed.npz", feature_columns=["a"])
    assert one.train.features.shape == (20, 1)  # a 1-D column becomes (N, 1)
    picked = read_table(tmp_path / "mixed.npz", feature_columns=["c", "a"])  # the order asked for
    np.testing.assert_allclose(picked.train.features[:, -1], a.astype(np.float32))


def test_keras_style_npz_works_with_the_defaults(tmp_path: Path) -> None:
    fed = build(keras_npz(tmp_path / "mnist.npz"), num_clients=6)
    assert fed.name == "mnist"
    assert fed.sample_shape == (28, 28)
    assert fed.task == "classification"
    assert fed.num_classes == 10
    assert int(fed.train_sizes().sum()) == 120  # dirichlet with equal sizes: 6 x 20
    assert int(fed.test_sizes().sum()) == 30  # the whole own split, shared by label
    assert fed.train_features.max() <= 1.0


def test_csv_with_a_client_column_is_naturally_federated(tmp_path: Path) -> None:
    path = clients_csv(tmp_path / "people.csv")
    assert has_own_clients(str(path), client_column="user")
    fed = build(path, partition="natural", client_column="user", target_column="label", test_fraction=0.0)
    assert fed.client_names == ("u0", "u1", "u2", "u3", "u4")
    assert fed.name == "people"
    assert fed.sample_shape == (2,)  # f1 and f2; the text column and the client column are not features
    assert int(fed.test_sizes().sum()) == 0
    rows = [line.split(",") for line in path.read_text().splitlines()[1:]]
    u3 = [[float(r[1]), float(r[3])] for r in rows if r[0] == "u3"]
    np.testing.assert_allclose(fed.client_train(3)[0], u3, rtol=1e-6)  # file order kept within a client


def test_parquet_and_pq_files(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    parquet = pytest.importorskip("pyarrow.parquet")
    rng = np.random.default_rng(3)
    table = pa.table({"a": rng.normal(size=90), "b": rng.integers(0, 5, 90), "y": rng.integers(0, 3, 90)})
    for name in ("data.parquet", "data2.PQ"):
        parquet.write_table(table, tmp_path / name)
        fed = build(tmp_path / name, partition="iid", num_clients=5, test_fraction=0.0)
        assert fed.train_sizes().tolist() == [18] * 5
        assert fed.sample_shape == (2,)
        assert fed.num_classes == 3


# --- task --------------------------------------------------------------------------------------------------------


def test_task_auto_is_classification_for_whole_numbers_and_regression_otherwise(tmp_path: Path) -> None:
    whole = read_table(clients_csv(tmp_path / "whole.csv"), client_column="user", target_column="label")
    assert (whole.task, whole.num_classes) == ("classification", 3)
    assert whole.train.targets.dtype == np.int64
    fractional = read_table(
        clients_csv(tmp_path / "real.csv", target="real"), client_column="user", target_column="label"
    )
    assert (fractional.task, fractional.num_classes) == ("regression", None)
    assert fractional.train.targets.dtype == np.float32
    np.savez(tmp_path / "negative.npz", x=np.zeros((3, 1)), y=np.array([0, -1, 2]))
    assert read_table(tmp_path / "negative.npz").task == "regression"
    np.savez(tmp_path / "huge.npz", x=np.zeros((2, 1)), y=np.array([0, 2**16]))
    assert read_table(tmp_path / "huge.npz").task == "regression"


def test_num_classes_counts_the_test_rows_too(tmp_path: Path) -> None:
    np.savez(tmp_path / "t.npz", x_train=np.zeros((4, 2)), y_train=[0, 1, 1, 0], x_test=np.zeros((2, 2)), y_test=[3, 0])
    assert read_table(tmp_path / "t.npz").num_classes == 4


def test_explicit_task_that_the_targets_do_not_suit_is_one_error(tmp_path: Path) -> None:
    path = clients_csv(tmp_path / "real.csv", target="real")
    refused("must hold non-negative integer class ids (got", "dataset", path, task="classification", **_PEOPLE)
    (tmp_path / "words.csv").write_text("f,y\n1,cat\n2,dog\n")
    refused("target column 'y' is not numeric (value 'cat')", "dataset", tmp_path / "words.csv", task="regression")


_PEOPLE = {"client_column": "user", "target_column": "label", "partition": "natural"}


def test_regression_with_explicit_task_on_whole_numbers(tmp_path: Path) -> None:
    fed = build(clients_csv(tmp_path / "p.csv"), task="regression", **_PEOPLE)
    assert fed.task == "regression"
    assert fed.num_classes is None


# --- partitions ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("partition", ["iid", "dirichlet", "one-label", "lognormal", "osmd-skewed"])
def test_every_centralised_partition_splits_a_file_like_the_built_in_data_sets(partition: str, tmp_path: Path) -> None:
    path = centralised_npz(tmp_path / "c.npz", rows=400)
    fed = build(path, partition=partition, num_clients=8, seed=3)
    assert fed.num_clients == 8
    assert fed.train_sizes().min() >= 1
    assert fed.sample_shape == (4,)
    assert fed.name == "c"
    # rows are given to at most one client: no training row appears twice
    assert np.unique(fed.train_features, axis=0).shape[0] == fed.train_features.shape[0]
    assert int(fed.test_sizes().sum()) > 0  # a held-out pool: a fifth of each client's size
    np.testing.assert_array_equal(fed.test_sizes(), np.rint(0.2 * fed.train_sizes()))


def test_a_small_held_out_pool_is_shared_without_error(tmp_path: Path) -> None:
    """40 rows hold out a pool of 7; rint(0.2 n_i) over sizes 9, 8, 8, 8 would ask 8: the fraction is fitted."""
    fed = build(centralised_npz(tmp_path / "c.npz", rows=40), partition="iid", num_clients=4)
    assert fed.train_sizes().tolist() == [9, 8, 8, 8]
    assert fed.test_sizes().tolist() == [2, 1, 1, 1]


def test_builtin_sizes_apply_to_a_file(tmp_path: Path) -> None:
    fed = build(centralised_npz(tmp_path / "c.npz", rows=60000), partition="iid", sizes="balanced", test_fraction=0.0)
    assert fed.num_clients == 100


def test_one_label_gives_each_client_one_label(tmp_path: Path) -> None:
    fed = build(centralised_npz(tmp_path / "c.npz"), partition="one-label", num_clients=8)
    assert (fed.label_presence.sum(axis=1) == 1).all()


def test_natural_is_refused_for_a_file_without_the_client_column(tmp_path: Path) -> None:
    path = centralised_npz(tmp_path / "c.npz")
    error = refused("no client column 'client' (its columns: a, b, y)", "partition", path, partition="natural")
    assert error.value == "natural"


def test_a_file_with_the_client_column_refuses_another_partition(tmp_path: Path) -> None:
    path = clients_csv(tmp_path / "p.csv")
    refused("must be 'natural' for", "partition", path, client_column="user", target_column="label")
    refused("whose column 'user' names each row's client", "partition", path, **{**_PEOPLE, "partition": "iid"})


def test_a_regression_file_takes_the_partitions_without_labels(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    np.savez(tmp_path / "r.npz", x=rng.normal(size=(100, 2)), y=rng.normal(size=100))
    fed = build(tmp_path / "r.npz", partition="lognormal", num_clients=5, lognormal_sigma=1.0)
    assert fed.task == "regression"
    assert int(fed.train_sizes().sum()) + int(fed.test_sizes().sum()) <= 100
    refused("one of {'iid', 'lognormal', 'osmd-skewed'} for the regression data file", "partition", tmp_path / "r.npz")


# --- test rows ----------------------------------------------------------------------------------------------------


def test_natural_clients_without_test_rows_keep_a_share_of_their_rows(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    sizes = [1, 2, 6, 12, 30]
    client = np.repeat(np.arange(5), sizes)
    np.savez(tmp_path / "n.npz", client=client, x=rng.normal(size=(client.size, 2)), y=rng.integers(0, 2, client.size))
    fed = build(tmp_path / "n.npz", partition="natural")
    total = np.array(sizes)
    expected = np.minimum(np.rint(total * 0.2 / 1.2), total - 1)  # test rows a fifth of the training size
    np.testing.assert_array_equal(fed.test_sizes(), expected)
    np.testing.assert_array_equal(fed.train_sizes() + fed.test_sizes(), total)
    assert fed.train_sizes().min() >= 1
    # every row is a training or a test row of its own client, exactly once
    rows = np.concatenate([fed.train_features, fed.test_features])
    assert np.unique(rows, axis=0).shape[0] == client.size
    half = build(tmp_path / "n.npz", partition="natural", test_fraction=0.5)
    np.testing.assert_array_equal(half.test_sizes(), np.minimum(np.rint(total / 3), total - 1))
    assert int(build(tmp_path / "n.npz", partition="natural", test_fraction=0.0).test_sizes().sum()) == 0


def test_natural_test_rows_from_test_path_go_to_the_clients_they_name(tmp_path: Path) -> None:
    train = clients_csv(tmp_path / "train.csv")
    test = tmp_path / "test.csv"
    test.write_text("user,f1,note,f2,label\nu4,9.0,a,1.0,2\nu0,8.0,b,1.0,0\nu4,7.0,c,1.0,1\n")
    fed = build(train, test_path=str(test), **_PEOPLE)
    assert fed.test_sizes().tolist() == [1, 0, 0, 0, 2]
    assert fed.client_test(4)[1].tolist() == [2, 1]
    refused(
        "whose clients come with their own test rows",
        "test_fraction",
        train,
        test_path=str(test),
        test_fraction=0.2,
        **_PEOPLE,
    )
    test.write_text("user,f1,note,f2,label\nu9,9.0,a,1.0,2\n")
    refused("client 'u9' has no training rows", "test_path", train, test_path=str(test), **_PEOPLE)
    test.write_text("f1,note,f2,label\n9.0,a,1.0,2\n")
    refused("the test rows have no client column 'user'", "test_path", train, test_path=str(test), **_PEOPLE)


def test_natural_npz_with_its_own_test_members(tmp_path: Path) -> None:
    np.savez(
        tmp_path / "n.npz",
        client_train=[5, 7, 5, 7],
        x_train=np.eye(4),
        y_train=[0, 1, 1, 0],
        client_test=[7, 7],
        x_test=np.ones((2, 4)),
        y_test=[1, 1],
    )
    assert has_own_clients(str(tmp_path / "n.npz"))
    fed = build(tmp_path / "n.npz", partition="natural")
    assert fed.client_names == ("5", "7")
    assert fed.test_sizes().tolist() == [0, 2]


def test_own_split_is_shared_whole_by_label_and_test_fraction_draws_from_it(tmp_path: Path) -> None:
    path = keras_npz(tmp_path / "k.npz", train=400, test=100)
    fed = build(path, partition="dirichlet", alpha=0.5, num_clients=5)
    assert int(fed.test_sizes().sum()) == 100
    # each label's test rows go to the clients that train on it
    test_counts = fed.summary().test_label_counts
    assert test_counts is not None
    assert not (test_counts > 0)[~fed.label_presence].any()
    fifth = build(path, partition="iid", num_clients=5, test_fraction=0.2)
    np.testing.assert_array_equal(fifth.test_sizes(), np.rint(0.2 * fifth.train_sizes()))
    refused("rows of the", "test_fraction", path, partition="iid", num_clients=5, test_fraction=0.9)


def test_regression_own_split_is_shared_by_training_size(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    np.savez(tmp_path / "train.npz", x=rng.normal(size=(300, 2)), y=rng.normal(size=300))
    np.savez(tmp_path / "test.npz", x=rng.normal(size=(30, 2)), y=rng.normal(size=30))
    fed = build(tmp_path / "train.npz", test_path=str(tmp_path / "test.npz"), partition="osmd-skewed", num_clients=4)
    assert fed.task == "regression"
    assert int(fed.test_sizes().sum()) == 30
    share = fed.train_sizes() / fed.train_sizes().sum() * 30
    assert np.all(np.abs(fed.test_sizes() - share) < 1)  # largest remainder of the training shares


def test_a_file_cannot_hold_test_rows_both_ways(tmp_path: Path) -> None:
    path = keras_npz(tmp_path / "k.npz")
    keras_npz(tmp_path / "other.npz")
    refused(
        "which holds its own test rows (members ending in '_test')",
        "test_path",
        path,
        test_path=str(tmp_path / "other.npz"),
    )


# --- determinism ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "partition"), [("c.npz", "dirichlet"), ("n.npz", "natural")])
def test_a_file_federation_is_deterministic_from_its_seed(name: str, partition: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    extra = {"client": rng.integers(0, 6, 200)} if partition == "natural" else {}
    path = centralised_npz(tmp_path / name, **extra)

    def draw(**kwargs: Any) -> Any:
        return build(path, partition=partition, num_clients=6, **kwargs)

    a, b, other = draw(seed=1), draw(seed=1), draw(seed=2)
    for field in ("train_features", "train_targets", "train_indptr", "test_features", "test_indptr"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.test_features, other.test_features)
    spec = FederationSpec(dataset=str(path), partition=partition, num_clients=6, seed=1, per_seed=True)
    first, again = build_federation(spec, replicate=0), build_federation(spec, replicate=0)
    np.testing.assert_array_equal(first.test_features, again.test_features)
    assert not np.array_equal(first.test_features, a.test_features)


# --- errors -------------------------------------------------------------------------------------------------------


def test_missing_and_corrupt_files(tmp_path: Path) -> None:
    refused(f"file not found: {str(tmp_path / 'none.npz')!r}", "dataset", tmp_path / "none.npz")
    (tmp_path / "bad.npz").write_bytes(b"not a zip at all")
    refused("not a readable NPZ archive", "dataset", tmp_path / "bad.npz")
    np.save(tmp_path / "array.npy", np.zeros(3))
    (tmp_path / "array.npz").write_bytes((tmp_path / "array.npy").read_bytes())  # a .npy under an .npz name
    refused("not a readable NPZ archive", "dataset", tmp_path / "array.npz")
    (tmp_path / "bad.csv").write_bytes(b"\xff\xfe\x00\x81\n")
    refused("not a readable CSV file", "dataset", tmp_path / "bad.csv")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 garbage PAR1")
    refused("not a readable Parquet file", "dataset", tmp_path / "bad.parquet")
    (tmp_path / "head.csv").write_text("x,y\n")
    refused("no rows", "dataset", tmp_path / "head.csv")


def test_unknown_columns_list_the_file_columns(tmp_path: Path) -> None:
    path = centralised_npz(tmp_path / "c.npz")
    refused(
        "must be a column of 'c.npz', one of {'a', 'b', 'y'}. Got 'label'", "target_column", path, target_column="label"
    )
    refused(
        "must be a column of 'c.npz', one of {'a', 'b', 'y'}. Got 'z'",
        "feature_columns",
        path,
        feature_columns=["a", "z"],
    )
    with pytest.raises(FedsampleError, match=r"no client column 'user' \(columns: a, b, y\)"):
        load_table(path, client_column="user", target_column="y")


def test_malformed_columns_are_named(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    np.savez(tmp_path / "len.npz", x=rng.normal(size=(5, 2)), y=rng.integers(0, 2, 4))
    refused("columns of different lengths {'x': 5, 'y': 4}", "dataset", tmp_path / "len.npz")
    np.savez(tmp_path / "y2.npz", x=rng.normal(size=(5, 2)), y=rng.integers(0, 2, (5, 2)))
    refused("target column 'y' is not 1-D (shape (5, 2))", "dataset", tmp_path / "y2.npz")
    x = rng.normal(size=(6, 2, 2))
    x[4, 1, 0] = np.inf
    np.savez(tmp_path / "inf.npz", x=x, y=rng.integers(0, 2, 6))
    refused("feature column 'x' has a missing or non-finite value at row 4", "dataset", tmp_path / "inf.npz")
    np.savez(tmp_path / "big.npz", x=np.full((3, 1), 1e300), y=[0, 1, 0])  # beyond float32
    refused("feature column 'x' has a missing or non-finite value at row 0", "dataset", tmp_path / "big.npz")
    (tmp_path / "nan.csv").write_text("f,y\n1,0\n2,\n")
    refused("target column 'y' has a missing or non-finite value at row 1", "dataset", tmp_path / "nan.csv")
    np.savez(tmp_path / "text.npz", x=np.array(["a", "b"]), f=[1.0, 2.0], y=[0, 1])
    refused("feature column 'x' is not numeric (value 'a')", "dataset", tmp_path / "text.npz", feature_columns=["x"])
    np.savez(tmp_path / "objects.npz", x=np.array([{"a": 1}, None], dtype=object), y=[0, 1])
    refused("member 'x' holds Python objects, never unpickled", "dataset", tmp_path / "objects.npz")
    np.savez(tmp_path / "twice.npz", x=np.zeros((2, 1)), x_train=np.zeros((2, 1)), y=[0, 1])
    refused("members name both 'x' and 'x_train'", "dataset", tmp_path / "twice.npz")


def test_test_rows_of_another_feature_shape_are_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "s.npz", x_train=np.zeros((4, 3)), y_train=[0, 1, 0, 1], x_test=np.zeros((2, 4)), y_test=[0, 1])
    refused(
        "the test rows have features of shape (4,) (float32), the training rows (3,)",
        "dataset",
        tmp_path / "s.npz",
        partition="iid",
        num_clients=2,
    )


def test_a_file_too_small_for_the_partition(tmp_path: Path) -> None:
    path = centralised_npz(tmp_path / "c.npz", rows=12)
    refused("at most 10, the training rows of", "num_clients", path, partition="iid", num_clients=11)
    refused(
        "at most 12, the training rows of",
        "num_clients",
        path,
        partition="lognormal",
        num_clients=13,
        test_fraction=0.0,
    )
