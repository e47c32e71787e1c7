"""Fed-CBS (Zhang et al., ICML 2023): the QCID, the sequential draw against the paper's definition
(every ordered outcome's probability), the effect it is for (class-balanced unions), the bias (Monte
Carlo, as docs/selection-systems.md measures it), bad input, and the engine, CLI and config.

No released code of the authors was found (docs/selection-systems.md), so the draw is tested against
the paper's definitions. Statistical checks use fixed seeds and 4 standard errors (two-sided
false-failure probability about 6.3e-5 per comparison under normality).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from cli_helpers import digits_config, run_cli
from fedsample import Federation, FedsampleError, Selection, make_sampler, monte_carlo_statistics
from fedsample.experiments.results.bias import measure_bias
from fedsample.samplers import FedCBSSampler, Feedback, UniformSampler, qcid
from fedsample.samplers.selectors.fedcbs import FedCBSState
from fedsample.stats import monte_carlo_bias

Z = 4.0
COUNTS = np.array([[9, 1, 0], [0, 8, 2], [1, 1, 8], [5, 5, 0], [3, 3, 4]], dtype=np.int64)


def _state(sampler: FedCBSSampler, m: int, rounds: int = 0, selected: tuple[int, ...] = ()) -> FedCBSState:
    """The state after ``rounds`` rounds in which the clients ``selected`` were drawn."""
    state = sampler.init(Federation.from_sizes(COUNTS.sum(axis=1)), m)
    ids = np.array(selected, dtype=np.int64)
    for t in range(rounds):
        selection = Selection(clients=ids, weights=np.full(ids.size, 1 / max(ids.size, 1)))
        state = sampler.update(state, Feedback(round=t, selection=selection, clients=ids))
    return state


def test_qcid_by_hand_and_by_its_definition() -> None:
    """(5, 15) pooled over 2 classes: (1/4 - 1/2)^2 + (3/4 - 1/2)^2 = 1/8; a balanced union gives 0."""
    assert qcid([[5, 5], [0, 10]]) == pytest.approx(0.125, abs=1e-15)
    assert qcid([[4, 0, 0], [0, 4, 0], [0, 0, 4]]) == pytest.approx(0.0, abs=1e-15)


@settings(max_examples=60, deadline=None)
@given(arrays(np.int64, st.tuples(st.integers(1, 6), st.integers(2, 5)), elements=st.integers(0, 30)))
def test_qcid_equals_the_gram_form_the_sampler_uses(counts: np.ndarray) -> None:
    """sum_c (pooled_c / N - 1/C)^2 = sum_{i,j} h_i.h_j / N^2 - 1/C for random histograms."""
    if counts.sum() == 0:
        return
    gram = counts.astype(np.float64) @ counts.T.astype(np.float64)
    expected = gram.sum() / float(counts.sum()) ** 2 - 1.0 / counts.shape[1]
    assert qcid(counts) == pytest.approx(expected, abs=1e-12)


def _ordered_probabilities(sampler: FedCBSSampler, state: FedCBSState) -> dict[tuple[int, ...], float]:
    """Every ordered outcome's probability by the paper's definition, written out directly: the first
    client with weight QCID({j})^-beta_1 + lambda sqrt(3 ln t / (2 T_j)), the k-th with weight
    QCID(S_{k-1} + {j})^-beta_k among the clients not yet drawn."""
    n, m = COUNTS.shape[0], state.num_sampled
    betas = [sampler.exponent + k * sampler.exponent_step for k in range(m)]
    t = state.round + 1
    out = {}
    for order in itertools.permutations(range(n), m):
        probability = 1.0
        for k, client in enumerate(order):
            rest = [j for j in range(n) if j not in order[:k]]
            if k == 0:
                bonus = [sampler.exploration * math.sqrt(3 * math.log(t) / (2 * (1 + state.selected[j]))) for j in rest]
                weights = [max(qcid(COUNTS[[j]]), 1e-12) ** -betas[0] + b for j, b in zip(rest, bonus, strict=True)]
            else:
                weights = [max(qcid(COUNTS[[*order[:k], j]]), 1e-12) ** -betas[k] for j in rest]
            probability *= weights[rest.index(client)] / sum(weights)
        out[order] = probability
    return out


@pytest.mark.parametrize(
    ("params", "m", "rounds"),
    [({}, 2, 0), ({}, 3, 4), ({"exponent": 0.5, "exponent_step": 2.0, "exploration": 1.0}, 2, 9)],
    ids=["first-round", "with-exploration", "other-exponents"],
)
def test_ordered_draws_follow_the_papers_sequential_probabilities(
    params: dict[str, float], m: int, rounds: int
) -> None:
    """20000 draws: every ordered outcome's frequency within 4 standard errors of its probability (the
    outcomes expected fewer than 10 times together)."""
    sampler = FedCBSSampler(label_counts=COUNTS, **params)
    state = _state(sampler, m, rounds=rounds, selected=(0, 3))
    exact = _ordered_probabilities(sampler, state)
    assert sum(exact.values()) == pytest.approx(1.0)
    rng = np.random.default_rng(11)
    draws = 20_000
    seen: dict[tuple[int, ...], int] = {}
    for _ in range(draws):
        key = tuple(int(c) for c in sampler.sample(state, rng).clients)
        seen[key] = seen.get(key, 0) + 1
    # Outcomes expected at least 10 times are checked one by one; the rarer ones (where the normal
    # approximation fails) together, with a continuity allowance of 3 draws.
    rare_probability, rare_seen = 0.0, 0
    for order, probability in exact.items():
        if probability * draws < 10:
            rare_probability += probability
            rare_seen += seen.get(order, 0)
            continue
        se = math.sqrt(probability * (1 - probability) / draws)
        assert abs(seen.get(order, 0) / draws - probability) <= Z * se, order
    se = math.sqrt(rare_probability * (1 - rare_probability) / draws)
    assert abs(rare_seen / draws - rare_probability) <= Z * se + 3 / draws
    assert set(seen) <= set(exact)


def test_the_selected_union_is_more_class_balanced_than_uniform_sampling() -> None:
    """40 clients holding one or two classes of 10: Fed-CBS's unions of m = 5 have a mean QCID well
    below uniform sampling's (the purpose of the scheme)."""
    rng = np.random.default_rng(0)
    counts = np.zeros((40, 10), dtype=np.int64)
    for i in range(40):
        counts[i, rng.choice(10, size=1 + i % 2, replace=False)] = rng.integers(20, 60)
    federation = Federation.from_sizes(counts.sum(axis=1))
    sampler = FedCBSSampler(label_counts=counts)
    state = sampler.init(federation, 5)
    uniform = UniformSampler()
    uniform_state = uniform.init(federation, 5)
    ours = np.mean([qcid(counts[sampler.sample(state, rng).clients]) for _ in range(300)])
    theirs = np.mean([qcid(counts[uniform.sample(uniform_state, rng).clients]) for _ in range(300)])
    assert ours < 0.5 * theirs


def test_update_counts_the_selected_clients_and_the_round() -> None:
    sampler = FedCBSSampler(label_counts=COUNTS)
    state = _state(sampler, 2, rounds=3, selected=(1, 4))
    assert state.round == 3
    assert state.selected.tolist() == [0, 3, 0, 0, 3]


def test_bias_is_measured_by_monte_carlo() -> None:
    """Fed-CBS is biased: over 5000 rounds the largest deviation of E[w_i] from p_i exceeds 8
    standard errors (a false positive below 1e-14 per client); the report's measure detects it too."""
    sampler = FedCBSSampler(label_counts=COUNTS)
    state = _state(sampler, 2)
    mc = monte_carlo_statistics(sampler, state, np.random.default_rng(5), num_rounds=5_000)
    assert monte_carlo_bias(mc, state.importances).max_z > 8
    report = measure_bias([("fedcbs", sampler)], Federation.from_sizes(COUNTS.sum(axis=1)), 2)
    (row,) = report["samplers"]
    assert row["declared_biased"]
    assert row["detected"]


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"label_counts": [[1, 2, 3]]}, None),  # valid at construction; its row count is checked at init
        ({"label_counts": [1, 2, 3]}, "label_counts"),
        ({"label_counts": [[1], [2]]}, "label_counts"),
        ({"label_counts": [[1, -1], [2, 2]]}, "label_counts"),
        ({"label_counts": [[1, 0.5], [2, 2]]}, "label_counts"),
        ({"label_counts": [[0, 0], [2, 2]]}, "label_counts"),
        ({"label_counts": "data"}, "label_counts"),
        ({"exponent": 0.0}, "exponent"),
        ({"exponent_step": -1.0}, "exponent_step"),
        ({"exploration": float("inf")}, "exploration"),
        ({"aggregation": "mean"}, "aggregation"),
    ],
)
def test_bad_hyperparameters_name_the_parameter(params: dict[str, object], parameter: str | None) -> None:
    if parameter is None:
        sampler = make_sampler("fedcbs", **params)
        with pytest.raises(FedsampleError, match=r"'label_counts'.*\(5, C\)"):
            sampler.init(Federation.from_sizes([1, 2, 3, 4, 5]), 2)
        return
    with pytest.raises(FedsampleError, match=f"'{parameter}'") as info:
        make_sampler("fedcbs", **params)
    assert info.value.parameter == parameter


def test_the_config_value_must_be_resolved_before_init() -> None:
    """From Python, the config's 'federation' names what to pass instead (one line)."""
    with pytest.raises(FedsampleError, match=r"FederatedDataset\.label_counts") as info:
        FedCBSSampler().init(Federation.from_sizes([3, 4]), 1)
    assert info.value.parameter == "label_counts"


def test_engine_runs_fedcbs_with_the_datas_label_counts() -> None:
    from fedsample.data.builders import FederationSpec, build_federation
    from fedsample.engine import RunSpec, TrainingConfig, simulate
    from fedsample.engine.paper_models import ModelSpec

    data = build_federation(FederationSpec(dataset="digits", partition="dirichlet", num_clients=12, alpha=0.3))
    spec = ModelSpec("softmax", data.sample_shape, data.num_classes or 1)
    config = TrainingConfig(rounds=3, num_sampled=4, local_steps=2, batch_size=5, local_lr=0.1)
    sampler = FedCBSSampler(label_counts=data.label_counts)
    (result,) = simulate(data, spec, [RunSpec(sampler, seed=0)], config)
    assert result.sampler_state.selected.sum() == 3 * 4


def test_cli_runs_fedcbs_with_the_federations_histograms(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """A [[samplers]] table names fedcbs without label_counts (the run's data fills them in);
    --sampler fedcbs --param fedcbs.exponent=2 too."""
    tables = '[[samplers]]\nname = "fedcbs"\nexploration = 1.0\n\n[[samplers]]\nname = "md"\n'
    config = tmp_path / "fedcbs.toml"
    config.write_text(digits_config(seeds=1, rounds=2, tables=tables))
    code, _, err = run_cli(["run", str(config), "-o", str(tmp_path / "a"), "-q"], capsys)
    assert code == 0, err
    resolved = (tmp_path / "a" / "config.toml").read_text()
    assert 'label_counts = "federation"' in resolved
    argv = ["run", str(config), "-o", str(tmp_path / "b"), "-q", "--sampler", "fedcbs", "--param", "fedcbs.exponent=2"]
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
