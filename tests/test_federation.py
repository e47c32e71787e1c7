"""Federations: validated sizes, importances p_i = n_i / M or 1 / n, explicit importances, built-ins."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedsample import BUILTIN_FEDERATIONS, Federation, FedsampleError, builtin_sizes

BAD_SIZES = [
    pytest.param([3, 0, 2], "0", id="zero"),
    pytest.param([3, -4, 2], "-4", id="negative"),
    pytest.param([3, 2.5], "2.5", id="non-integer"),
    pytest.param([3, float("nan")], "nan", id="nan"),
    pytest.param([3, float("inf")], "inf", id="inf"),
    pytest.param(np.array([1.0, -np.inf]), "-inf", id="minus-inf"),
    pytest.param([], "[]", id="empty"),
    pytest.param(np.array([], dtype=np.int64), "array([])", id="empty-array"),
    pytest.param([[1, 2], [3, 4]], "[[1, 2], [3, 4]]", id="2-d"),
    pytest.param(5, "5", id="scalar"),
    pytest.param("1,2,3", "'1,2,3'", id="string"),
    pytest.param(["1", "2"], "['1', '2']", id="list-of-strings"),
    pytest.param([1, None], "[1, None]", id="none"),
    pytest.param([True, False], "[True, False]", id="bools"),
    pytest.param([3, True], "[3, True]", id="bool-among-ints"),
    pytest.param(True, "True", id="bool"),
    pytest.param([2**62, 2**62], "[4611686018427387904, 4611686018427387904]", id="total-overflows-int64"),
]


@pytest.mark.parametrize(("sizes", "shown"), BAD_SIZES)
def test_from_sizes_rejects_bad_sizes(sizes: Any, shown: str) -> None:
    """Bad sizes raise FedsampleError (a ValueError) naming 'sizes' and showing the bad value."""
    with pytest.raises(FedsampleError) as info:
        Federation.from_sizes(sizes)
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert info.value.parameter == "sizes"
    assert "'sizes'" in message
    assert f"Got {shown}" in message


def test_from_sizes_names_the_index_of_a_bad_entry() -> None:
    with pytest.raises(FedsampleError, match="Got -4 at index 1 instead"):
        Federation.from_sizes([3, -4, 2])


@pytest.mark.parametrize("sizes", [[100, 250, 500], (100, 250, 500), np.array([100, 250, 500], dtype=np.int32)])
def test_from_sizes_importances_are_proportional_to_size(sizes: Any) -> None:
    """Default importances are p_i = n_i / M, with integer masses equal to the sizes."""
    federation = Federation.from_sizes(sizes)
    assert federation.sizes.dtype == np.int64
    assert federation.sizes.tolist() == [100, 250, 500]
    assert federation.total_size == 850
    assert federation.num_clients == 3
    np.testing.assert_allclose(federation.importances, np.array([100, 250, 500]) / 850, rtol=1e-15)
    assert federation.importance_masses is not None
    assert federation.importance_masses.tolist() == [100, 250, 500]


def test_from_sizes_accepts_whole_floats() -> None:
    assert Federation.from_sizes([2.0, 3.0]).sizes.tolist() == [2, 3]


def test_uniform_importance_is_one_over_n() -> None:
    """importance='uniform' gives p_i = 1/n whatever the sizes, with unit masses."""
    federation = Federation.from_sizes([1, 10, 1000, 7], importance="uniform")
    np.testing.assert_array_equal(federation.importances, np.full(4, 0.25))
    assert federation.importance_masses is not None
    assert federation.importance_masses.tolist() == [1, 1, 1, 1]
    assert federation.sizes.tolist() == [1, 10, 1000, 7]


def test_unknown_importance_mode_raises() -> None:
    with pytest.raises(FedsampleError, match=r"'importance'.*Got 'equal' instead") as info:
        Federation.from_sizes([1, 2], importance="equal")  # type: ignore[arg-type]
    assert info.value.parameter == "importance"


def test_federation_arrays_are_read_only() -> None:
    federation = Federation.from_sizes([1, 2, 3])
    for array in (federation.sizes, federation.importances, federation.importance_masses):
        assert array is not None
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 5


def test_from_sizes_does_not_alias_the_input() -> None:
    sizes = np.array([1, 2, 3], dtype=np.int64)
    federation = Federation.from_sizes(sizes)
    sizes[0] = 100
    assert federation.sizes.tolist() == [1, 2, 3]


def test_from_importances() -> None:
    """Explicit importances are kept (renormalised), sizes default to one sample per client."""
    federation = Federation.from_importances([0.2, 0.3, 0.5])
    np.testing.assert_allclose(federation.importances, [0.2, 0.3, 0.5], rtol=1e-15)
    assert federation.sizes.tolist() == [1, 1, 1]
    assert federation.importance_masses is None
    with_sizes = Federation.from_importances([0.5, 0.5], sizes=[10, 30])
    assert with_sizes.sizes.tolist() == [10, 30]


@pytest.mark.parametrize(
    ("importances", "shown"),
    [
        pytest.param([0.5, 0.6], "values summing to 1.1", id="sum"),
        pytest.param([1.2, -0.2], "[1.2, -0.2]", id="negative"),
        pytest.param([1.0, 0.0], "[1.0, 0.0]", id="zero"),
        pytest.param([0.5, float("nan")], "[0.5, nan]", id="nan"),
        pytest.param([], "[]", id="empty"),
        pytest.param([[0.5, 0.5]], "[[0.5, 0.5]]", id="2-d"),
        pytest.param(["a", "b"], "['a', 'b']", id="strings"),
    ],
)
def test_from_importances_rejects_bad_importances(importances: Any, shown: str) -> None:
    with pytest.raises(FedsampleError) as info:
        Federation.from_importances(importances)
    assert info.value.parameter == "importances"
    assert "'importances'" in str(info.value)
    assert f"Got {shown}" in str(info.value)


def test_from_importances_checks_sizes() -> None:
    with pytest.raises(FedsampleError, match=r"'sizes'.*Got 3 instead") as info:
        Federation.from_importances([0.5, 0.5], sizes=[1, 2, 3])
    assert info.value.parameter == "sizes"
    with pytest.raises(FedsampleError, match=r"'sizes'.*Got 0 at index 1") as info:
        Federation.from_importances([0.5, 0.5], sizes=[1, 0])
    assert info.value.parameter == "sizes"


def test_builtin_unbalanced_is_paper_000_cifar_federation() -> None:
    """100 clients: 10/30/30/20/10 of them holding 100/250/500/750/1000 samples (000, Section 6)."""
    sizes = builtin_sizes("unbalanced")
    assert sizes.size == 100
    values, counts = np.unique(sizes, return_counts=True)
    assert values.tolist() == [100, 250, 500, 750, 1000]
    assert counts.tolist() == [10, 30, 30, 20, 10]


def test_builtin_balanced() -> None:
    sizes = builtin_sizes("balanced")
    assert sizes.tolist() == [500] * 100


def test_seeded_builtins_are_reproducible() -> None:
    """Random built-ins depend only on the seed: same seed same sizes, another seed other sizes."""
    a = builtin_sizes("osmd-skewed", seed=3)
    b = builtin_sizes("osmd-skewed", seed=3)
    c = builtin_sizes("osmd-skewed", seed=4)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert a.size == 500
    assert set(np.unique(a).tolist()) <= {1, 10, 30, 100}
    assert not a.flags.writeable


@pytest.mark.parametrize("name", list(BUILTIN_FEDERATIONS))
def test_every_builtin_makes_a_federation(name: str) -> None:
    federation = Federation.from_sizes(builtin_sizes(name, seed=1))
    assert federation.importances.sum() == pytest.approx(1.0)


def test_unknown_builtin_raises() -> None:
    with pytest.raises(FedsampleError, match=r"'federation'.*Got 'mnist' instead") as info:
        builtin_sizes("mnist")
    assert info.value.parameter == "federation"


@pytest.mark.parametrize("seed", [-1, 1.5, True])
def test_builtin_rejects_bad_seed(seed: Any) -> None:
    with pytest.raises(FedsampleError, match="'seed'"):
        builtin_sizes("osmd-skewed", seed=seed)
