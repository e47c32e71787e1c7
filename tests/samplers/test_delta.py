"""DELTA (Wang et al., NeurIPS 2023; released code L3030/DELTA_FL): scores, the practical update from
last-seen statistics, unbiasedness (exact statistics of its design, enumeration, Monte Carlo), bad
input, and the engine, CLI and config entry points.

Statistical checks use fixed seeds and 4 standard errors (two-sided false-failure probability about
6.3e-5 per comparison under normality).
"""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import digits_config, run_cli
from fedsample import Federation, FedsampleError, Selection, dumps, loads, make_sampler, monte_carlo_statistics
from fedsample.designs import RowDesign, SuccessiveDesign
from fedsample.samplers import DeltaSampler, Feedback
from fedsample.samplers.adaptive.osmd import DistributionState
from fedsample.samplers.selectors.delta import delta_scores, mass_preserving_update
from fedsample.stats import exact_statistics

Z = 4.0
SIZES = (5, 1, 3, 8, 2, 6, 4, 1)


def _feedback(t: int, selection: Selection, clients: np.ndarray, updates: np.ndarray, **extra: Any) -> Feedback:
    return Feedback(
        round=t, selection=selection, clients=clients, updates=updates, local_lr=0.5, local_steps=2, **extra
    )


def test_released_score_by_hand() -> None:
    """lambda_i ((1 - beta) ||g_i|| + beta ||g_i - mean g||) on three hand-made gradients."""
    g = np.array([[3.0, 0.0], [0.0, 4.0], [0.0, 0.0]])
    lam = np.array([0.2, 0.3, 0.5])
    mean = g.mean(axis=0)
    expected = [lam[i] * (0.25 * np.linalg.norm(g[i]) + 0.75 * np.linalg.norm(g[i] - mean)) for i in range(3)]
    np.testing.assert_allclose(delta_scores(g, lam, form="released", beta=0.75), expected, rtol=1e-15)


def test_paper_score_by_hand() -> None:
    """lambda_i sqrt(a1 zeta_i^2 + a2 sigma_i^2), sigma_i^2 = max(0, b_i^2 - ||g_i||^2)."""
    g = np.array([[1.0, 1.0], [2.0, 0.0]])
    lam = np.array([0.4, 0.6])
    b = np.array([2.0, 1.0])  # the second's batch norm is below its mean gradient's: sigma^2 = 0
    zeta2 = np.sum((g - g.mean(axis=0)) ** 2, axis=1)
    sigma2 = np.array([4.0 - 2.0, 0.0])
    expected = lam * np.sqrt(2.0 * zeta2 + 3.0 * sigma2)
    got = delta_scores(g, lam, form="paper", diversity_weight=2.0, variance_weight=3.0, batch_norms=b)
    np.testing.assert_allclose(got, expected, rtol=1e-15)


def test_update_keeps_the_returned_clients_mass_and_the_others_probabilities() -> None:
    """The released reweight_prac: the returned clients share the mass they had in proportion to
    their scores; clients never seen keep 1/n; the gradients are the updates over eta_l N."""
    federation = Federation.from_sizes(SIZES)
    sampler = DeltaSampler()
    state = sampler.init(federation, 3)
    np.testing.assert_array_equal(state.probabilities, np.full(8, 1 / 8))
    clients = np.array([1, 4, 6])
    updates = np.array([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 3.0]])
    selection = Selection(clients=clients, weights=np.full(3, 1 / 3))
    new = sampler.update(state, _feedback(0, selection, clients, updates))
    p = new.probabilities
    assert p.sum() == pytest.approx(1.0, abs=1e-15)
    others = np.setdiff1d(np.arange(8), clients)
    np.testing.assert_array_equal(p[others], np.full(others.size, 1 / 8))
    scores = delta_scores(updates / (0.5 * 2), federation.importances[clients], form="released", beta=0.5)
    np.testing.assert_allclose(p[clients], scores / scores.sum() * 3 / 8, rtol=1e-14)
    assert new.round == 1


def test_mass_preserving_update_without_information_keeps_the_distribution() -> None:
    p = np.full(4, 0.25)
    assert mass_preserving_update(p, np.array([0, 1]), np.zeros(2)) is p
    assert mass_preserving_update(p, np.zeros(0, dtype=np.int64), np.zeros(0)) is p


def test_non_finite_updates_count_as_not_returned() -> None:
    """A NaN or infinite update is ignored: the step equals the one without that client."""
    federation = Federation.from_sizes(SIZES)
    sampler = DeltaSampler()
    state = sampler.init(federation, 3)
    clients = np.array([0, 2, 5])
    updates = np.array([[1.0, 2.0], [np.nan, 0.0], [0.5, -1.0]])
    selection = Selection(clients=clients, weights=np.full(3, 1 / 3))
    poisoned = sampler.update(state, _feedback(0, selection, clients, updates))
    without = sampler.update(state, _feedback(0, selection, clients[[0, 2]], updates[[0, 2]]))
    assert dumps(poisoned) == dumps(without)


@pytest.mark.parametrize("replace", [True, False])
def test_the_design_is_the_existing_one_with_inverse_probability_weights(replace: bool) -> None:
    """With replacement: RowDesign with p and weights lambda / (K p), whose exact statistics give
    E[w_i] = lambda_i; without: SuccessiveDesign (Des Raj)."""
    federation = Federation.from_sizes(SIZES)
    sampler = DeltaSampler(replace=replace)
    state = _learned(sampler, federation, 3, seed=1)
    design = sampler.design(state)
    if replace:
        assert isinstance(design, RowDesign)
        np.testing.assert_allclose(design.probabilities, state.probabilities, rtol=1e-15)
        stats = exact_statistics(design, state.importances)
        np.testing.assert_allclose(stats.mean_weights, state.importances, rtol=1e-12)
    else:
        assert isinstance(design, SuccessiveDesign)
        np.testing.assert_allclose(design.probabilities, state.probabilities, rtol=1e-15)


def _learned(sampler: DeltaSampler, federation: Federation, m: int, *, seed: int, rounds: int = 6) -> DistributionState:
    """The state after ``rounds`` rounds where each returned client sends a random update (fixed seed)."""
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(federation.num_clients, 5)) * rng.uniform(0.1, 3.0, size=(federation.num_clients, 1))
    state = sampler.init(federation, m)
    for t in range(rounds):
        selection = sampler.sample(state, rng)
        ids = np.unique(selection.clients)
        feedback = _feedback(t, selection, ids, vectors[ids], gradient_norms=2 * np.linalg.norm(vectors[ids], axis=1))
        state = sampler.update(state, feedback)
    return state


def _enumerated_mean(design: RowDesign | SuccessiveDesign) -> np.ndarray:
    """``E[w]`` over every outcome of the design (tiny populations only)."""
    n = design.num_clients
    mean = np.zeros(n)
    p = design.probabilities
    if isinstance(design, RowDesign):
        for draws in itertools.product(range(n), repeat=design.num_draws):
            probability = math.prod(float(p[i]) for i in draws)
            np.add.at(mean, list(draws), probability * design.draw_weights[list(draws)])
        return mean
    for order in itertools.permutations(range(n), design.num_sampled):
        probability, taken = 1.0, 0.0
        for client in order:
            probability *= float(p[client]) / (1.0 - taken)
            taken += float(p[client])
        np.add.at(mean, list(order), probability * design.ordered_weights(np.array(order, dtype=np.int64)))
    return mean


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 50), min_size=2, max_size=5),
    seed=st.integers(0, 2**31 - 1),
    replace=st.booleans(),
    form=st.sampled_from(["released", "paper"]),
    m=st.integers(1, 3),
)
def test_unbiased_by_enumeration_on_random_inputs(
    sizes: list[int], seed: int, replace: bool, form: str, m: int
) -> None:
    """For random federations and random update histories, every outcome of the learned design
    enumerated: sum over outcomes of P(outcome) w_i(outcome) = lambda_i (to 1e-12)."""
    federation = Federation.from_sizes(sizes)
    m = min(m, len(sizes)) if not replace else m
    sampler = DeltaSampler(form=form, replace=replace)  # type: ignore[arg-type]
    state = _learned(sampler, federation, m, seed=seed, rounds=4)
    design = sampler.design(state)
    np.testing.assert_allclose(_enumerated_mean(design), federation.importances, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("replace", [True, False])
def test_unbiased_by_monte_carlo(replace: bool) -> None:
    """40 clients, m = 6, a learned state: every E[w_i] within 4 standard errors of lambda_i."""
    sizes = np.random.default_rng(7).integers(1, 60, size=40)
    federation = Federation.from_sizes(sizes)
    sampler = DeltaSampler(replace=replace)
    state = _learned(sampler, federation, 6, seed=3, rounds=15)
    assert np.ptp(sampler.probabilities(state)) > 0  # the state learned something
    mc = monte_carlo_statistics(sampler, state, np.random.default_rng(11), num_rounds=20_000)
    z = np.abs(mc.mean_weights.value - federation.importances) / mc.mean_weights.stderr
    assert z.max() < Z


def test_floor_keeps_every_probability_above_alpha_over_n() -> None:
    federation = Federation.from_sizes(SIZES)
    sampler = DeltaSampler(alpha=0.5)
    state = _learned(sampler, federation, 3, seed=2)
    assert sampler.probabilities(state).min() >= 0.5 / 8 * (1 - 1e-12)


def test_state_round_trips_through_json() -> None:
    federation = Federation.from_sizes(SIZES)
    sampler = DeltaSampler(form="paper")
    state = _learned(sampler, federation, 3, seed=4)
    restored = loads(dumps(state))
    np.testing.assert_array_equal(restored.probabilities, state.probabilities)


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"form": "paper", "beta": 0.3}, "beta"),
        ({"diversity_weight": 1.0}, "diversity_weight"),
        ({"form": "paper", "diversity_weight": 0.0, "variance_weight": 0.0}, "variance_weight"),
        ({"beta": 1.5}, "beta"),
        ({"alpha": -0.1}, "alpha"),
        ({"form": "both"}, "form"),
        ({"replace": "no"}, "replace"),
    ],
)
def test_bad_hyperparameters_name_the_parameter(params: dict[str, object], parameter: str) -> None:
    with pytest.raises(FedsampleError, match=f"'{parameter}'") as info:
        make_sampler("delta", **params)
    assert info.value.parameter == parameter


@pytest.mark.parametrize(("form", "missing"), [("released", "updates"), ("paper", "gradient_norms")])
def test_missing_feedback_is_refused_in_one_line(form: str, missing: str) -> None:
    federation = Federation.from_sizes(SIZES)
    sampler = DeltaSampler(form=form)  # type: ignore[arg-type]
    state = sampler.init(federation, 2)
    selection = Selection(clients=np.array([0, 1]), weights=np.full(2, 0.5))
    updates = None if missing == "updates" else np.ones((2, 3))
    feedback = Feedback(round=0, selection=selection, clients=np.array([0, 1]), updates=updates)
    with pytest.raises(FedsampleError, match=missing) as info:
        sampler.update(state, feedback)
    assert info.value.parameter == "feedback"


def test_more_draws_than_clients_need_replacement() -> None:
    federation = Federation.from_sizes(SIZES)
    assert DeltaSampler().init(federation, 12).num_sampled == 12
    with pytest.raises(FedsampleError, match="'num_sampled'"):
        DeltaSampler(replace=False).init(federation, 12)


def test_engine_learns_from_the_update_vectors() -> None:
    """simulate with delta: the engine hands it the updates, and its distribution moves off 1/n."""
    from fedsample.data.builders import FederationSpec, build_federation
    from fedsample.engine import RunSpec, TrainingConfig, simulate
    from fedsample.engine.paper_models import ModelSpec

    data = build_federation(FederationSpec(dataset="digits", partition="dirichlet", num_clients=12, alpha=0.5))
    spec = ModelSpec("softmax", data.sample_shape, data.num_classes or 1)
    config = TrainingConfig(rounds=3, num_sampled=4, local_steps=2, batch_size=5, local_lr=0.1)
    (result,) = simulate(data, spec, [RunSpec(DeltaSampler(), seed=0)], config)
    p = result.sampler_state.probabilities
    assert p.sum() == pytest.approx(1.0)
    assert np.ptp(p) > 0


def test_cli_runs_delta_from_a_toml_config_and_from_the_sampler_flag(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """A [[samplers]] table names delta with its parameters; --sampler delta --param delta.form=paper too."""
    tables = '[[samplers]]\nname = "delta"\nbeta = 0.25\n\n[[samplers]]\nname = "md"\n'
    config = tmp_path / "delta.toml"
    config.write_text(digits_config(seeds=1, rounds=2, tables=tables))
    code, _, err = run_cli(["run", str(config), "-o", str(tmp_path / "a"), "-q"], capsys)
    assert code == 0, err
    code, _, err = run_cli(
        ["run", str(config), "-o", str(tmp_path / "b"), "-q", "--sampler", "delta", "--param", "delta.form=paper"],
        capsys,
    )
    assert code == 0, err
    resolved = (tmp_path / "b" / "config.toml").read_text()
    assert 'form = "paper"' in resolved


REFERENCE_DIR = Path(os.environ.get("FEDSAMPLE_REFERENCE_DIR", "/tmp/fedsample-reference"))


@pytest.mark.slow
@pytest.mark.skipif(
    not (REFERENCE_DIR / "venv-delta" / "bin" / "python").is_file(),
    reason=f"no DELTA side environment at {REFERENCE_DIR} (benchmarks/reference/make_env_selectors.sh delta)",
)
def test_probabilities_match_the_released_reweight_prac() -> None:
    """benchmarks/reference/compare_delta.py --quick: fedsample's p equals the released code's after
    every round of every case to 1e-12 (exit status 0). About 5 s."""
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "reference" / "compare_delta.py"
    done = subprocess.run([sys.executable, str(script), "--quick"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "| NO |" not in done.stdout
