"""Populations given as memory-mapped size files, and the population-scale samplers.

Statistical checks are chi-square goodness-of-fit tests against the library's own samplers'
exact distributions, each at a false-failure rate of 1e-4 with a fixed seed.
"""

from __future__ import annotations

import pickle
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import chi2

from fedsample import Federation, FedsampleError, MDSampler, SizeClusteredSampler, UniformSampler
from fedsample.participation.availability import BernoulliAvailability
from fedsample.samplers.population.samplers import (
    Population,
    PopulationClusteredSampler,
    PopulationMDSampler,
    PopulationUniformSampler,
    open_population,
    order_by_size,
    write_sizes_file,
)
from fedsample.stats.montecarlo import monte_carlo_statistics

FALSE_FAILURE = 1e-4
SAMPLERS = [PopulationMDSampler, PopulationUniformSampler, PopulationClusteredSampler]


def lognormal_sizes(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.maximum(1, np.round(rng.lognormal(3.0, 1.2, size=n))).astype(np.int64)


@pytest.fixture
def small() -> np.ndarray:
    # Ties, and one client holding more than M/m (it fills a clustered row of its own).
    sizes = np.array([5, 3, 3, 8, 1, 1, 2, 7, 3, 4, 6, 2, 9, 1, 5, 3, 2, 2, 4, 7, 1, 8, 3, 3, 6, 2, 1, 4, 5, 60])
    return sizes


def chi_square_ok(observed: np.ndarray, expected: np.ndarray) -> bool:
    """Pearson's statistic below its (1 - FALSE_FAILURE) quantile; no draw outside the support."""
    support = expected > 0
    if observed[~support].sum():
        return False
    if support.sum() == 1:  # a row holding one client: nothing left to test
        return True
    statistic = float((((observed - expected) ** 2)[support] / expected[support]).sum())
    return statistic < chi2.ppf(1 - FALSE_FAILURE, int(support.sum()) - 1)


# --- files ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "dtype"), [("sizes.npy", "int32"), ("sizes.npy", "int64"), ("sizes.bin", "int32")])
def test_size_files_round_trip_as_memory_maps(tmp_path: Path, name: str, dtype: str) -> None:
    sizes = lognormal_sizes(200_000, seed=1)
    path = write_sizes_file(tmp_path / name, sizes, dtype=dtype)
    population = open_population(path, dtype=None if name.endswith(".npy") else dtype)
    assert isinstance(population.sizes, np.memmap)
    assert population.sizes.dtype == np.dtype(dtype)
    assert np.array_equal(population.sizes, sizes)
    assert population.total == int(sizes.sum())
    assert population.num_clients == sizes.size


@pytest.mark.parametrize("name", ["sizes.npy", "sizes.bin"])
def test_a_file_backed_state_pickles_by_reference_to_its_file(tmp_path: Path, name: str) -> None:
    sizes = lognormal_sizes(100_000, seed=9)
    population = open_population(write_sizes_file(tmp_path / name, sizes, dtype="int32"), dtype="int32")
    sampler = PopulationClusteredSampler()
    state = sampler.init(population, 100)
    restored = pickle.loads(pickle.dumps(state))
    assert len(pickle.dumps(population)) < 1000
    assert isinstance(restored.population.sizes, np.memmap)
    assert np.array_equal(restored.population.sizes, sizes)
    assert restored.population.total == population.total
    first, second = (sampler.sample(s, np.random.default_rng(1)) for s in (state, restored))
    assert np.array_equal(first.clients, second.clients)


def test_raw_int64_file_is_little_endian(tmp_path: Path) -> None:
    path = tmp_path / "sizes.raw"
    np.array([7, 300, 2**40], dtype="<i8").tofile(path)
    assert open_population(path, dtype="int64").sizes.tolist() == [7, 300, 2**40]


def _save(path: Path, array: np.ndarray) -> Path:
    if path.suffix == ".npy":
        np.save(path, array)
    else:
        array.tofile(path)
    return path


@pytest.mark.parametrize(
    ("name", "content", "dtype", "parameter", "message"),
    [
        ("missing.npy", None, None, "path", r"'path' parameter of open_population must be an existing sizes file"),
        ("float.npy", np.ones(4), None, "sizes", r"int32 or int64 sizes in '.*float.npy'. Got 'dtype float64'"),
        ("flat.npy", np.ones((2, 3), dtype=np.int64), None, "sizes", r"1-D array of sizes .*Got 'shape \(2, 3\)'"),
        ("zero.npy", np.array([4, 1, 2, 0, 5]), None, "sizes", r"positive integers in .*Got 0 at index 3 instead"),
        ("minus.bin", np.array([4, -5], dtype="<i4"), "int32", "sizes", r"Got -5 at index 1 instead"),
        ("raw.bin", np.array([4, 5], dtype="<i4"), None, "dtype", r"'dtype'.*\{'int32', 'int64'\} for the raw file"),
        ("raw.bin", np.array([4, 5], dtype="<i4"), "float32", "dtype", r"'dtype'.*Got 'float32'"),
        (
            "odd.bin",
            np.arange(7, dtype=np.uint8),
            "int32",
            "path",
            r"whole int32 values, at least one in .*odd.bin'. Got '7 bytes'",
        ),
        ("empty.bin", np.zeros(0, dtype=np.uint8), "int64", "path", r"at least one.*Got '0 bytes"),
        ("kind.npy", np.array([1, 2], dtype=np.int32), "int64", "dtype", r"the dtype stored in .*\(int32\)"),
    ],
)
def test_open_population_rejects_bad_files(
    tmp_path: Path, name: str, content: Any, dtype: str | None, parameter: str, message: str
) -> None:
    path = tmp_path / name if content is None else _save(tmp_path / name, content)
    with pytest.raises(FedsampleError, match=message) as info:
        open_population(path, dtype=dtype)
    assert info.value.parameter == parameter


@pytest.mark.parametrize(
    ("sizes", "dtype", "message"),
    [
        (np.array([1.0, 2.0]), "int64", r"'sizes'.*integers. Got 'dtype float64'"),
        (np.array([1, 2**31]), "int32", r"'sizes'.*fit in int32. Got 2147483648"),
        (np.array([3, 0]), "int64", r"'sizes'.*positive integers. Got 0 at index 1"),
        (np.array([3, 5 - 2**32]), "int32", r"'sizes'.*positive integers. Got -4294967291 at index 1"),
        (np.array([3, 1]), "uint8", r"'dtype'.*Got 'uint8'"),
    ],
)
def test_write_sizes_file_rejects_bad_sizes(tmp_path: Path, sizes: np.ndarray, dtype: str, message: str) -> None:
    with pytest.raises(FedsampleError, match=message):
        write_sizes_file(tmp_path / "sizes.npy", sizes, dtype=dtype)
    assert not (tmp_path / "sizes.npy").exists()


# --- agreement with the library's samplers -------------------------------------------------------------------


def test_md_draws_follow_the_library_md_row(small: np.ndarray) -> None:
    m, rounds = 5, 2000
    row = MDSampler().init(Federation.from_sizes(small), m).design.dense_rows()[0]
    sampler = PopulationMDSampler()
    state = sampler.init(Population.from_sizes(small), m)
    rng = np.random.default_rng(11)
    counts = np.zeros(small.size)
    for _ in range(rounds):
        selection = sampler.sample(state, rng)
        assert np.allclose(selection.weights, 1 / m)
        counts += np.bincount(selection.clients, minlength=small.size)
    assert chi_square_ok(counts, rounds * m * row)


def test_clustered_rows_are_the_library_algorithm_1_rows(small: np.ndarray) -> None:
    m, rounds = 5, 2000
    rows = SizeClusteredSampler().init(Federation.from_sizes(small), m).design.dense_rows()
    sampler = PopulationClusteredSampler()
    state = sampler.init(Population.from_sizes(small), m)
    assert np.array_equal(state.order, np.argsort(-small, kind="stable"))
    rng = np.random.default_rng(12)
    counts = np.zeros((m, small.size))
    for _ in range(rounds):
        selection = sampler.sample(state, rng)
        counts[np.arange(m), selection.clients] += 1  # entry k is row k's draw
    assert counts[0, small.size - 1] == rounds  # the client with m p_i >= 1 fills row 0 alone
    assert all(chi_square_ok(counts[k], rounds * rows[k]) for k in range(m))


def test_uniform_inclusions_and_weights_are_the_library_uniform_ones(small: np.ndarray) -> None:
    m, rounds = 7, 2000
    design = UniformSampler().init(Federation.from_sizes(small), m).design
    sampler = PopulationUniformSampler()
    state = sampler.init(Population.from_sizes(small), m)
    rng = np.random.default_rng(13)
    counts = np.zeros(small.size)
    for _ in range(rounds):
        selection = sampler.sample(state, rng)
        assert np.unique(selection.clients).size == m
        assert np.allclose(selection.weights, design.weights[selection.clients], rtol=1e-12)
        counts += np.bincount(selection.clients, minlength=small.size)
    # Inclusion counts of a fixed-size design are negatively correlated: Pearson's statistic is
    # then stochastically smaller than chi-square, so the test is conservative.
    assert chi_square_ok(counts, np.full(small.size, rounds * m / small.size))


@pytest.mark.parametrize("sampler_class", SAMPLERS)
def test_weights_are_unbiased_through_the_monte_carlo_estimator(sampler_class: type, small: np.ndarray) -> None:
    """The contract holds: the library's estimator runs on them and finds ``E[w_i] = p_i``."""
    sampler = sampler_class()
    state = sampler.init(Federation.from_sizes(small), 6)
    mc = monte_carlo_statistics(sampler, state, np.random.default_rng(14), num_rounds=2000)
    # 30 clients within 4.5 standard errors: false-failure rate below 30 * 7e-6 = 2e-4.
    assert np.all(mc.mean_weights.deviation(small / small.sum()) < 4.5)


# --- availability ------------------------------------------------------------------------------------------


def test_md_among_available_is_md_conditioned_on_availability(small: np.ndarray) -> None:
    m, rounds, round_index = 5, 1000, 4
    availability = BernoulliAvailability(0.6, seed=3)
    available = availability.available(round_index, np.arange(small.size))
    target = np.where(available, small, 0) / small[available].sum()
    sampler = PopulationMDSampler()
    state = sampler.init(Population.from_sizes(small), m)
    rng = np.random.default_rng(21)
    counts = np.zeros(small.size)
    for _ in range(rounds):
        clients = sampler.sample(state, rng, availability=availability, round=round_index).clients
        counts += np.bincount(clients, minlength=small.size)
    assert chi_square_ok(counts, rounds * m * target)


@pytest.mark.parametrize(
    ("others_available", "options", "availability_seed", "round_index", "seed"),
    [
        pytest.param(0.6, {}, 5, 2, 22, id="drawn"),
        # With max_tries=1 most rows end in the exact scan: the law must not change.
        pytest.param(0.2, {"max_tries": 1}, 6, 6, 26, id="scanned-after-max-tries"),
    ],
)
def test_clustered_rows_among_available_are_conditioned_row_by_row(
    small: np.ndarray,
    others_available: float,
    options: dict[str, int],
    availability_seed: int,
    round_index: int,
    seed: int,
) -> None:
    m, rounds = 5, 1000
    # The large client (alone in row 0) is available in every round.
    probability = np.where(np.arange(small.size) == small.size - 1, 1.0, others_available)
    availability = BernoulliAvailability(probability, seed=availability_seed)
    available = availability.available(round_index, np.arange(small.size))
    rows = SizeClusteredSampler().init(Federation.from_sizes(small), m).design.dense_rows() * available
    assert np.all(rows.sum(axis=1) > 0)
    rows /= rows.sum(axis=1, keepdims=True)
    sampler = PopulationClusteredSampler(**options)
    state = sampler.init(Population.from_sizes(small), m)
    rng = np.random.default_rng(seed)
    counts = np.zeros((m, small.size))
    for _ in range(rounds):
        clients = sampler.sample(state, rng, availability=availability, round=round_index).clients
        counts[np.arange(m), clients] += 1
    assert all(chi_square_ok(counts[k], rounds * rows[k]) for k in range(m))


def test_uniform_among_available_includes_each_available_client_equally(small: np.ndarray) -> None:
    m, rounds, round_index = 6, 1000, 9
    availability = BernoulliAvailability(0.7, seed=8)
    available = availability.available(round_index, np.arange(small.size))
    sampler = PopulationUniformSampler()
    state = sampler.init(Population.from_sizes(small), m)
    rng = np.random.default_rng(23)
    counts = np.zeros(small.size)
    for _ in range(rounds):
        clients = sampler.sample(state, rng, availability=availability, round=round_index).clients
        assert np.unique(clients).size == m
        counts += np.bincount(clients, minlength=small.size)
    assert chi_square_ok(counts, np.where(available, rounds * m / available.sum(), 0.0))


@pytest.mark.parametrize("sampler_class", SAMPLERS)
def test_every_drawn_client_is_available_in_its_round(sampler_class: type) -> None:
    # m = 20 clustered rows hold 30 clients or more each: one with none available is unlikely (< 1e-4).
    sizes = lognormal_sizes(50_000, seed=2)
    availability = BernoulliAvailability(0.3, seed=1)
    sampler = sampler_class()
    state = sampler.init(Population.from_sizes(sizes), 20)
    rng = np.random.default_rng(24)
    for round_index in range(5):
        clients = sampler.sample(state, rng, availability=availability, round=round_index).clients
        assert clients.size == 20
        assert availability.available(round_index, clients).all()


@pytest.mark.parametrize("sampler_class", [PopulationMDSampler, PopulationUniformSampler])
def test_one_percent_availability_is_enough(sampler_class: type) -> None:
    """Candidates per try grow with the rejections, so a rare available client is still found."""
    availability = BernoulliAvailability(0.01, seed=7)
    sampler = sampler_class()
    state = sampler.init(Population.from_sizes(lognormal_sizes(200_000, seed=8)), 300)
    clients = sampler.sample(state, np.random.default_rng(27), availability=availability, round=1).clients
    assert clients.size == 300
    assert availability.available(1, clients).all()


@pytest.mark.parametrize("sampler_class", [PopulationMDSampler, PopulationUniformSampler])
def test_a_round_without_available_clients_fails_after_max_tries(sampler_class: type, small: np.ndarray) -> None:
    sampler = sampler_class(max_tries=3)
    state = sampler.init(Population.from_sizes(small), 4)
    with pytest.raises(FedsampleError, match=r"'availability'.*round 7.*after 3 tries \(max_tries\)") as info:
        sampler.sample(
            state, np.random.default_rng(0), availability=BernoulliAvailability(np.zeros(small.size)), round=7
        )
    assert info.value.parameter == "availability"


def test_clustered_row_layout_is_exactly_algorithm_1(small: np.ndarray) -> None:
    m = 5
    rows = SizeClusteredSampler().init(Federation.from_sizes(small), m).design.dense_rows()
    state = PopulationClusteredSampler().init(Population.from_sizes(small), m)
    for k in range(m):
        clients, units = state.row(k)
        dense = np.zeros(small.size)
        np.add.at(dense, clients, units / small.sum())
        assert np.allclose(dense, rows[k], rtol=0, atol=1e-15)


def test_a_clustered_row_without_available_clients_raises_or_is_skipped(small: np.ndarray) -> None:
    # The largest client (alone in row 0) is never available; every other client always is.
    availability = BernoulliAvailability(np.where(np.arange(small.size) == small.size - 1, 0.0, 1.0))
    state = PopulationClusteredSampler().init(Population.from_sizes(small), 5)
    with pytest.raises(FedsampleError, match=r"'availability'.*every row of round 2.*Got row 0 with no available"):
        PopulationClusteredSampler().sample(state, np.random.default_rng(0), availability=availability, round=2)
    selection = PopulationClusteredSampler(empty_rows="skip").sample(
        state, np.random.default_rng(0), availability=availability, round=2
    )
    assert selection.clients.size == 4
    assert small.size - 1 not in selection.clients
    assert np.allclose(selection.weights, 1 / 5)


def test_uniform_fails_when_fewer_than_m_clients_are_available(small: np.ndarray) -> None:
    availability = BernoulliAvailability(0.5, seed=4)
    num_available = int(availability.available(0, np.arange(small.size)).sum())
    sampler = PopulationUniformSampler()
    state = sampler.init(Population.from_sizes(small), num_available + 1)
    with pytest.raises(
        FedsampleError, match=rf"at least m = {num_available + 1} clients available.*Got {num_available}"
    ):
        sampler.sample(state, np.random.default_rng(0), availability=availability, round=0)


# --- memory and set-up -------------------------------------------------------------------------------------


@pytest.mark.parametrize("sampler_class", SAMPLERS)
def test_a_draw_allocates_memory_in_m_not_n(tmp_path: Path, sampler_class: type) -> None:
    """A draw of m = 1000 among 10^6 clients allocates O(m): far less than one byte per client."""
    n, m = 1_000_000, 1000
    path = write_sizes_file(tmp_path / "sizes.npy", lognormal_sizes(n, seed=3), dtype="int32")
    sampler = sampler_class()
    state = sampler.init(open_population(path), m)
    availability = BernoulliAvailability(0.7, seed=2)
    rng = np.random.default_rng(25)
    sampler.sample(state, rng, availability=availability, round=0)  # warm up caches
    tracemalloc.start()
    try:
        for round_index in range(1, 4):
            sampler.sample(state, rng, availability=availability, round=round_index)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < n // 4  # 250 kB; any per-client array would take at least 1 MB
    held = [v.nbytes for v in vars(state).values() if isinstance(v, np.ndarray) and not isinstance(v, np.memmap)]
    assert sum(held) <= 8 * n + 2**16  # at most 8 bytes per client beyond the mapped file


def test_clustered_order_is_int32_and_distinct_sizes_are_runs() -> None:
    sizes = np.array([3, 9, 3, 1, 9, 9])
    state = PopulationClusteredSampler().init(Population.from_sizes(sizes), 2)
    assert state.order.dtype == np.int32
    assert state.order.tolist() == [1, 4, 5, 0, 2, 3]
    assert state.run_sizes.tolist() == [9, 3, 1]
    assert state.run_positions.tolist() == [0, 3, 5]
    assert state.run_masses.tolist() == [0, 27, 33]


@pytest.mark.parametrize(
    "sizes",
    [
        np.random.default_rng(4).integers(1, 200_000, size=300_000),  # > 65536 distinct sizes: two radix passes
        lognormal_sizes(100_000, seed=10),  # few distinct sizes: one pass
        np.array([2**40, 5, 2**40, 1, 7, 5]),  # too spread out for a size table: comparison sort
    ],
)
@pytest.mark.parametrize("block", [1 << 22, 997])  # one block, and many blocks of a prime length
def test_order_by_size_matches_a_stable_sort(sizes: np.ndarray, block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("fedsample.samplers.population.sizes._BLOCK", block)
    order, distinct, counts = order_by_size(sizes)
    assert order.dtype == np.int32
    expected = np.argsort(-sizes, kind="stable")
    assert np.array_equal(order, expected)
    values, value_counts = np.unique(sizes, return_counts=True)
    assert distinct.tolist() == values[::-1].tolist()
    assert counts.tolist() == value_counts[::-1].tolist()


# --- contract and parameters -------------------------------------------------------------------------------


@pytest.mark.parametrize("sampler_class", SAMPLERS)
def test_draws_are_reproducible_from_the_generator(sampler_class: type) -> None:
    sampler = sampler_class()
    state = sampler.init(Population.from_sizes(lognormal_sizes(10_000, seed=5)), 50)
    availability = BernoulliAvailability(0.5, seed=9)
    first, second = (
        sampler.sample(state, np.random.default_rng(6), availability=availability, round=3) for _ in range(2)
    )
    assert np.array_equal(first.clients, second.clients)
    assert np.array_equal(first.weights, second.weights)


def test_a_federation_with_other_importances_is_refused(small: np.ndarray) -> None:
    federation = Federation.from_sizes(small, importance="uniform")
    with pytest.raises(FedsampleError, match=r"'federation'.*size importances") as info:
        PopulationMDSampler().init(federation, 3)
    assert info.value.parameter == "federation"


@pytest.mark.parametrize(
    ("call", "parameter"),
    [
        (lambda: PopulationMDSampler(max_tries=0), "max_tries"),
        (lambda: PopulationClusteredSampler(empty_rows="drop"), "empty_rows"),
        (lambda: PopulationUniformSampler().init(Population.from_sizes([1, 2]), 3), "num_sampled"),
        (lambda: PopulationMDSampler().init([1, 2], 1), "population"),
        (lambda: Population.from_sizes([[1, 2]]), "sizes"),
        (lambda: PopulationClusteredSampler().init(Population.from_sizes([2**61, 2**60]), 2), "num_sampled"),
    ],
)
def test_bad_parameters_raise_the_library_error(call: Any, parameter: str) -> None:
    with pytest.raises(FedsampleError) as info:
        call()
    assert info.value.parameter == parameter


@pytest.mark.parametrize(("keyword", "value"), [("availability", "sometimes"), ("round", -1)])
def test_bad_sample_arguments_raise_the_library_error(keyword: str, value: object, small: np.ndarray) -> None:
    sampler = PopulationMDSampler()
    state = sampler.init(Population.from_sizes(small), 2)
    with pytest.raises(FedsampleError, match=rf"'{keyword}' parameter of PopulationMDSampler.sample"):
        sampler.sample(state, np.random.default_rng(0), **{keyword: value})


def test_states_round_trip_through_json_and_a_tampered_population_is_refused() -> None:
    """A state is written as its population's sizes and m (the derived arrays are rebuilt on load);
    decoding checks the population: sizes positive and summing to its total."""
    from fedsample.serialization import dumps, loads

    population = Population.from_sizes([5, 1, 3, 8, 2])
    for sampler in (PopulationMDSampler(), PopulationUniformSampler(), PopulationClusteredSampler()):
        state = sampler.init(population, 2)
        text = dumps(state)
        assert "cumulative" not in text
        assert "order" not in text
        restored = loads(text)
        for seed in range(5):
            first = sampler.sample(state, np.random.default_rng(seed))
            again = sampler.sample(restored, np.random.default_rng(seed))
            np.testing.assert_array_equal(first.clients, again.clients)
            np.testing.assert_array_equal(first.weights, again.weights)
    text = dumps(PopulationMDSampler().init(population, 2))
    with pytest.raises(FedsampleError, match="'total'"):
        loads(text.replace('"total": 19', '"total": 20'))
    with pytest.raises(FedsampleError, match="positive"):
        loads(text.replace('"data": [5, 1, 3, 8, 2]', '"data": [5, -1, 3, 8, 2]'))
