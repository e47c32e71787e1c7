"""HiCS-FL (Chen and Vikalo, NeurIPS 2024): the heterogeneity estimate, the dissimilarity, the clustering
and the cluster-level draw, the warm-up and the fallback to clustered sampling, the bias (Monte Carlo),
bad input, and the engine, Flower, CLI and config entry points. The comparison with the authors'
released code is benchmarks/reference/hicsfl_compare.py (run here when its side environment exists).

Statistical checks use fixed seeds and 4.5 standard errors (a two-sided false-failure probability below
7e-6 per comparison under normality) unless stated.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
from scipy.cluster.hierarchy import ClusterWarning, linkage

from cli_helpers import digits_config, run_cli
from fedsample import Federation, FedsampleError, Feedback, Selection, make_sampler, monte_carlo_statistics
from fedsample.experiments.results.bias import measure_bias
from fedsample.samplers import HiCSFLSampler, HiCSState, adjusted_rand_index
from fedsample.samplers.selectors.hicsfl import cut_into_clusters, estimated_entropies, rows_linkage
from fedsample.stats import monte_carlo_bias

C, H = 3, 4  # a Linear(4, 3) output layer: 12 weights then 3 biases
WIDTH = C * H + C
SIZES = (30, 10, 60, 100, 25, 45, 80, 15, 50, 70, 20, 40)
N = len(SIZES)


def _layers(rng: np.random.Generator, n: int, scale: float = 0.002) -> np.ndarray:
    """Output-layer updates ``[W_i (C x H), b_i]``: client i leans towards class i mod C."""
    lean = np.full((n, C), -1.0 / C)
    lean[np.arange(n), np.arange(n) % C] += 1.0
    weights = scale * lean[:, :, None] * rng.uniform(0.2, 1.0, size=(n, 1, H))
    biases = scale * lean + 0.01 * scale * rng.standard_normal((n, C))
    return np.concatenate([weights.reshape(n, C * H), biases], axis=1)


def _feedback(t: int, clients: np.ndarray, layers: np.ndarray, prefix: int = 5) -> Feedback:
    updates = np.concatenate([np.ones((clients.size, prefix)), layers], axis=1)
    selection = Selection(clients=clients, weights=np.full(clients.size, 1.0 / clients.size))
    return Feedback(round=t, selection=selection, clients=clients, updates=updates)


def _sampler(**params: object) -> HiCSFLSampler:
    return HiCSFLSampler(**{"num_classes": C, "output_inputs": H, "num_clusters": 3, "horizon": 50, **params})  # type: ignore[arg-type]


def _reported(sampler: HiCSFLSampler, scale: float = 0.002, m: int = 3) -> HiCSState:
    """The state after every client reported its output layer once (round 0), then at round 10."""
    state = sampler.init(Federation.from_sizes(SIZES), m)
    everyone = np.arange(N)
    state = sampler.update(state, _feedback(0, everyone, _layers(np.random.default_rng(0), N, scale)))
    return replace(state, round=10)


def test_estimated_entropy_is_the_entropy_of_the_tempered_softmax() -> None:
    rng = np.random.default_rng(1)
    scores = rng.normal(0, 0.003, size=(6, 5))
    ours = estimated_entropies(scores, 0.001)
    for row, h in zip(scores, ours, strict=True):
        p = np.exp(row / 0.001)
        assert h == pytest.approx(scipy.stats.entropy(p / p.sum()), rel=1e-12)
    assert estimated_entropies(np.zeros((1, 5)), 0.001)[0] == pytest.approx(np.log(5))
    assert np.isfinite(estimated_entropies(np.array([[1e6, 0.0]]), 1e-3)).all()  # no overflow


@pytest.mark.parametrize("estimator", ["weight", "bias"])
def test_the_estimator_reads_the_weight_row_means_or_the_bias(estimator: str) -> None:
    sampler = _sampler(estimator=estimator)
    layers = _layers(np.random.default_rng(2), N)
    state = sampler.init(Federation.from_sizes(SIZES), 3)
    state = sampler.update(state, _feedback(0, np.arange(N), layers))
    scores = layers[:, : C * H].reshape(N, C, H).mean(axis=2) if estimator == "weight" else layers[:, C * H :]
    np.testing.assert_allclose(state.entropies, estimated_entropies(scores, sampler.temperature), rtol=1e-12)
    np.testing.assert_array_equal(state.vectors, layers)


def test_dissimilarity_is_the_angle_plus_the_entropy_gap_and_zero_to_a_silent_client() -> None:
    sampler = _sampler()
    layers = _layers(np.random.default_rng(3), N)
    state = sampler.init(Federation.from_sizes(SIZES), 3)
    state = sampler.update(state, _feedback(0, np.arange(N - 1), layers[:-1]))  # the last client is silent
    a, b = layers[0], layers[1]
    angle = np.arccos(np.clip(a @ b / np.linalg.norm(a) / np.linalg.norm(b), -1, 1))
    assert state.angles[0, 1] == pytest.approx(angle, rel=1e-12)
    assert np.all(state.angles[N - 1] == 0)
    assert np.all(state.angles[:, N - 1] == 0)
    assert state.entropies[N - 1] == pytest.approx(np.log(C))


def test_rows_clustering_is_wards_tree_of_the_rows_cut_into_m_clusters() -> None:
    """The released code clusters the rows of the dissimilarity matrix as points (SciPy's linkage of the
    square matrix, scikit-learn's AgglomerativeClustering): the same tree here, the same M clusters."""
    rng = np.random.default_rng(4)
    points = np.concatenate([rng.normal(c, 0.3, size=(8, 3)) for c in (0.0, 2.0, 5.0, 9.0)])
    rho = np.sqrt(((points[:, None] - points[None]) ** 2).sum(axis=2))
    ours = rows_linkage(rho)
    with pytest.warns(ClusterWarning):  # SciPy sees a distance matrix: the released code's call, on purpose
        theirs = linkage(rho, "ward")  # the square matrix read as 32 observations in R^32
    np.testing.assert_allclose(ours[:, 2], theirs[:, 2], rtol=1e-7)
    labels = cut_into_clusters(ours, 4)
    assert adjusted_rand_index(labels, np.repeat(np.arange(4), 8)) == 1.0
    sklearn = pytest.importorskip("sklearn.cluster")
    with warnings.catch_warnings():  # SciPy, under scikit-learn, sees a distance matrix: the released call
        warnings.simplefilter("ignore", ClusterWarning)
        released = sklearn.AgglomerativeClustering(n_clusters=4, linkage="ward").fit_predict(rho)
    assert adjusted_rand_index(labels, released) == 1.0


def test_the_warm_up_visits_the_clients_in_id_order() -> None:
    sampler = _sampler()
    state = sampler.init(Federation.from_sizes(SIZES), 5)
    rng = np.random.default_rng(5)
    assert sampler.warmup_rounds(state) == 2
    for t in range(2):
        clients = sampler.sample(state, rng).clients
        assert clients.tolist() == list(range(5 * t, 5 * t + 5))
        state = sampler.update(state, _feedback(t, clients, _layers(rng, N)[clients]))
    assert sampler.sample(state, rng).clients.size == 5


def test_cluster_level_draws_follow_the_annealed_entropies() -> None:
    """Each draw picks cluster k with probability ∝ exp(gamma (R - t) Hbar_k / R) among the clusters not
    yet full: the first client drawn (one draw, m = 1) lands in cluster k that often (6000 draws)."""
    sampler = _sampler(annealing=30.0)
    state = _reported(sampler)
    assert np.var(state.entropies) < sampler.variance_threshold
    one = replace(state, num_sampled=1, round=20)  # m = 1: a warm-up of 12 rounds
    probabilities = sampler.cluster_probabilities(one)
    mean = np.array([state.entropies[state.clusters == k].mean() for k in range(3)])
    logits = 30.0 * (50 - 20) * mean / 50
    np.testing.assert_allclose(probabilities, np.exp(logits) / np.exp(logits).sum(), rtol=1e-12)
    rng = np.random.default_rng(6)
    hits = np.zeros(3)
    for _ in range(6000):
        (client,) = sampler.sample(one, rng).clients
        hits[state.clusters[client]] += 1
    se = np.sqrt(probabilities * (1 - probabilities) / 6000)
    assert np.all(np.abs(hits / 6000 - probabilities) <= 4.5 * se + 1e-12)
    # m = 3 draws hold no cluster beyond its members, and a round's clients are distinct.
    for _ in range(200):
        clients = sampler.sample(state, rng).clients
        assert np.unique(clients).size == 3


def test_large_entropy_variance_falls_back_to_clustered_sampling_rows() -> None:
    """var(H) >= variance_threshold: one client drawn per row of Algorithm 2 of 000 on the same tree, so
    E[count_i] = m p_i (Proposition 1), within 4.5 standard errors over 8000 rounds."""
    sampler = _sampler(variance_threshold=0.0)
    state = _reported(sampler)
    p = state.importances
    mc = monte_carlo_statistics(sampler, state, np.random.default_rng(7), num_rounds=8000)
    rows = state.rows.dense_rows()
    np.testing.assert_allclose(rows.sum(axis=0), 3 * p, rtol=1e-12)
    counts = np.zeros(N)
    rng = np.random.default_rng(8)
    for _ in range(8000):
        np.add.at(counts, sampler.sample(state, rng).clients, 1.0)
    se = np.sqrt(3 * p * (1 - p) / 8000) + 1e-12
    assert np.all(np.abs(counts / 8000 - 3 * p) <= 4.5 * se)
    assert monte_carlo_bias(mc, p).max_z < 4.5  # weights count_i / m: unbiased in this branch


def test_refresh_warm_up_keeps_the_first_report() -> None:
    sampler = _sampler(refresh="warm-up")
    state = sampler.init(Federation.from_sizes(SIZES), 3)
    rng = np.random.default_rng(9)
    first = _layers(rng, N)
    for t in range(4):  # the warm-up's 4 rounds: 3 clients each
        clients = np.arange(3 * t, 3 * t + 3)
        state = sampler.update(state, _feedback(t, clients, first[clients]))
    later = sampler.update(state, _feedback(4, np.arange(3), _layers(rng, 3, scale=0.5)))
    np.testing.assert_array_equal(later.vectors, state.vectors)
    moved = _sampler().update(state, _feedback(4, np.arange(3), _layers(rng, 3, scale=0.5)))
    assert not np.array_equal(moved.vectors, state.vectors)


def test_bias_is_measured_by_monte_carlo() -> None:
    """Cluster-level sampling favours the clusters of high estimated entropy and weighs the chosen
    clients 1/m: over 5000 rounds the largest deviation of E[w_i] from p_i exceeds 8 standard errors;
    the report's measure (fixed feedback sequence of fedsample.experiments.results.bias) detects it too."""
    sampler = _sampler(annealing=30.0)
    state = _reported(sampler)
    mc = monte_carlo_statistics(sampler, state, np.random.default_rng(10), num_rounds=5000)
    assert monte_carlo_bias(mc, state.importances).max_z > 8
    federation = Federation.from_sizes(np.random.default_rng(0).integers(5, 80, size=40))
    # fedsample.experiments.results.bias's update vectors have 16 entries: a Linear(3, 4) output layer.
    report = measure_bias([("hics-fl", HiCSFLSampler(num_classes=4, output_inputs=3))], federation, 4)
    (row,) = report["samplers"]
    assert row["declared_biased"]
    assert row["detected"]


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"num_classes": 1}, "num_classes"),
        ({"output_inputs": 0}, "output_inputs"),
        ({"estimator": "mean"}, "estimator"),
        ({"temperature": 0.0}, "temperature"),
        ({"entropy_weight": -1.0}, "entropy_weight"),
        ({"annealing": float("inf")}, "annealing"),
        ({"horizon": 0}, "horizon"),
        ({"num_clusters": 0}, "num_clusters"),
        ({"variance_threshold": -0.1}, "variance_threshold"),
        ({"clustering": "condensed"}, "clustering"),
        ({"refresh": "never"}, "refresh"),
        ({"aggregation": "mean"}, "aggregation"),
    ],
)
def test_bad_hyperparameters_name_the_parameter(params: dict[str, object], parameter: str) -> None:
    with pytest.raises(FedsampleError, match=f"'{parameter}'.*Got") as info:
        make_sampler("hics-fl", **params)
    assert info.value.parameter == parameter


def test_updates_it_cannot_read_are_refused_in_one_line() -> None:
    state = HiCSFLSampler().init(Federation.from_sizes(SIZES), 3)
    layers = _layers(np.random.default_rng(11), 3)
    with pytest.raises(FedsampleError, match=r"'output_inputs'.*Got None") as info:
        HiCSFLSampler().update(state, _feedback(0, np.arange(3), layers))
    assert info.value.parameter == "output_inputs"
    short = HiCSFLSampler(num_classes=C, output_inputs=50)
    with pytest.raises(FedsampleError, match=r"= 153 entries\. Got 'vectors of 20 entries'") as info:
        short.update(state, _feedback(0, np.arange(3), layers))
    assert info.value.parameter == "feedback"
    selection = Selection(clients=np.arange(3), weights=np.full(3, 1 / 3))
    with pytest.raises(FedsampleError, match="'updates'") as info:
        _sampler().update(state, Feedback(round=0, selection=selection, clients=np.arange(3)))
    assert "\n" not in str(info.value)
    with pytest.raises(FedsampleError, match="at most 5 clients"):
        HiCSFLSampler(max_clients=5).init(Federation.from_sizes(SIZES), 3)


def test_engine_hands_the_output_layer_of_the_mlp() -> None:
    """The engine's update vectors end with the papers' MLP's output layer (Linear(hidden, classes)):
    after three rounds the kept clients hold finite output-layer updates and estimated entropies."""
    pytest.importorskip("torch")
    from fedsample.data.builders import FederationSpec, build_federation
    from fedsample.engine import RunSpec, TrainingConfig, simulate
    from fedsample.engine.paper_models import ModelSpec

    data = build_federation(FederationSpec(dataset="digits", partition="dirichlet", num_clients=12, alpha=0.5))
    spec = ModelSpec("mlp", data.sample_shape, data.num_classes or 1, hidden=16)
    config = TrainingConfig(rounds=3, num_sampled=4, local_steps=2, batch_size=5, local_lr=0.1)
    sampler = HiCSFLSampler(num_classes=10, output_inputs=16, num_clusters=3, horizon=3)
    (result,) = simulate(data, spec, [RunSpec(sampler, seed=0)], config)
    state = result.sampler_state
    assert state.vectors.shape == (12, 10 * 16 + 10)
    reported = np.any(state.vectors != 0, axis=1)
    assert reported.sum() == 12  # the warm-up (3 rounds of 4) visits every client
    assert np.all(state.entropies[reported] < np.log(10))
    final = {k: v for k, v in result.params.items() if k.startswith("layers.1")}
    assert set(final) == {"layers.1.weight", "layers.1.bias"}


def test_the_flower_strategy_hands_the_replies_output_layer() -> None:
    """The strategy's round reaches the sampler: its state equals the sampler's own update on the replies'
    update vectors (the last layer of the arrays sent: w is 2 x 2 and b 2, a Linear(2, 2))."""
    pytest.importorskip("flwr")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integrations"))
    from flower_grid import FakeGrid, as_node, client_of

    from fedsample.integrations.flower import FedsampleStrategy, to_array_record, train_reply

    theta = {"w": np.array([[1.0, -2.0], [0.5, 0.0]], dtype=np.float32), "b": np.array([0.25, -0.75], np.float32)}

    def trained(client: int) -> dict[str, np.ndarray]:
        return {
            k: (v + np.float32(0.1) * np.cos(np.arange(v.size, dtype=np.float32) * (client + 1)).reshape(v.shape))
            for k, v in theta.items()
        }

    sampler = HiCSFLSampler(num_classes=2, output_inputs=2, num_clusters=2, horizon=10)
    with as_node(0):
        strategy = FedsampleStrategy(sampler, sizes=[30, 10, 60, 100, 25, 45], num_sampled=3, seed=2)
        messages = FakeGrid([901, 17, 4400, 250, 33, 7]).configure(strategy, to_array_record(theta))
        before = strategy.sampler_state
        replies = [train_reply(m, trained(client_of(m)), num_examples=10) for m in messages]  # type: ignore[arg-type]
        strategy.aggregate_train(1, replies)
    record = strategy.rounds[-1]
    updates = np.stack(
        [np.concatenate([(trained(c)[k].astype(np.float64) - theta[k]).ravel() for k in theta]) for c in record.clients]
    )
    feedback = Feedback(round=0, selection=record.selection, clients=record.clients, updates=updates)
    expected = sampler.update(before, feedback)
    np.testing.assert_allclose(strategy.sampler_state.vectors, expected.vectors, rtol=1e-6, atol=1e-7)
    # float32 arrays on the wire; the temperature (1e-3) scales their rounding up in the entropies.
    np.testing.assert_allclose(strategy.sampler_state.entropies, expected.entropies, rtol=1e-4, atol=1e-9)


def test_cli_runs_hics_fl_from_a_toml_config_and_from_the_sampler_flag(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    tables = (
        '[[samplers]]\nname = "hics-fl"\noutput_inputs = 16\nnum_clusters = 3\nhorizon = 5\n\n'
        '[[samplers]]\nname = "md"\n'
    )
    config = tmp_path / "hics.toml"
    config.write_text(digits_config(seeds=1, rounds=5, tables=tables))
    code, _, err = run_cli(["run", str(config), "-o", str(tmp_path / "a"), "-q"], capsys)
    assert code == 0, err
    argv = ["run", str(config), "-o", str(tmp_path / "b"), "-q", "--sampler", "hics-fl"]
    argv += ["--param", "hics-fl.output_inputs=16", "--param", "hics-fl.estimator=bias"]
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    assert 'estimator = "bias"' in (tmp_path / "b" / "config.toml").read_text()


REFERENCE_DIR = Path(os.environ.get("FEDSAMPLE_REFERENCE_DIR", "/tmp/fedsample-reference"))


@pytest.mark.slow
@pytest.mark.skipif(
    not (REFERENCE_DIR / "venv-hicsfl" / "bin" / "python").is_file(),
    reason=f"no HiCS-FL side environment at {REFERENCE_DIR} (benchmarks/reference/fedcor_hicsfl_env.sh hicsfl)",
)
def test_matches_the_released_selection() -> None:
    """benchmarks/reference/hicsfl_compare.py --quick: every figure within its tolerance. About 6 s."""
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "reference" / "hicsfl_compare.py"
    done = subprocess.run([sys.executable, str(script), "--quick"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "| NO |" not in done.stdout


def test_the_preset_compares_both_with_their_rivals_and_reads_the_mlps_output_layer() -> None:
    from fedsample.experiments.presets.catalogue import preset_configs

    ((_, config),) = preset_configs("correlation-and-heterogeneity")
    names = [entry.name for entry in config.samplers]
    assert names == ["md", "clustered-similarity", "power-of-choice", "divfl", "fedcor", "hics-fl"]
    (hics,) = [entry for entry in config.samplers if entry.name == "hics-fl"]
    assert hics.params["output_inputs"] == config.model.hidden
    assert hics.params["horizon"] == config.training.rounds
    assert config.report.measure_bias


def test_past_the_horizon_the_clusters_are_drawn_uniformly_and_an_underflow_never_gives_nan() -> None:
    sampler = _sampler(annealing=30.0)
    state = _reported(sampler)
    count = int(state.clusters.max()) + 1
    for late in (50, 51, 500):  # at and past the horizon R = 50: uniform, not reversed
        np.testing.assert_allclose(sampler.cluster_probabilities(replace(state, round=late)), np.full(count, 1 / count))
    # Weights so far apart that every cluster but the heterogeneous ones underflows to 0: once those are
    # full, the next draws are uniform over the open clusters instead of NaN.
    extreme = _sampler(annealing=1000.0, variance_threshold=1.0)
    entropies = np.where(state.clusters == 0, 0.0, 1.0)
    early = replace(state, round=0, num_sampled=N, entropies=entropies)
    probabilities = extreme.cluster_probabilities(early)
    assert probabilities[0] == 0.0
    clients = extreme.sample(early, np.random.default_rng(2)).clients
    assert np.unique(clients).size == N
