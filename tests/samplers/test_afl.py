"""Active Federated Learning (Goetz et al. 2019): valuations, the alpha parameters, the two-part draw
against its exact inclusion probabilities, the bias (Monte Carlo, as docs/selection-systems.md
measures it), bad input, and the engine, CLI and config entry points.

Statistical checks use fixed seeds and 4 standard errors (two-sided false-failure probability about
6.3e-5 per comparison under normality) unless stated.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import digits_config, run_cli
from fedsample import Federation, FedsampleError, Selection, make_sampler, monte_carlo_statistics
from fedsample.experiments.results.bias import measure_bias
from fedsample.samplers import AFLSampler, Feedback
from fedsample.samplers.selectors.afl import afl_log_weights, valuations
from fedsample.samplers.two_phase import phase_due
from fedsample.stats import monte_carlo_bias

Z = 4.0
SIZES = (4, 9, 16, 25, 1, 36, 49, 64)
LOSSES = np.array([1.0, 0.5, 2.0, 0.2, 3.0, 0.1, 0.7, 0.4])


def _state(sampler: AFLSampler, m: int = 3, losses: np.ndarray = LOSSES) -> object:
    """The state after every client reported ``losses`` (the initial evaluation)."""
    state = sampler.init(Federation.from_sizes(SIZES), m)
    everyone = np.arange(len(SIZES), dtype=np.int64)
    selection = Selection(clients=everyone, weights=np.full(everyone.size, 1 / everyone.size))
    return sampler.update(state, Feedback(round=0, selection=selection, clients=everyone, losses=losses))


def test_valuation_is_the_summed_loss_over_the_square_root_of_the_size() -> None:
    sizes = np.array(SIZES, dtype=np.float64)
    np.testing.assert_allclose(valuations(LOSSES, sizes, 0.5), np.sqrt(sizes) * LOSSES, rtol=1e-15)
    np.testing.assert_allclose(valuations(LOSSES, sizes, 1.0), LOSSES, rtol=1e-15)
    assert valuations(np.array([np.nan, -np.inf]), np.ones(2), 0.5).tolist() == [-np.inf, -np.inf]


def test_probabilities_by_hand() -> None:
    """alpha_1 = 0.5 of 8 clients: the 4 lowest valuations get 0, the rest exp(alpha_2 v) normalised."""
    sampler = AFLSampler(zero_fraction=0.5, inverse_temperature=0.3, uniform_fraction=0.0)
    p = sampler.probabilities(_state(sampler))  # type: ignore[arg-type]
    v = np.sqrt(np.array(SIZES, dtype=np.float64)) * LOSSES
    expected = np.exp(0.3 * v)
    expected[np.argsort(v)[:4]] = 0.0
    np.testing.assert_allclose(p, expected / expected.sum(), rtol=1e-12)


def test_split_floors_the_uniform_share() -> None:
    sampler = AFLSampler(uniform_fraction=0.25)
    assert sampler.split(10, 100) == (8, 2)
    assert sampler.split(3, 100) == (3, 0)
    assert sampler.split(10, 4) == (3, 1)  # fewer available clients than m: all of them


def test_the_fedcor_port_s_split_floors_the_active_share() -> None:
    """FedCor's AFL port draws int((1 - alpha_3) m) from p: 13 + 2 at m = 15, where the default gives 14 + 1."""
    assert AFLSampler().split(15, 100) == (14, 1)
    port = AFLSampler(split_rule="floor-active")
    assert port.split(15, 100) == (13, 2)
    assert port.split(10, 100) == (9, 1)  # the two rules agree where alpha_3 m is whole
    assert port.split(15, 4) == (3, 1)
    state = _state(port, m=5)
    rng = np.random.default_rng(3)
    p = port.probabilities(state)  # type: ignore[arg-type]
    assert (p > 0).sum() == 4  # 8 clients, alpha_1 = 0.75: 4 excluded, leaving the 4 the active draw needs
    for _ in range(50):  # int(0.9 * 5) = 4 drawn from p, then one uniformly among the 4 excluded
        clients = port.sample(state, rng).clients  # type: ignore[arg-type]
        assert np.unique(clients).size == 5
        assert (p[clients] > 0).sum() == 4


def test_exclusion_leaves_enough_clients_for_the_active_draw() -> None:
    """8 clients, m = 3 all active, alpha_1 = 0.75: floor(6) would leave 2; 5 are excluded instead."""
    log_w = afl_log_weights(
        np.arange(8.0), zero_fraction=0.75, inverse_temperature=1.0, active=3, rng=np.random.default_rng(0)
    )
    assert np.isinf(log_w).sum() == 5
    assert np.isfinite(log_w[5:]).all()


def test_unknown_valuations_count_as_the_highest_known() -> None:
    log_w = afl_log_weights(
        np.array([1.0, -np.inf, 3.0]),
        zero_fraction=0.0,
        inverse_temperature=1.0,
        active=1,
        rng=np.random.default_rng(0),
    )
    assert log_w[1] == log_w[2] == 0.0


def test_ties_at_the_exclusion_cut_are_broken_at_random() -> None:
    """Equal valuations: each client is excluded in about the same share of draws."""
    excluded = np.zeros(6)
    rng = np.random.default_rng(1)
    for _ in range(3000):
        log_w = afl_log_weights(np.zeros(6), zero_fraction=0.5, inverse_temperature=1.0, active=2, rng=rng)
        excluded += np.isinf(log_w)
    share = excluded / 3000  # binomial(3000, 1/2): SE 0.0091
    assert np.all(np.abs(share - 0.5) < Z * 0.0092)


def _exact_inclusion(p: np.ndarray, active: int, uniform: int) -> np.ndarray:
    """P(i in S): ``active`` successive draws from ``p`` (every ordered outcome enumerated), then
    ``uniform`` clients uniformly among the rest."""
    n = p.size
    out = np.zeros(n)
    for order in itertools.permutations(np.flatnonzero(p > 0), active):
        probability, taken = 1.0, 0.0
        for client in order:
            probability *= p[client] / (1.0 - taken)
            taken += p[client]
        rest = np.setdiff1d(np.arange(n), order)
        out[list(order)] += probability
        out[rest] += probability * uniform / rest.size
    return out


@pytest.mark.parametrize(("alpha_1", "alpha_3", "m"), [(0.75, 0.1, 3), (0.5, 0.5, 4), (0.0, 0.0, 2), (0.25, 1.0, 3)])
def test_inclusion_frequencies_match_the_papers_definition(alpha_1: float, alpha_3: float, m: int) -> None:
    """20000 draws: every client's inclusion frequency within 4 standard errors of the exact
    P(i in S) of the two-part draw the paper defines."""
    sampler = AFLSampler(zero_fraction=alpha_1, inverse_temperature=0.5, uniform_fraction=alpha_3)
    state = _state(sampler, m)
    active, uniform = sampler.split(m, len(SIZES))
    exact = _exact_inclusion(sampler.probabilities(state), active, uniform)  # type: ignore[arg-type]
    assert exact.sum() == pytest.approx(m)
    rng = np.random.default_rng(7)
    draws = 20_000
    counts = np.zeros(len(SIZES))
    for _ in range(draws):
        selection = sampler.sample(state, rng)  # type: ignore[arg-type]
        assert np.unique(selection.clients).size == m
        counts += np.bincount(selection.clients, minlength=len(SIZES))
    se = np.sqrt(np.clip(exact * (1 - exact), 0.0, None) / draws)
    assert np.all(np.abs(counts / draws - exact) <= Z * se + 1e-9)


def test_without_the_uniform_share_excluded_clients_are_never_drawn() -> None:
    sampler = AFLSampler(zero_fraction=0.5, inverse_temperature=1.0, uniform_fraction=0.0)
    state = _state(sampler, 3)
    excluded = np.flatnonzero(sampler.probabilities(state) == 0)  # type: ignore[arg-type]
    rng = np.random.default_rng(3)
    for _ in range(500):
        assert not np.isin(sampler.sample(state, rng).clients, excluded).any()  # type: ignore[arg-type]


def test_bias_is_measured_by_monte_carlo() -> None:
    """AFL is biased: at a learned state the largest deviation of E[w_i] from p_i exceeds 8 standard
    errors over 5000 rounds (a false positive below 1e-14 per client); the report's measure (the
    fixed feedback sequence of fedsample.experiments.results.bias) detects it too."""
    sampler = AFLSampler(zero_fraction=0.5, inverse_temperature=1.0)
    state = _state(sampler, 3)
    mc = monte_carlo_statistics(sampler, state, np.random.default_rng(5), num_rounds=5_000)
    bias = monte_carlo_bias(mc, state.importances)  # type: ignore[attr-defined]
    assert bias.max_z > 8
    federation = Federation.from_sizes(np.random.default_rng(0).integers(5, 80, size=40))
    report = measure_bias([("afl", AFLSampler())], federation, 4)
    (row,) = report["samplers"]
    assert row["declared_biased"]
    assert row["detected"]


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"zero_fraction": 1.0}, "zero_fraction"),
        ({"zero_fraction": -0.1}, "zero_fraction"),
        ({"uniform_fraction": 1.5}, "uniform_fraction"),
        ({"inverse_temperature": -1.0}, "inverse_temperature"),
        ({"size_exponent": float("nan")}, "size_exponent"),
        ({"aggregation": "mean"}, "aggregation"),
        ({"initial_evaluation": 1}, "initial_evaluation"),
        ({"split_rule": "floor"}, "split_rule"),
    ],
)
def test_bad_hyperparameters_name_the_parameter(params: dict[str, object], parameter: str) -> None:
    with pytest.raises(FedsampleError, match=f"'{parameter}'") as info:
        make_sampler("afl", **params)
    assert info.value.parameter == parameter


def test_the_initial_evaluation_is_a_first_phase() -> None:
    """As high-loss: every available client's loss before the first selection, and not after."""
    sampler = AFLSampler()
    state = sampler.init(Federation.from_sizes(SIZES), 3)
    phase = phase_due(sampler, state)
    assert phase is not None
    assert phase.report == "losses"
    assert phase_due(sampler, _state(sampler)) is None
    assert phase_due(AFLSampler(initial_evaluation=False), state) is None


def test_engine_runs_afl_with_its_initial_evaluation() -> None:
    from fedsample.data.builders import FederationSpec, build_federation
    from fedsample.engine import RunSpec, TrainingConfig, simulate
    from fedsample.engine.paper_models import ModelSpec

    data = build_federation(FederationSpec(dataset="digits", partition="dirichlet", num_clients=12, alpha=0.5))
    spec = ModelSpec("softmax", data.sample_shape, data.num_classes or 1)
    config = TrainingConfig(rounds=3, num_sampled=4, local_steps=2, batch_size=5, local_lr=0.1)
    (result,) = simulate(data, spec, [RunSpec(AFLSampler(), seed=0)], config)
    assert np.isfinite(result.sampler_state.losses).all()  # every client evaluated first


def test_cli_runs_afl_from_a_toml_config_and_from_the_sampler_flag(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    tables = '[[samplers]]\nname = "afl"\nzero_fraction = 0.5\n\n[[samplers]]\nname = "md"\n'
    config = tmp_path / "afl.toml"
    config.write_text(digits_config(seeds=1, rounds=2, tables=tables))
    code, _, err = run_cli(["run", str(config), "-o", str(tmp_path / "a"), "-q"], capsys)
    assert code == 0, err
    argv = [
        "run",
        str(config),
        "-o",
        str(tmp_path / "b"),
        "-q",
        "--sampler",
        "afl",
        "--param",
        "afl.uniform_fraction=0.3",
    ]
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    assert "uniform_fraction = 0.3" in (tmp_path / "b" / "config.toml").read_text()


REFERENCE_DIR = Path(os.environ.get("FEDSAMPLE_REFERENCE_DIR", "/tmp/fedsample-reference"))


@pytest.mark.slow
@pytest.mark.skipif(
    not (REFERENCE_DIR / "venv-flsim" / "bin" / "python").is_file(),
    reason=f"no FLSim side environment at {REFERENCE_DIR} (benchmarks/reference/make_env_selectors.sh flsim)",
)
def test_afl_matches_flsims_selector_with_the_same_alphas() -> None:
    """benchmarks/reference/compare_afl.py --quick: probabilities within 1e-6 and every inclusion
    frequency within 4.5 standard errors of FLSim's, for three settings. About 15 s."""
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "reference" / "compare_afl.py"
    done = subprocess.run([sys.executable, str(script), "--quick"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
