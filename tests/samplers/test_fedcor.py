"""FedCor (Tang et al., CVPR 2022): the Gaussian process's low-rank selection and likelihood against their
dense forms, the warm-up / refit schedule through the two-phase contract, the bias (Monte Carlo), bad
input, and the engine, Flower, CLI and config entry points. The comparison with the authors' released
code is benchmarks/reference/fedcor_compare.py (run here when its side environment exists).

Statistical checks use fixed seeds and state their thresholds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from cli_helpers import digits_config, run_cli
from fedsample import Federation, FedsampleError, Feedback, Selection, make_sampler, monte_carlo_statistics
from fedsample.experiments.results.bias import measure_bias
from fedsample.samplers import FedCorSampler, FedCorState
from fedsample.samplers.selectors.fedcor_gp import LossChanges, greedy_selection, negative_log_likelihood
from fedsample.samplers.two_phase import phase_due
from fedsample.stats import monte_carlo_bias

SIZES = (30, 10, 60, 100, 25, 45, 80, 15, 50, 70, 20, 40)
N = len(SIZES)
# Warm-up rounds 0 and 1, refits at rounds 5, 10, ...; small fits so that the tests run fast.
SMALL = {"warmup_rounds": 1, "refit_interval": 5, "warmup_iterations": 30, "refit_iterations": 10}


def _dense_greedy(x: np.ndarray, noise: float, p: np.ndarray, discount: np.ndarray, candidates: np.ndarray, m: int):  # type: ignore[no-untyped-def]
    """The selection on the dense covariance: score, pick, condition Sigma on the pick (rank-one downdate)."""
    sigma = x.T @ x + noise**2 * np.eye(x.shape[1])
    unchosen = list(range(x.shape[1]))
    chosen = []
    for _ in range(m):
        block = sigma[np.ix_(unchosen, unchosen)]
        scores = (p[unchosen] @ block) * discount[unchosen] / np.sqrt(np.diag(block))
        scores[~np.isin(unchosen, candidates)] = -np.inf
        k = unchosen[int(np.argmax(scores))]
        chosen.append(k)
        unchosen.remove(k)
        sigma = sigma - np.outer(sigma[:, k], sigma[k, :]) / sigma[k, k]
    return chosen


@pytest.mark.parametrize("seed", range(5))
def test_low_rank_selection_equals_the_dense_rank_one_downdates(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, dim, m = 60, 6, 9
    x = rng.standard_normal((dim, n)) / np.sqrt(dim)
    p = rng.dirichlet(np.ones(n))
    discount = rng.uniform(0.3, 1.0, size=n)
    candidates = np.sort(rng.choice(n, size=45, replace=False))
    ours = greedy_selection(x, 0.05, p, discount, candidates, m)
    assert ours.tolist() == _dense_greedy(x, 0.05, p, discount, candidates, m)


def test_likelihood_and_its_gradient_equal_the_dense_forms() -> None:
    """The Woodbury forms give the dense Gaussian log-density (scipy) to 1e-9 relative, and the gradient
    equals central finite differences to 1e-5 relative."""
    rng = np.random.default_rng(3)
    dim, n = 4, 15
    x = rng.standard_normal((dim, n)) / 2
    observed = np.ones((3, n), dtype=bool)
    observed[1, :4] = False  # one vector misses four clients
    changes = LossChanges(values=rng.standard_normal((3, n)), observed=observed, weights=np.array([0.6, 0.8, 1.0]))
    mean = 0.1 * rng.standard_normal(n)
    loss, gradient = negative_log_likelihood(x, 0.1, mean, changes)
    dense = 0.0
    for e in range(3):
        ids = np.flatnonzero(observed[e])
        cov = x[:, ids].T @ x[:, ids] + 0.01 * np.eye(ids.size)
        dense -= changes.weights[e] * multivariate_normal(mean[ids], cov).logpdf(changes.values[e, ids])
    assert loss == pytest.approx(dense, rel=1e-9)
    numeric = np.zeros_like(x)
    for index in np.ndindex(*x.shape):
        step = np.zeros_like(x)
        step[index] = 1e-6
        up = negative_log_likelihood(x + step, 0.1, mean, changes)[0]
        down = negative_log_likelihood(x - step, 0.1, mean, changes)[0]
        numeric[index] = (up - down) / 2e-6
    np.testing.assert_allclose(gradient, numeric, rtol=1e-5, atol=1e-5 * np.abs(numeric).max())


def test_correlated_clients_are_not_chosen_together() -> None:
    """Three groups whose losses move together (embeddings along three axes) and m = 3: one client of
    each group, the heaviest first (conditioning on a client removes its group's covariance)."""
    x = np.zeros((3, 9))
    x[np.arange(9) // 3, np.arange(9)] = 1.0
    p = np.array([1, 2, 1, 3, 3, 3, 1, 1, 5], dtype=float)
    chosen = greedy_selection(x, 0.01, p / p.sum(), np.ones(9), np.arange(9), 3)
    assert sorted(np.asarray(chosen) // 3) == [0, 1, 2]
    assert chosen[0] == 3  # the group of weight 9 (3 + 3 + 3), its equal clients tied: the lower id


def test_schedule_and_candidates() -> None:
    sampler = FedCorSampler(warmup_rounds=3, refit_interval=5)
    assert [t for t in range(13) if sampler.random_round(t)] == [0, 1, 2, 3, 5, 10]
    assert [t for t in range(13) if sampler.report_due(t)] == [0, 1, 2, 3, 4, 5, 6, 10, 11]
    state = sampler.init(Federation.from_sizes(SIZES), 3)
    assert phase_due(sampler, state) == sampler.first_phase()
    assert sampler.first_phase().report == "losses"
    rng = np.random.default_rng(0)
    assert sampler.draw_candidates(state, np.arange(N), rng).clients.tolist() == list(range(N))
    later = FedCorState(**{**state.__dict__, "round": 7})
    assert sampler.draw_candidates(later, np.arange(N), rng).clients.size == 0


def _report(sampler: FedCorSampler, state: FedCorState, t: int, losses: np.ndarray, rng: Any) -> FedCorState:
    candidates = sampler.draw_candidates(state, np.arange(N), rng)
    ids = candidates.clients
    return sampler.update(state, Feedback(round=t, selection=candidates, clients=ids, losses=losses[ids]))


def test_loss_changes_are_stored_fitted_and_drive_the_discounted_selection() -> None:
    sampler = FedCorSampler(**SMALL, discount=0.5)
    state = sampler.init(Federation.from_sizes(SIZES), 3)
    start = state.embedding
    rng = np.random.default_rng(1)
    losses = [np.linspace(2.0, 3.0, N), np.linspace(1.5, 2.0, N), np.linspace(1.0, 1.8, N)]
    state = _report(sampler, state, 0, losses[0], rng)
    assert state.change_rounds.size == 0
    assert state.losses_round == 0
    state = _report(sampler, state, 1, losses[1], rng)
    np.testing.assert_allclose(state.changes, [losses[1] - losses[0]])
    assert state.change_rounds.tolist() == [0]
    np.testing.assert_array_equal(state.embedding, start)  # not fitted before the end of the warm-up
    assert state.planned.size == 0  # round 1 is random
    state = _report(sampler, state, 2, losses[2], rng)  # Delta_1, the first fit, round 2 chosen by the process
    assert state.change_rounds.tolist() == [0, 1]
    assert not np.allclose(state.embedding, start)
    np.testing.assert_allclose(state.mean, ((losses[1] - losses[0]) * 0.95 + (losses[2] - losses[1])) / 1.95)
    planned = state.planned
    assert planned.size == 3
    expected = greedy_selection(state.embedding, 0.01, state.importances, np.ones(N), np.arange(N), 3)
    assert planned.tolist() == expected.tolist()
    assert np.array_equal(sampler.sample(state, rng).clients, np.sort(planned))
    assert np.all(state.discount[planned] == 0.5)
    state = _report(sampler, state, 3, losses[2], rng)  # no candidates in round 3: nobody reports
    assert state.planned.size == 3
    assert state.round == 4


def test_a_refit_resets_the_discounts() -> None:
    sampler = FedCorSampler(**SMALL)
    state = sampler.init(Federation.from_sizes(SIZES), 3)
    rng = np.random.default_rng(2)
    losses = np.linspace(2.0, 3.0, N)
    for t in range(7):  # reports at 0, 1, 2, 5, 6; refit with Delta_5 at round 6
        state = _report(sampler, state, t, losses, rng)
        losses = losses - 0.1 * np.arange(N) / N
        if t == 5:
            assert np.any(state.discount < 1.0)
    assert state.change_rounds.tolist() == [0, 1, 5]
    assert np.count_nonzero(state.discount < 1.0) == 3  # only round 6's choice


def test_clients_missing_from_a_report_are_left_out_of_that_change() -> None:
    sampler = FedCorSampler(**SMALL)
    state = sampler.init(Federation.from_sizes(SIZES), 3)
    everyone = Selection(clients=np.arange(N), weights=np.full(N, 1 / N))
    state = sampler.update(state, Feedback(round=0, selection=everyone, clients=np.arange(N), losses=np.ones(N)))
    some = np.array([0, 2, 5])
    losses = np.full(3, 0.5)
    losses[1] = np.nan  # not finite: not reported
    state = sampler.update(state, Feedback(round=1, selection=everyone, clients=some, losses=losses))
    assert np.flatnonzero(state.observed[0]).tolist() == [0, 5]
    np.testing.assert_allclose(state.changes[0, [0, 5]], -0.5)


def test_selection_is_among_the_available_clients() -> None:
    sampler = FedCorSampler(**SMALL)
    state = sampler.init(Federation.from_sizes(SIZES), 3)
    rng = np.random.default_rng(4)
    available = np.array([1, 3, 4, 7, 8, 10])
    losses = np.linspace(1.0, 2.0, N)
    for t in range(4):
        candidates = sampler.draw_candidates(state, available, rng)
        ids = candidates.clients
        feedback = Feedback(round=t, selection=candidates, clients=ids, losses=losses[ids], available=available)
        state = sampler.update(state, feedback)
        losses = losses * 0.9
        assert set(sampler.sample(state, rng).clients.tolist()) <= set(available.tolist())


def test_a_report_without_losses_and_a_round_already_reported_are_refused() -> None:
    sampler = FedCorSampler()
    state = sampler.init(Federation.from_sizes(SIZES), 3)
    everyone = Selection(clients=np.arange(N), weights=np.full(N, 1 / N))
    with pytest.raises(FedsampleError, match="'losses'") as info:
        sampler.update(state, Feedback(round=0, selection=everyone, clients=np.arange(N)))
    assert info.value.parameter == "feedback"
    state = sampler.update(state, Feedback(round=0, selection=everyone, clients=np.arange(N), losses=np.ones(N)))
    with pytest.raises(FedsampleError, match="round >= 1") as info:
        sampler.update(state, Feedback(round=0, selection=everyone, clients=np.arange(N), losses=np.ones(N)))
    assert info.value.parameter == "feedback"
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"warmup_rounds": -1}, "warmup_rounds"),
        ({"refit_interval": 0}, "refit_interval"),
        ({"history": 0}, "history"),
        ({"decay": 0.0}, "decay"),
        ({"discount": 1.5}, "discount"),
        ({"dimension": 0}, "dimension"),
        ({"noise": 0.0}, "noise"),
        ({"noise": float("nan")}, "noise"),
        ({"warmup_iterations": 2.5}, "warmup_iterations"),
        ({"learning_rate": -0.01}, "learning_rate"),
        ({"aggregation": "mean"}, "aggregation"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_hyperparameters_name_the_parameter(params: dict[str, object], parameter: str) -> None:
    with pytest.raises(FedsampleError, match=f"'{parameter}'.*Got") as info:
        make_sampler("fedcor", **params)
    assert info.value.parameter == parameter


def test_bias_is_measured_by_monte_carlo() -> None:
    """A selection round is deterministic given the state: the chosen clients weigh 1/m every draw and the
    others 0, so E[w_i] misses p_i by far more than 5 standard errors (here infinitely many: no spread).
    The report's measure (fedsample.experiments.results.bias, whole two-phase rounds on its fixed values) detects it."""
    sampler = FedCorSampler(**SMALL)
    state = sampler.init(Federation.from_sizes(SIZES), 3)
    rng = np.random.default_rng(5)
    losses = np.linspace(2.0, 3.0, N)
    for t in range(4):
        state = _report(sampler, state, t, losses, rng)
        losses = losses - np.random.default_rng(t).uniform(0, 0.2, N)
    mc = monte_carlo_statistics(sampler, state, np.random.default_rng(6), num_rounds=2_000)
    bias = monte_carlo_bias(mc, state.importances)
    assert bias.max_bias > 0.1
    assert not bias.max_z < 5  # infinite: a client never (or always) drawn
    federation = Federation.from_sizes(np.random.default_rng(0).integers(5, 80, size=40))
    report = measure_bias([("fedcor", FedCorSampler(**SMALL))], federation, 4)
    (row,) = report["samplers"]
    assert row["declared_biased"]
    assert row["detected"]


def test_a_round_at_a_hundred_thousand_clients_holds_no_quadratic_array() -> None:
    """n = 10^5: the state is O(n D) (the n x n covariance would take 80 GB); a fit and a selection run."""
    n = 100_000
    sampler = FedCorSampler(warmup_rounds=0, refit_interval=10, warmup_iterations=2, dimension=4)
    state = sampler.init(Federation.from_sizes(np.random.default_rng(0).integers(10, 100, size=n)), 10)
    losses = np.random.default_rng(2).uniform(1.0, 2.0, n)
    for t in range(2):  # round 0 random and measured, round 1 chosen by the process after the fit
        candidates = sampler.draw_candidates(state, np.arange(n), np.random.default_rng(t))
        ids = candidates.clients
        state = sampler.update(state, Feedback(round=t, selection=candidates, clients=ids, losses=losses[ids]))
        losses = losses - 0.01 * np.random.default_rng(t).random(n)
    assert state.change_rounds.tolist() == [0]
    assert state.planned.size == 10
    assert max(array.nbytes for array in (state.embedding, state.changes, state.observed)) <= 8 * 4 * n


def test_engine_measures_every_clients_loss_change() -> None:
    """After two rounds the stored change is every client's mean loss over all its data at the model
    after round 0 minus the same at the initial model (float32 forward passes: 1e-5 relative)."""
    torch = pytest.importorskip("torch")
    from fedsample.data.builders import FederationSpec, build_federation
    from fedsample.engine import RunSpec, TrainingConfig, simulate
    from fedsample.engine.paper_models import ModelSpec

    data = build_federation(FederationSpec(dataset="digits", partition="dirichlet", num_clients=12, alpha=0.5))
    spec = ModelSpec("softmax", data.sample_shape, data.num_classes or 1)
    config = TrainingConfig(rounds=1, num_sampled=3, local_steps=2, batch_size=5, local_lr=0.1)
    sampler = FedCorSampler(**SMALL)
    (first,) = simulate(data, spec, [RunSpec(sampler, seed=0)], config)
    (second,) = simulate(data, spec, [RunSpec(sampler, seed=0)], config.__class__(**{**config.__dict__, "rounds": 2}))

    def client_losses(params: dict[str, np.ndarray]) -> np.ndarray:
        module = spec.build()
        module.load_state_dict({k: torch.as_tensor(v) for k, v in params.items()})
        out = []
        with torch.no_grad():
            for a, b in zip(data.train_indptr[:-1], data.train_indptr[1:], strict=True):
                x, y = torch.tensor(data.train_features[a:b]), torch.tensor(data.train_targets[a:b])
                out.append(torch.nn.functional.cross_entropy(module(x), y).item())
        return np.array(out)

    before = first.sampler_state.losses  # every client's loss at the initial model (round 0's report)
    assert first.sampler_state.losses_observed.all()
    np.testing.assert_allclose(
        second.sampler_state.changes[0], client_losses(first.params) - before, rtol=1e-4, atol=1e-5
    )
    assert second.history.computed_clients.tolist() == [12, 12]


def test_the_flower_strategy_refuses_fedcor_in_one_line() -> None:
    pytest.importorskip("flwr")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integrations"))
    from flower_grid import FakeGrid, as_node

    from fedsample.integrations.flower import FedsampleStrategy, to_array_record

    theta = {"w": np.zeros((2, 2), dtype=np.float32)}
    with as_node(0):
        strategy = FedsampleStrategy(FedCorSampler(), sizes=[10, 20, 30, 40], num_sampled=2, seed=1)
        with pytest.raises(FedsampleError, match=r"report norms \(not losses\)") as info:
            FakeGrid([1, 2, 3, 4]).configure(strategy, to_array_record(theta))
    assert "\n" not in str(info.value)


def test_cli_runs_fedcor_from_a_toml_config_and_from_the_sampler_flag(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    tables = (
        '[[samplers]]\nname = "fedcor"\nwarmup_rounds = 1\nrefit_interval = 2\nwarmup_iterations = 20\n'
        'refit_iterations = 5\n\n[[samplers]]\nname = "md"\n'
    )
    config = tmp_path / "fedcor.toml"
    config.write_text(digits_config(seeds=1, rounds=4, tables=tables))
    code, _, err = run_cli(["run", str(config), "-o", str(tmp_path / "a"), "-q"], capsys)
    assert code == 0, err
    argv = ["run", str(config), "-o", str(tmp_path / "b"), "-q", "--sampler", "fedcor"]
    argv += ["--param", "fedcor.warmup_rounds=2", "--param", "fedcor.warmup_iterations=10"]
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    assert "warmup_rounds = 2" in (tmp_path / "b" / "config.toml").read_text()
    code, _, err = run_cli(["run", str(config), "-o", str(tmp_path / "c"), "--param", "fedcor.decay=2"], capsys)
    assert code == 2
    assert ".decay' key" in err
    assert "Got 2" in err


REFERENCE_DIR = Path(os.environ.get("FEDSAMPLE_REFERENCE_DIR", "/tmp/fedsample-reference"))


@pytest.mark.slow
@pytest.mark.skipif(
    not (REFERENCE_DIR / "venv-fedcor" / "bin" / "python").is_file(),
    reason=f"no FedCor side environment at {REFERENCE_DIR} (benchmarks/reference/fedcor_hicsfl_env.sh fedcor)",
)
def test_matches_the_released_gaussian_process() -> None:
    """benchmarks/reference/fedcor_compare.py --quick: every figure within its tolerance (exit status 0).
    About 2 minutes the first time (the released side is cached after)."""
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "reference" / "fedcor_compare.py"
    done = subprocess.run([sys.executable, str(script), "--quick"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "| NO |" not in done.stdout


def test_finite_but_enormous_losses_leave_the_process_finite() -> None:
    sampler = FedCorSampler(**SMALL)
    state = sampler.init(Federation.from_sizes(SIZES), 3)
    rng = np.random.default_rng(3)
    reports = [np.linspace(1.0, 2.0, N), np.where(np.arange(N) % 2, 2e200, -1.5e200), np.linspace(1.0, 2.0, N)]
    for t, losses in enumerate([*reports, np.linspace(0.5, 1.0, N)]):
        state = _report(sampler, state, t, losses, rng)
        assert np.isfinite(state.embedding).all()
        assert np.isfinite(state.mean).all()
        state.check_invariants()
    assert np.all(np.abs(state.changes) < 1e100)  # the changes too large to square were not stored
