"""The sampler contract, run over every registered sampler (in the spirit of scikit-learn's
``parametrize_with_checks``): frozen keyword-only hyperparameters, validated ``init``, seeded
``sample``, pure ``update``, read-only state that pickles and round-trips, well-formed selections.

Learning samplers (paper 001's OSMD, Adaptive-OSMD and baselines, with and without replacement)
run through the same checks on states learned from a few rounds of synthetic feedback
(``sampler_cases.make_case``); their ``update`` returns a new state instead of the same one.
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import numpy as np
import pytest

from fedsample import (
    Federation,
    FedsampleError,
    Feedback,
    MDSampler,
    Selection,
    dumps,
    loads,
    make_sampler,
    sampler_names,
)
from sampler_cases import (
    CASES,
    CONTRACT_NUM_SAMPLED,
    DETERMINISTIC_CASES,
    DISTRIBUTION_CASES,
    LEARNING_CASES,
    NEEDS_M_AT_MOST_N,
    POPULATION_CASES,
    SAMPLER_FACTORIES,
    WARM_UP_ROUNDS,
    WITHOUT_REPLACEMENT_CASES,
    client_norms,
    make_case,
    next_feedback,
)

M = CONTRACT_NUM_SAMPLED
NON_LEARNING_CASES = [c for c in CASES if c not in LEARNING_CASES]


def _selections(sampler: Any, state: Any, seed: int, rounds: int = 5) -> list[Selection]:
    rng = np.random.default_rng(seed)
    return [sampler.sample(state, rng) for _ in range(rounds)]


def _same(a: list[Selection], b: list[Selection]) -> bool:
    return all(
        np.array_equal(x.clients, y.clients) and np.array_equal(x.weights, y.weights) for x, y in zip(a, b, strict=True)
    )


def _arrays(obj: Any) -> list[np.ndarray]:
    """Every array reachable from a state: dataclass fields (derived ones too), dicts, sequences."""
    if isinstance(obj, np.ndarray):
        return [obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [a for f in dataclasses.fields(obj) for a in _arrays(getattr(obj, f.name))]
    if isinstance(obj, dict):
        return [a for v in obj.values() for a in _arrays(v)]
    if isinstance(obj, (list, tuple)):
        return [a for v in obj for a in _arrays(v)]
    return []


def _assert_read_only(obj: Any) -> None:
    arrays = _arrays(obj)
    assert arrays, "the state holds no arrays"
    for array in arrays:
        assert not array.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            array[...] = 0


def test_every_registered_sampler_is_in_the_contract_suite(federation: Federation) -> None:
    """A new sampler must be added to the cases, so that it runs through this suite."""
    covered = {SAMPLER_FACTORIES[case](federation, M).name for case in CASES}
    assert covered == set(sampler_names())


@pytest.mark.parametrize("case", CASES)
def test_sampler_is_frozen(case: str, federation: Federation) -> None:
    """Samplers are immutable: assigning any attribute raises."""
    sampler = SAMPLER_FACTORIES[case](federation, M)
    for name in [f.name for f in dataclasses.fields(sampler)] + ["num_sampled", "name"]:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(sampler, name, None)


@pytest.mark.parametrize("case", CASES)
def test_hyperparameters_are_keyword_only(case: str, federation: Federation) -> None:
    """Constructors take keyword arguments only, and get_params rebuilds the sampler."""
    sampler = SAMPLER_FACTORIES[case](federation, M)
    cls = type(sampler)
    assert all(f.kw_only for f in dataclasses.fields(sampler))
    with pytest.raises(TypeError):
        cls(True)  # type: ignore[misc]
    rebuilt = cls(**sampler.get_params())
    assert rebuilt.get_params().keys() == sampler.get_params().keys()


@pytest.mark.parametrize("case", CASES)
def test_unknown_hyperparameter_raises(case: str, federation: Federation) -> None:
    """make_sampler rejects a parameter the sampler does not have, naming it and its value."""
    name = SAMPLER_FACTORIES[case](federation, M).name
    with pytest.raises(FedsampleError, match=r"'bogus'.*Got 17 instead") as info:
        make_sampler(name, bogus=17)
    assert info.value.parameter == "bogus"
    assert isinstance(info.value, ValueError)


BAD_HYPERPARAMETERS = [
    pytest.param("poisson", "capped", "yes", id="poisson-capped-str"),
    pytest.param("poisson", "capped", 1, id="poisson-capped-int"),
    pytest.param("poisson", "capped", None, id="poisson-capped-none"),
    pytest.param("clustered", "rows", None, id="clustered-rows-none"),
    pytest.param("clustered", "rows", "rows", id="clustered-rows-str"),
    pytest.param("clustered", "rows", np.ones((M, 2)), id="clustered-rows-shape"),
    pytest.param("clustered", "rows", np.full((M, 8), 1 / 8), id="clustered-rows-columns"),
    pytest.param("osmd", "alpha", 0.0, id="osmd-alpha-zero"),
    pytest.param("osmd", "alpha", 1.5, id="osmd-alpha-above-one"),
    pytest.param("osmd", "eta", 0.0, id="osmd-eta-zero"),
    pytest.param("osmd", "eta", float("inf"), id="osmd-eta-inf"),
    pytest.param("osmd", "replace", "no", id="osmd-replace-str"),
    pytest.param("osmd", "feedback", "loss", id="osmd-feedback-loss"),
    pytest.param("adaptive-osmd", "horizon", 0, id="adaptive-osmd-horizon-zero"),
    pytest.param("adaptive-osmd", "horizon", 2.5, id="adaptive-osmd-horizon-float"),
    pytest.param("adaptive-osmd", "a_max", -1.0, id="adaptive-osmd-a-max-negative"),
    pytest.param("adaptive-osmd", "a_max", float("inf"), id="adaptive-osmd-a-max-inf"),
    pytest.param("adaptive-osmd", "gamma", 0.0, id="adaptive-osmd-gamma-zero"),
    pytest.param("adaptive-osmd", "gamma", float("inf"), id="adaptive-osmd-gamma-inf"),
    pytest.param("uniform-is", "feedback", "bogus", id="uniform-is-feedback-bogus"),
    pytest.param("mabs", "alpha", -0.1, id="mabs-alpha-negative"),
    pytest.param("mabs", "delta", 0.0, id="mabs-delta-zero"),
    pytest.param("mabs", "delta", float("inf"), id="mabs-delta-inf"),
    pytest.param("vrb", "regularizer", 0.0, id="vrb-regularizer-zero"),
    pytest.param("vrb", "regularizer", float("inf"), id="vrb-regularizer-inf"),
    pytest.param("vrb", "feedback", "bogus", id="vrb-feedback-bogus"),
    pytest.param("vrb", "form", "uniform", id="vrb-form-bogus"),
    pytest.param("mabs", "step", "auto", id="mabs-step-bogus"),
    pytest.param("mabs", "horizon", 0, id="mabs-horizon-zero"),
    pytest.param("avare", "alpha", 1.01, id="avare-alpha-above-one"),
    pytest.param("avare", "replace", 1, id="avare-replace-int"),
]


@pytest.mark.parametrize(("name", "parameter", "value"), BAD_HYPERPARAMETERS)
def test_bad_hyperparameter_raises(name: str, parameter: str, value: Any, federation: Federation) -> None:
    """A bad hyperparameter raises FedsampleError naming it, at construction or (rows) at init."""

    def build_and_init() -> None:
        make_sampler(name, **{parameter: value}).init(federation, M)

    with pytest.raises(FedsampleError, match=f"'{parameter}'") as info:
        build_and_init()
    assert info.value.parameter == parameter


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3", None, np.float64(2.0)], ids=repr)
@pytest.mark.parametrize("case", CASES)
def test_init_rejects_bad_num_sampled(case: str, bad: Any, federation: Federation) -> None:
    """init validates m: an int of at least 1, never a bool; the message names 'num_sampled' and the value."""
    sampler = SAMPLER_FACTORIES[case](federation, M)
    with pytest.raises(FedsampleError) as info:
        sampler.init(federation, bad)
    assert info.value.parameter == "num_sampled"
    assert "'num_sampled'" in str(info.value)
    assert f"Got {bad!r} instead" in str(info.value)


@pytest.mark.parametrize("case", sorted(NEEDS_M_AT_MOST_N | {"poisson"}))
def test_init_rejects_more_sampled_than_clients(case: str, federation: Federation) -> None:
    """Schemes that select each client at most once need m <= n (Poisson: m p_i <= 1, implied)."""
    n = federation.num_clients
    sampler = SAMPLER_FACTORIES[case](federation, M)
    with pytest.raises(FedsampleError, match=rf"'num_sampled'.*Got {n + 1} instead") as info:
        sampler.init(federation, n + 1)
    assert info.value.parameter == "num_sampled"


@pytest.mark.parametrize("case", ["md", "clustered-size", "clustered", "clustered-similarity"])
def test_schemes_with_repeats_accept_more_sampled_than_clients(case: str, federation: Federation) -> None:
    """Row designs draw with replacement, so m > n is valid and gives m draws per round."""
    m = federation.num_clients + 3
    sampler, state = make_case(case, federation, m)
    selection = sampler.sample(state, np.random.default_rng(0))
    assert selection.num_draws == m
    assert np.isclose(selection.weights.sum(), 1.0)


@pytest.mark.parametrize("case", [c for c in DISTRIBUTION_CASES if c not in WITHOUT_REPLACEMENT_CASES])
def test_learned_distributions_with_replacement_accept_more_sampled_than_clients(
    case: str, federation: Federation
) -> None:
    """K i.i.d. draws from p accept K > M: K entries, each weighted lambda_m / (K p_m) (001, eq. 12)."""
    m = federation.num_clients + 3
    sampler, state = make_case(case, federation, m)
    selection = sampler.sample(state, np.random.default_rng(0))
    assert selection.num_draws == m
    p = sampler.probabilities(state)
    np.testing.assert_allclose(
        selection.weights, federation.importances[selection.clients] / (m * p[selection.clients]), rtol=1e-14
    )


@pytest.mark.parametrize("case", CASES)
def test_init_accepts_numpy_integer(case: str, federation: Federation) -> None:
    """A numpy integer is a valid m and gives the same state as the Python int."""
    sampler = SAMPLER_FACTORIES[case](federation, M)
    assert dumps(sampler.init(federation, np.int64(M))) == dumps(sampler.init(federation, M))


@pytest.mark.parametrize("case", CASES)
def test_same_seed_gives_same_selections(case: str, federation: Federation) -> None:
    """Randomness comes only from the Generator: equal seeds give equal selections."""
    sampler, state = make_case(case, federation, M)
    for seed in (0, 1, 12345):
        assert _same(_selections(sampler, state, seed), _selections(sampler, state, seed))


@pytest.mark.parametrize("case", CASES)
def test_different_seeds_give_different_selections(case: str, federation: Federation) -> None:
    """Different seeds eventually give different selections (the full sampler is deterministic)."""
    sampler, state = make_case(case, federation, M)
    first = _selections(sampler, state, 0, rounds=1)
    others = [_selections(sampler, state, seed, rounds=1) for seed in range(1, 30)]
    differs = any(not _same(first, other) for other in others)
    assert differs == (case not in DETERMINISTIC_CASES)


@pytest.mark.parametrize("case", CASES)
def test_state_arrays_are_read_only(case: str, federation: Federation) -> None:
    """State is immutable plain data: every array in it refuses writes."""
    _, state = make_case(case, federation, M)
    _assert_read_only(state)


@pytest.mark.parametrize("case", NON_LEARNING_CASES)
def test_update_returns_state_unchanged_and_does_not_mutate(case: str, federation: Federation) -> None:
    """Non-learning samplers' update returns the very same state and leaves its input untouched."""
    sampler, state = make_case(case, federation, M)
    before = dumps(state)
    rng = np.random.default_rng(5)
    for t in range(3):
        selection = sampler.sample(state, rng)
        ids, _ = selection.distinct()
        feedback = Feedback(
            round=t,
            selection=selection,
            clients=ids,
            update_norms=np.ones(ids.size),
            updates=np.ones((ids.size, 4)),
            losses=np.full(ids.size, 0.5),
        )
        new_state = sampler.update(state, feedback)
        assert new_state is state
        assert dumps(state) == before
        _assert_read_only(feedback)


@pytest.mark.parametrize("case", sorted(LEARNING_CASES))
def test_learning_update_returns_a_new_state_and_does_not_mutate(case: str, federation: Federation) -> None:
    """Learning samplers' update returns a NEW read-only state of the same type, one round further,
    and leaves its input (and the feedback) untouched; updating the same state twice with the same
    feedback gives equal states (update is a pure function)."""
    sampler, state = make_case(case, federation, M)
    norms = client_norms(federation.num_clients)
    rng = np.random.default_rng(5)
    for t in range(WARM_UP_ROUNDS, WARM_UP_ROUNDS + 3):
        before = dumps(state)
        feedback = next_feedback(sampler, state, t, rng, norms)  # a two-phase sampler's: its candidates' report
        feedback_before = dumps(feedback)
        new_state = sampler.update(state, feedback)
        assert new_state is not state
        assert type(new_state) is type(state)
        assert new_state.round == state.round + 1
        assert dumps(state) == before
        assert dumps(feedback) == feedback_before
        assert dumps(sampler.update(state, feedback)) == dumps(new_state)
        _assert_read_only(new_state)
        _assert_read_only(feedback)
        state = new_state


@pytest.mark.parametrize("case", CASES)
def test_restored_state_learns_like_the_original(case: str, federation: Federation) -> None:
    """A state restored from pickle or JSON evolves exactly like the original under the same feedback."""
    sampler, state = make_case(case, federation, M)
    norms = client_norms(federation.num_clients)
    copies = [pickle.loads(pickle.dumps(state)), loads(dumps(state))]
    rng = np.random.default_rng(8)
    for t in range(WARM_UP_ROUNDS, WARM_UP_ROUNDS + 3):
        feedback = next_feedback(sampler, state, t, rng, norms)
        state = sampler.update(state, feedback)
        copies = [sampler.update(copy, feedback) for copy in copies]
        assert all(dumps(copy) == dumps(state) for copy in copies)
    assert all(_same(_selections(sampler, state, 3), _selections(sampler, copy, 3)) for copy in copies)


@pytest.mark.parametrize("case", CASES)
def test_sample_does_not_mutate_state(case: str, federation: Federation) -> None:
    """sample only reads the state."""
    sampler, state = make_case(case, federation, M)
    before = dumps(state)
    _selections(sampler, state, 0, rounds=20)
    assert dumps(state) == before


@pytest.mark.parametrize("case", CASES)
def test_state_round_trips_through_pickle(case: str, federation: Federation) -> None:
    """Pickled state (Ray) is equal, still read-only, and draws the same selections."""
    sampler, state = make_case(case, federation, M)
    restored = pickle.loads(pickle.dumps(state))
    assert type(restored) is type(state)
    assert dumps(restored) == dumps(state)
    _assert_read_only(restored)
    assert _same(_selections(sampler, state, 7), _selections(sampler, restored, 7))
    # The sampler itself pickles too.
    assert pickle.loads(pickle.dumps(sampler)).get_params().keys() == sampler.get_params().keys()


@pytest.mark.parametrize("case", CASES)
def test_state_round_trips_through_json(case: str, federation: Federation) -> None:
    """fedsample.serialization dumps/loads rebuild an equal state that draws the same selections."""
    sampler, state = make_case(case, federation, M)
    text = dumps(state)
    restored = loads(text)
    assert type(restored) is type(state)
    if case not in LEARNING_CASES | POPULATION_CASES:  # a population sampler's state is its own design
        assert type(restored.design) is type(state.design)
    assert type(sampler.design(restored)) is type(sampler.design(state))
    assert dumps(restored) == text
    _assert_read_only(restored)
    assert _same(_selections(sampler, state, 11), _selections(sampler, restored, 11))


@pytest.mark.parametrize("case", CASES)
def test_selection_is_well_formed(case: str, federation: Federation) -> None:
    """Clients and weights are aligned 1-D arrays, ids in [0, n), weights finite and non-negative."""
    n = federation.num_clients
    sampler, state = make_case(case, federation, M)
    rng = np.random.default_rng(2)
    for _ in range(50):
        selection = sampler.sample(state, rng)
        assert selection.clients.ndim == 1
        assert selection.clients.shape == selection.weights.shape
        assert selection.clients.dtype == np.int64
        assert selection.weights.dtype == np.float64
        assert np.all((selection.clients >= 0) & (selection.clients < n))
        assert np.all(np.isfinite(selection.weights))
        assert np.all(selection.weights >= 0)
        ids, summed = selection.distinct()
        assert np.array_equal(ids, np.unique(selection.clients))
        assert np.allclose(selection.dense_weights(n)[ids], summed)
        _assert_read_only(selection)


@pytest.mark.parametrize(
    ("case", "expected_draws"),
    [
        ("full", 8),
        ("md", M),
        ("uniform", M),
        ("fedavg-uniform", M),
        ("clustered-size", M),
        ("clustered", M),
        ("clustered-similarity", M),
    ]
    + [(case, M) for case in DISTRIBUTION_CASES],
)
def test_selection_size(case: str, expected_draws: int, federation: Federation) -> None:
    """Fixed-size schemes draw m entries (full participation: all n); uniform ones and learned
    distributions drawn without replacement are distinct."""
    sampler, state = make_case(case, federation, M)
    rng = np.random.default_rng(4)
    for _ in range(20):
        selection = sampler.sample(state, rng)
        assert selection.num_draws == expected_draws
        if case in ("full", "uniform", "fedavg-uniform") or case in WITHOUT_REPLACEMENT_CASES:
            assert np.unique(selection.clients).size == expected_draws


def test_selection_distinct_sums_repeated_clients() -> None:
    """Selection.distinct() merges repeated clients and sums their weights, ids increasing."""
    selection = Selection(clients=[2, 0, 2, 1, 2], weights=[0.1, 0.2, 0.3, 0.25, 0.15])
    ids, summed = selection.distinct()
    assert ids.tolist() == [0, 1, 2]
    assert np.allclose(summed, [0.2, 0.25, 0.55])
    assert np.allclose(selection.dense_weights(4), [0.2, 0.25, 0.55, 0.0])


def test_md_repeats_are_summed_by_distinct() -> None:
    """MD with m > n must repeat clients; distinct() gives each one count_i / m (000, eq. 4)."""
    sampler = MDSampler()
    state = sampler.init(Federation.from_sizes([1, 3]), num_sampled=5)
    selection = sampler.sample(state, np.random.default_rng(0))
    ids, summed = selection.distinct()
    counts = np.bincount(selection.clients, minlength=2)
    assert np.allclose(summed, counts[ids] / 5)
    assert np.isclose(summed.sum(), 1.0)


def test_selection_rejects_misaligned_arrays() -> None:
    with pytest.raises(ValueError, match="same length"):
        Selection(clients=[0, 1], weights=[0.5])


@pytest.mark.parametrize("case", CASES)
def test_importances_accessor(case: str, federation: Federation) -> None:
    """sampler.importances(state) are the federation's p_i."""
    sampler, state = make_case(case, federation, M)
    assert np.array_equal(sampler.importances(state), federation.importances)


def test_unknown_sampler_name_raises() -> None:
    with pytest.raises(FedsampleError, match=r"'sampler'.*Got 'nope' instead") as info:
        make_sampler("nope")
    assert info.value.parameter == "sampler"
