"""Clustered sampling (paper 000): Algorithm 1 satisfies Proposition 1 exactly, ClusteredSampler
checks its rows, and clustered sampling beats MD per client (eqs. 17 and 23)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fedsample import (
    ClusteredSampler,
    Federation,
    FedsampleError,
    GroupClusteredSampler,
    MDSampler,
    SizeClusteredSampler,
    exact_statistics,
)
from fedsample.samplers import check_proposition_1, size_clustered_design
from sampler_cases import mixed_rows, unit_matrix

# Sizes mix clients of one sample, moderate ones and huge ones, so that some draws have one
# client holding most of the data (m p_i > 1).
sizes_strategy = st.lists(
    st.one_of(st.just(1), st.integers(1, 20), st.integers(1, 10**9)),
    min_size=1,
    max_size=30,
)
num_sampled_strategy = st.integers(1, 70)


def _algorithm_1_reference(sizes: list[int], m: int) -> np.ndarray:
    """A direct transcription of Algorithm 1 of 000 in Python integers.

    Clients in decreasing size (ties in client order) pour ``m n_i`` units into rows of capacity
    ``M``, one row after the other; ``r'[k, i]`` is what client ``i`` poured into row ``k``.
    """
    total = sum(sizes)
    r = np.zeros((m, len(sizes)), dtype=np.int64)
    k, room = 0, total
    for i in sorted(range(len(sizes)), key=lambda j: -sizes[j]):
        left = m * sizes[i]
        while left > 0:
            take = min(left, room)
            r[k, i] += take
            left -= take
            room -= take
            if room == 0:
                k, room = k + 1, total
    return r


@settings(deadline=None, max_examples=150)
@given(sizes=sizes_strategy, m=num_sampled_strategy)
@example(sizes=[1], m=1)
@example(sizes=[1, 1, 1, 1], m=4)  # n = m, sizes of 1
@example(sizes=[1, 1, 1], m=7)  # m > n
@example(sizes=[10**9, 1, 1, 1, 1], m=3)  # one client holds almost all the data: m p_1 ~ 3
@example(sizes=[5, 5, 5, 5, 5, 5], m=6)
def test_algorithm_1_satisfies_proposition_1_exactly(sizes: list[int], m: int) -> None:
    """Alg. 1 in integers: every row holds exactly M units (eq. 7), column i exactly m n_i (eq. 8),
    and client i appears in at most floor(m p_i) + 2 rows (000, Section 4)."""
    design = size_clustered_design(np.array(sizes, dtype=np.int64), m)
    total = sum(sizes)
    assert design.num_rows == m
    assert design.unit_total == total
    assert design.units is not None
    assert design.units.dtype == np.int64
    assert np.all(design.units > 0)
    units = unit_matrix(design)
    assert units.sum(axis=1).tolist() == [total] * m
    assert units.sum(axis=0).tolist() == [m * s for s in sizes]
    rows_per_client = (units > 0).sum(axis=0)
    bound = [(m * s) // total + 2 for s in sizes]  # floor(m p_i) + 2, in integers
    assert all(r <= b for r, b in zip(rows_per_client.tolist(), bound, strict=True))
    # The float probabilities are the units over M, and pass the library's own Prop. 1 check.
    assert np.array_equal(design.probabilities, design.units / total)
    check_proposition_1(design, np.array(sizes) / total, owner="test")


@settings(deadline=None, max_examples=60)
@given(sizes=st.lists(st.integers(1, 1000), min_size=1, max_size=15), m=st.integers(1, 20))
@example(sizes=[3, 3, 1, 3], m=2)  # ties keep client order
def test_algorithm_1_matches_a_direct_transcription(sizes: list[int], m: int) -> None:
    """The vectorised Alg. 1 gives the same integer rows as a line-by-line reference implementation."""
    design = size_clustered_design(np.array(sizes, dtype=np.int64), m)
    assert np.array_equal(unit_matrix(design), _algorithm_1_reference(sizes, m))


def test_equal_sizes_give_disjoint_rows() -> None:
    """With equal sizes and m dividing n each client sits in exactly one row, with r = m/n."""
    design = size_clustered_design(np.full(100, 500, dtype=np.int64), 10)
    units = unit_matrix(design)
    assert np.all((units > 0).sum(axis=0) == 1)
    assert np.all(units[units > 0] == 500 * 10)


def test_size_clustered_rejects_overflowing_units() -> None:
    with pytest.raises(FedsampleError, match="'num_sampled'") as info:
        size_clustered_design(np.array([2**40, 2**40]), 2**22)
    assert info.value.parameter == "num_sampled"


def test_size_clustered_with_uniform_importance_uses_unit_masses() -> None:
    """Importance 'uniform' gives every client m units: column i sums to m * (1/n) in probability."""
    federation = Federation.from_sizes([1, 50, 7, 3, 3], importance="uniform")
    sampler = SizeClusteredSampler()
    stats = exact_statistics(sampler.design(sampler.init(federation, 2)), federation.importances)
    assert np.allclose(stats.mean_weights, 0.2, rtol=0, atol=1e-15)


def test_size_clustered_with_float_importances_is_unbiased() -> None:
    """Importances that are not ratios of integers are rounded to 2**-40 resolution: bias below 1e-9."""
    federation = Federation.from_importances([0.1, 0.2 / 3, 0.4 / 3, 0.7])
    sampler = SizeClusteredSampler()
    state = sampler.init(federation, 3)
    stats = exact_statistics(sampler.design(state), federation.importances)
    assert stats.max_bias < 1e-9
    assert not stats.biased


def test_clustered_from_algorithm_1_rows_equals_clustered_size() -> None:
    """ClusteredSampler built from Alg. 1's dense rows has the statistics of SizeClusteredSampler."""
    federation = Federation.from_sizes([9, 1, 4, 4, 2, 30])
    m = 4
    size_sampler = SizeClusteredSampler()
    size_stats = exact_statistics(size_sampler.design(size_sampler.init(federation, m)), federation.importances)
    rows = size_sampler.design(size_sampler.init(federation, m)).dense_rows()
    sampler = ClusteredSampler(rows=rows)
    stats = exact_statistics(sampler.design(sampler.init(federation, m)), federation.importances)
    np.testing.assert_allclose(stats.var_weights, size_stats.var_weights, rtol=0, atol=1e-15)
    np.testing.assert_allclose(stats.p_included, size_stats.p_included, rtol=0, atol=1e-15)
    assert stats.p_all_distinct == pytest.approx(size_stats.p_all_distinct, abs=1e-15)


def test_clustered_accepts_scipy_sparse_rows() -> None:
    """A SciPy sparse row matrix gives the same design as the dense one."""
    federation = Federation.from_sizes([9, 1, 4, 4, 2, 30])
    rows = mixed_rows(federation, 3)
    dense = ClusteredSampler(rows=rows)
    sparse = ClusteredSampler(rows=scipy.sparse.csr_matrix(rows))
    a = dense.design(dense.init(federation, 3)).dense_rows()
    b = sparse.design(sparse.init(federation, 3)).dense_rows()
    np.testing.assert_array_equal(a, b)


def _valid_rows() -> tuple[Federation, np.ndarray]:
    federation = Federation.from_sizes([1, 2, 3, 4])
    return federation, mixed_rows(federation, 2)


def _break_row_sum(rows: np.ndarray) -> np.ndarray:
    rows[1, 0] += 0.05
    return rows


def _break_column(rows: np.ndarray) -> np.ndarray:
    # Moving mass between clients in both rows keeps the rows at one but breaks eq. 8.
    rows[:, 0] += 0.05
    rows[:, 1] -= 0.05
    return rows


def _negative_entry(rows: np.ndarray) -> np.ndarray:
    # Rows and columns still sum correctly, but one probability is negative.
    rows[0, 0] -= 0.5
    rows[1, 0] += 0.5
    rows[0, 3] += 0.5
    rows[1, 3] -= 0.5
    return rows


def _nan_entry(rows: np.ndarray) -> np.ndarray:
    rows[0, 2] = np.nan
    return rows


@pytest.mark.parametrize(
    ("breaker", "pattern"),
    [
        (_break_row_sum, r"rows summing to 1 \(000, eq. 7\)\. Got row 1"),
        (_break_column, r"column i summing to m \* p_i \(000, eq. 8\)\. Got column 0"),
        (_negative_entry, "non-negative"),
        (_nan_entry, "non-negative|finite"),
        (lambda rows: rows[:, :3], r"shape \(2, 3\)"),
        (lambda rows: rows[:1], r"shape \(1, 4\)"),
        (lambda rows: rows[0], r"shape \(4,\)"),
    ],
    ids=["row-sum", "column-sum", "negative", "nan", "too-few-clients", "too-few-rows", "one-dimensional"],
)
def test_clustered_rows_are_checked_against_proposition_1(breaker: object, pattern: str) -> None:
    """init rejects rows breaking 000's Prop. 1 (or of the wrong shape), naming 'rows' and the culprit."""
    federation, rows = _valid_rows()
    bad = breaker(rows.copy())  # type: ignore[operator]
    sampler = ClusteredSampler(rows=bad)
    with pytest.raises(FedsampleError, match=pattern) as info:
        sampler.init(federation, 2)
    assert info.value.parameter == "rows"
    assert "'rows'" in str(info.value)


@settings(deadline=None, max_examples=60)
@given(
    sizes=st.lists(st.one_of(st.integers(1, 10), st.integers(1, 10**6)), min_size=1, max_size=25),
    m=st.integers(1, 40),
    uniform=st.booleans(),
)
@example(sizes=[1000, 1, 1, 1], m=3, uniform=False)
def test_clustered_size_beats_md_for_every_client(sizes: list[int], m: int, uniform: bool) -> None:
    """Per client, Var[w_i] of clustered-size <= MD's (000, eq. 17) and P(i in S) >= MD's (eq. 23)."""
    federation = Federation.from_sizes(sizes, importance="uniform" if uniform else "size")
    md, clustered = MDSampler(), SizeClusteredSampler()
    md_stats = exact_statistics(md.design(md.init(federation, m)), federation.importances)
    cl_stats = exact_statistics(clustered.design(clustered.init(federation, m)), federation.importances)
    assert np.all(cl_stats.var_weights <= md_stats.var_weights * (1 + 1e-12) + 1e-18)
    assert np.all(cl_stats.p_included >= md_stats.p_included - 1e-12)
    # Both unbiased (000, Prop. 1).
    assert cl_stats.max_bias < 1e-12
    assert md_stats.max_bias < 1e-12


def test_group_clustering_on_mnist_shards_is_target_sampling() -> None:
    """000's MNIST shards: 100 equal clients, ten per digit, m = 10. Rows laid out by digit give one
    client of every digit in every round (000's ideal "target" sampling), each client with P = 1/10."""
    digits = np.random.default_rng(0).permutation(np.repeat(np.arange(10), 10))
    federation = Federation.from_sizes([500] * 100)
    sampler = GroupClusteredSampler(groups=digits)
    state = sampler.init(federation, 10)
    for t in range(50):
        clients = sampler.sample(state, np.random.default_rng(t)).clients
        assert sorted(digits[clients].tolist()) == list(range(10))
    stats = exact_statistics(sampler.design(state), federation.importances)
    np.testing.assert_allclose(stats.p_included, 0.1)


def test_group_clustering_needs_one_integer_group_per_client() -> None:
    federation = Federation.from_sizes([3, 4, 5])
    for groups in (None, [0, 1], [0.5, 1.0, 2.0]):
        with pytest.raises(FedsampleError) as info:
            GroupClusteredSampler(groups=groups).init(federation, 2)
        assert info.value.parameter == "groups"


def test_random_ties_break_the_link_between_client_ids_and_rows() -> None:
    """Equal sizes, ids numbered label by label (ten per digit): with ties by index each row is one
    digit's clients (target sampling); with random ties the rows mix digits, and Prop. 1 still holds."""
    federation = Federation.from_sizes([500] * 100)
    digits = np.repeat(np.arange(10), 10)
    by_index = SizeClusteredSampler().init(federation, 10).design
    mixed = SizeClusteredSampler(ties="random", tie_seed=3).init(federation, 10).design
    for design, one_digit_rows in ((by_index, 10), (mixed, 0)):
        rows = np.repeat(np.arange(design.num_rows), np.diff(design.indptr))
        digits_per_row = [np.unique(digits[design.indices[rows == k]]).size for k in range(10)]
        assert sum(d == 1 for d in digits_per_row) == one_digit_rows
        check_proposition_1(design, federation.importances, owner="test")
    # Larger clients still come first: ties only reorder clients of one size.
    sizes = np.array([5, 1, 5, 1, 5, 1])
    design = SizeClusteredSampler(ties="random", tie_seed=1).init(Federation.from_sizes(sizes), 2).design
    assert set(design.indices[: np.diff(design.indptr)[0]].tolist()) <= {0, 2, 4}  # row 0: 18 of 30 units
    assert SizeClusteredSampler(ties="random", tie_seed=5).init(federation, 10).design.indices.tolist() == (
        SizeClusteredSampler(ties="random", tie_seed=5).init(federation, 10).design.indices.tolist()
    )


@pytest.mark.parametrize(("params", "name"), [({"ties": "sorted"}, "ties"), ({"tie_seed": -1}, "tie_seed")])
def test_size_clustered_rejects_bad_tie_settings(params: dict[str, object], name: str) -> None:
    with pytest.raises(FedsampleError) as info:
        SizeClusteredSampler(**params)  # type: ignore[arg-type]
    assert info.value.parameter == name
    assert repr(params[name]) in str(info.value) or str(params[name]) in str(info.value)
