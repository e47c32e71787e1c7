"""Paper 003's quadratic experiment: the closed form against brute-force enumeration and Monte Carlo,
the paper's eq. 155 and its claims about Fig. 1 and Fig. 4, the files of a run, and argument errors."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import sys
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsample import Federation, FedsampleError, exact_statistics, make_sampler
from fedsample.data.synthetic import QuadraticClients, heavy_first_importances, make_quadratic_clients
from fedsample.experiments.quadratic.result import SCHEMES, SETTINGS, QuadraticResult
from fedsample.experiments.quadratic.run import run_quadratic_experiment
from fedsample.experiments.quadratic.theory import (
    WeightMoments,
    expected_distance,
    expected_distances,
    paper_expected_distance,
    simulate_distances,
)
from fedsample.rng import Stream, stream_rng
from fedsample.serialization import dump_json

TRAINING: dict[str, Any] = {"local_lr": 0.1, "local_steps": 10, "server_lr": 1.0}  # Fig. 1 of 003
FIG4: dict[str, Any] = {"local_lr": 0.2, "local_steps": 1, "server_lr": 1.0}  # Fig. 4 (n = 100, m = 5)
UNBIASED = ("full", "md", "uniform")


class Setup(NamedTuple):
    clients: QuadraticClients
    importances: np.ndarray
    sampler: Any
    state: Any
    moments: WeightMoments


def setup(scheme: str, r: float, *, iid: bool, n: int = 10, m: int = 5, dim: int = 20, seed: int = 0) -> Setup:
    """The paper's problem: optima from ``seed``, importances ``p_1 = r`` (eq. 15), ``scheme``'s real sampler."""
    clients = make_quadratic_clients(num_clients=n, dim=dim, iid=iid, rng=np.random.default_rng(seed))
    return with_sampler(clients, heavy_first_importances(n, first=r), scheme, m)


def with_sampler(clients: QuadraticClients, importances: np.ndarray, scheme: str, m: int) -> Setup:
    federation = Federation.from_importances(importances)
    sampler = make_sampler(scheme)
    state = sampler.init(federation, m)
    p = federation.importances
    return Setup(clients, p, sampler, state, WeightMoments.from_design(sampler.design(state), p))


# --- brute force from the paper's definitions ---------------------------------------------------


def outcomes(scheme: str, p: np.ndarray, m: int) -> list[tuple[float, np.ndarray]]:
    """Every selection's probability and weights, from the definitions (003 eq. 5 and 6, 000 eq. 3)."""
    n = p.size
    if scheme == "full":
        return [(1.0, p.copy())]
    if scheme == "md":  # m i.i.d. draws l_k ~ p, w_i = #{k : l_k = i} / m
        return [
            (math.prod(float(p[i]) for i in draws), np.bincount(draws, minlength=n) / m)
            for draws in itertools.product(range(n), repeat=m)
        ]
    scale = n / m if scheme == "uniform" else 1.0  # "fedavg-uniform": w_i = p_i, biased
    subsets = list(itertools.combinations(range(n), m))
    out = []
    for subset in subsets:
        w = np.zeros(n)
        w[list(subset)] = scale * p[list(subset)]
        out.append((1.0 / len(subsets), w))
    return out


def brute_force_distance(
    optima: np.ndarray, p: np.ndarray, selections: list[tuple[float, np.ndarray]], theta0: np.ndarray, **training: Any
) -> float:
    """``E_S ||theta^1 - theta*||^2`` summed over every selection, local training run step by step."""
    local = []
    for target in optima:
        y = theta0.copy()
        for _ in range(training["local_steps"]):
            y = y - training["local_lr"] * (y - target)  # gradient of 1/2 ||y - theta_i*||^2
        local.append(y)
    updates = np.array(local) - theta0
    theta_star = p @ optima
    total = 0.0
    for probability, w in selections:
        theta1 = theta0 + training["server_lr"] * (w @ updates)
        total += probability * float(np.sum((theta1 - theta_star) ** 2))
    return total


class Problem(NamedTuple):
    optima: np.ndarray
    importances: np.ndarray
    num_sampled: int
    initial: np.ndarray
    training: dict[str, Any]


@st.composite
def problems(draw: st.DrawFn) -> Problem:
    """Random optima, importances, ``m`` (small enough to enumerate MD's ``n^m`` outcomes) and training."""
    n = draw(st.integers(2, 4))
    d = draw(st.integers(1, 3))
    coordinate = st.floats(-2.0, 2.0, allow_nan=False)
    optima = np.array(draw(st.lists(coordinate, min_size=n * d, max_size=n * d))).reshape(n, d)
    raw = np.array(draw(st.lists(st.floats(0.05, 1.0), min_size=n, max_size=n)))
    training = {
        "local_lr": draw(st.floats(0.01, 1.0)),
        "local_steps": draw(st.integers(1, 5)),
        "server_lr": draw(st.floats(0.1, 2.0)),
    }
    initial = np.array(draw(st.lists(coordinate, min_size=d, max_size=d)))
    return Problem(optima, raw / raw.sum(), draw(st.integers(1, min(n, 3))), initial, training)


def scale_of(problem: Problem) -> float:
    """A bound on the size of the terms of the closed form, for absolute tolerances."""
    n = problem.optima.shape[0]
    size = 1.0 + float(np.abs(problem.optima).max()) + float(np.abs(problem.initial).max()) + problem.optima.shape[1]
    return size**2 * (1.0 + problem.training["server_lr"]) ** 2 * (n / problem.num_sampled) ** 2


# --- the closed form --------------------------------------------------------------------------------


@settings(max_examples=60)
@given(problems(), st.sampled_from([*UNBIASED, "fedavg-uniform"]))
def test_closed_form_equals_enumeration(problem: Problem, scheme: str) -> None:
    """The general form with the designs' exact moments equals the average over every selection (fixed theta^0),
    for unbiased and biased schemes alike."""
    case = with_sampler(QuadraticClients(problem.optima), problem.importances, scheme, problem.num_sampled)
    closed = expected_distance(
        case.clients, case.importances, case.moments, initial=problem.initial, **problem.training
    )
    brute = brute_force_distance(
        problem.optima,
        case.importances,
        outcomes(scheme, case.importances, problem.num_sampled),
        problem.initial,
        **problem.training,
    )
    assert math.isclose(closed, brute, rel_tol=1e-9, abs_tol=1e-12 * scale_of(problem))


@settings(max_examples=40)
@given(problems(), st.sampled_from([*UNBIASED, "fedavg-uniform"]))
def test_random_initial_form_is_the_gaussian_average_of_the_fixed_form(problem: Problem, scheme: str) -> None:
    """``f(theta^0)`` is quadratic, so ``E f(Z) = f(0) + sum_k (f(e_k) + f(-e_k) - 2 f(0)) / 2`` for ``Z ~ N(0, I)``."""
    case = with_sampler(QuadraticClients(problem.optima), problem.importances, scheme, problem.num_sampled)

    def f(theta0: np.ndarray | None) -> float:
        return expected_distance(case.clients, case.importances, case.moments, initial=theta0, **problem.training)

    d = problem.optima.shape[1]
    f0 = f(np.zeros(d))
    average = f0 + sum((f(e) + f(-e) - 2.0 * f0) / 2.0 for e in np.eye(d))
    assert math.isclose(f(None), average, rel_tol=1e-9, abs_tol=1e-12 * scale_of(problem))


@settings(max_examples=40)
@given(problems(), st.sampled_from([*UNBIASED, "fedavg-uniform"]), st.booleans())
def test_recursion_first_round_is_the_one_round_form(problem: Problem, scheme: str, fixed: bool) -> None:
    case = with_sampler(QuadraticClients(problem.optima), problem.importances, scheme, problem.num_sampled)
    initial = problem.initial if fixed else None
    args = (case.clients, case.importances, case.moments)
    trajectory = expected_distances(*args, rounds=3, initial=initial, **problem.training)
    one = expected_distance(*args, initial=initial, **problem.training)
    assert trajectory.shape == (4,)
    assert math.isclose(trajectory[1], one, rel_tol=1e-9, abs_tol=1e-12 * scale_of(problem))


@settings(max_examples=40)
@given(problems(), st.booleans())
def test_full_participation_is_best_among_unbiased_schemes(problem: Problem, fixed: bool) -> None:
    """Unbiased weights add ``c^2 E||sum_i (w_i - p_i) u_i||^2 >= 0`` to Full's distance."""
    initial = problem.initial if fixed else None
    clients = QuadraticClients(problem.optima)
    values = {
        scheme: expected_distance(
            clients,
            problem.importances,
            with_sampler(clients, problem.importances, scheme, problem.num_sampled).moments,
            initial=initial,
            **problem.training,
        )
        for scheme in UNBIASED
    }
    slack = 1e-12 * scale_of(problem)
    assert values["full"] <= values["md"] + slack
    assert values["full"] <= values["uniform"] + slack


def test_iid_recursion_is_geometric() -> None:
    """iid: every ``delta_i = 0``, so ``E||theta^t - theta*||^2 = E[(1 - cW)^2]^t E||theta^0 - theta*||^2``."""
    case = setup("uniform", 0.9, iid=True, n=100, m=5)
    trajectory = expected_distances(case.clients, case.importances, case.moments, rounds=6, **FIG4)
    c = FIG4["server_lr"] * FIG4["local_lr"]  # phi = eta_l when K = 1
    factor = 1.0 - 2.0 * c * case.moments.mean.sum() + c * c * case.moments.second.sum()
    np.testing.assert_allclose(trajectory, trajectory[0] * factor ** np.arange(7), rtol=1e-12)
    assert factor > 1.0  # Fig. 4: Uniform sampling diverges


def test_moments_match_table_1() -> None:
    """MD: ``Var[w_i] = p_i (1 - p_i) / m``, ``alpha = 1/m``; Uniform: ``Var[w_i] = (n/m - 1) p_i^2``,
    ``alpha = (n - m)/(m (n - 1))`` (003, Table 1), as ``E[w_i w_j] = (1 - alpha) p_i p_j`` off the diagonal."""
    n, m = 10, 5
    for r in (0.1, 0.37, 0.9):
        p = Federation.from_importances(heavy_first_importances(n, first=r)).importances
        off = ~np.eye(n, dtype=bool)
        md = setup("md", r, iid=False).moments
        np.testing.assert_allclose(np.diag(md.second), p * (1 - p) / m + p**2, rtol=1e-12)
        np.testing.assert_allclose(md.second[off], ((1 - 1 / m) * np.outer(p, p))[off], rtol=1e-12)
        uniform = setup("uniform", r, iid=False).moments
        alpha = (n - m) / (m * (n - 1))
        np.testing.assert_allclose(np.diag(uniform.second), (n / m - 1) * p**2 + p**2, rtol=1e-12)
        np.testing.assert_allclose(uniform.second[off], ((1 - alpha) * np.outer(p, p))[off], rtol=1e-12)
        var_sum = uniform.second.sum() - uniform.mean.sum() ** 2
        assert math.isclose(var_sum, alpha * (n * np.sum(p**2) - 1), rel_tol=1e-9, abs_tol=1e-15)


# --- the paper's eq. 155 ------------------------------------------------------------------------------


@settings(max_examples=40)
@given(problems(), st.sampled_from(UNBIASED), st.booleans())
def test_eq155_equals_general_form_for_full_md_uniform(problem: Problem, scheme: str, fixed: bool) -> None:
    """With ``eta~ = eta_g phi`` (what eq. 154 in Theorem 1 gives), eq. 155 is exact for Full, MD and Uniform."""
    case = with_sampler(QuadraticClients(problem.optima), problem.importances, scheme, problem.num_sampled)
    initial = problem.initial if fixed else None
    general = expected_distance(case.clients, case.importances, case.moments, initial=initial, **problem.training)
    statistics = exact_statistics(case.sampler.design(case.state), case.importances)
    paper = paper_expected_distance(case.clients, statistics, initial=initial, **problem.training)
    assert math.isclose(paper, general, rel_tol=1e-9, abs_tol=1e-12 * scale_of(problem))


@pytest.mark.parametrize("scheme", UNBIASED)
@pytest.mark.parametrize("iid", [True, False])
def test_eq155_with_table_2_effective_lr_holds_only_for_one_local_step(scheme: str, iid: bool) -> None:
    """Table 2's ``eta~ = eta_l eta_g`` is off by ``2 eta_g (phi - eta_l) E||theta^0 - theta*||^2`` at K = 10
    (Fig. 1's setting) and exact at K = 1, where ``phi = eta_l``."""
    case = setup(scheme, 0.3, iid=iid)
    statistics = exact_statistics(case.sampler.design(case.state), case.importances)
    for training in (TRAINING, FIG4):
        general = expected_distance(case.clients, case.importances, case.moments, **training)
        table_2 = training["local_lr"] * training["server_lr"]
        paper = paper_expected_distance(case.clients, statistics, effective_lr=table_2, **training)
        phi = 1 - (1 - training["local_lr"]) ** training["local_steps"]
        theta_star = case.importances @ case.clients.optima
        start = case.clients.dim + theta_star @ theta_star  # E||theta^0 - theta*||^2
        gap = 2 * training["server_lr"] * (phi - training["local_lr"]) * start
        assert math.isclose(paper - general, gap, rel_tol=1e-9, abs_tol=1e-9)
        if training["local_steps"] == 1:
            assert math.isclose(paper, general, rel_tol=1e-12)
        else:
            assert paper > 1.5 * general


def test_eq155_fails_for_a_biased_design_and_needs_alpha() -> None:
    """Eq. 155 assumes ``E[w_i] = p_i``: FedAvg's uniform (``E[w_i] = (m/n) p_i``) breaks it, while the general
    form still equals the enumeration; clustered sampling has no ``alpha``, so eq. 155 is undefined."""
    clients = make_quadratic_clients(num_clients=4, dim=3, iid=False, rng=np.random.default_rng(3))
    p = np.array([0.4, 0.3, 0.2, 0.1])
    case = with_sampler(clients, p, "fedavg-uniform", 2)
    theta0 = np.array([0.5, -1.0, 0.25])
    general = expected_distance(clients, p, case.moments, initial=theta0, **TRAINING)
    brute = brute_force_distance(clients.optima, p, outcomes("fedavg-uniform", p, 2), theta0, **TRAINING)
    assert math.isclose(general, brute, rel_tol=1e-12)
    statistics = exact_statistics(case.sampler.design(case.state), p)
    paper = paper_expected_distance(clients, statistics, initial=theta0, **TRAINING)
    assert abs(paper - general) > 0.1 * general

    clustered = make_sampler("clustered-size")
    federation = Federation.from_sizes([10, 20, 30, 40])
    stats = exact_statistics(clustered.design(clustered.init(federation, 2)), federation.importances)
    assert stats.alpha is None
    with pytest.raises(FedsampleError, match="'statistics'") as info:
        paper_expected_distance(clients, stats, **TRAINING)
    assert "\n" not in str(info.value)


# --- the paper's claims, as exact statements of the closed form ----------------------------------------

R_GRID = [0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.9, 0.95]


def closed_forms(iid: bool, seed: int) -> dict[str, np.ndarray]:
    """One-round ``E||theta^1 - theta*||^2`` over ``theta^0 ~ N(0, I_d)`` for each scheme on ``R_GRID``."""
    return {
        scheme: np.array(
            [
                expected_distance(c.clients, c.importances, c.moments, **TRAINING)
                for c in (setup(scheme, r, iid=iid, seed=seed) for r in R_GRID)
            ]
        )
        for scheme in SCHEMES
    }


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fig1_iid_claims(seed: int) -> None:
    """iid (Fig. 1a): MD equals Full; Uniform is worse except at ``r = 1/n``, where it ties."""
    d = closed_forms(True, seed)
    np.testing.assert_allclose(d["md"], d["full"], rtol=1e-12)
    at = R_GRID.index(0.1)
    assert math.isclose(d["uniform"][at], d["md"][at], rel_tol=1e-12)
    assert np.all(np.delete(d["uniform"] / d["md"], at) > 1.0 + 1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fig1_non_iid_claims(seed: int) -> None:
    """non-iid (Fig. 1b): Full is best for every r; MD is worse than Uniform at ``r = 1/n`` and better for large r."""
    d = closed_forms(False, seed)
    assert np.all(d["full"] < np.minimum(d["md"], d["uniform"]))
    at = R_GRID.index(0.1)
    assert d["md"][at] > d["uniform"][at]
    assert np.all(d["md"][-2:] < d["uniform"][-2:])  # r = 0.9 and 0.95


# --- Monte Carlo ------------------------------------------------------------------------------------------


def z_score(runs: np.ndarray, closed: float) -> float:
    sem = float(runs.std(ddof=1)) / math.sqrt(runs.size)
    return (float(runs.mean()) - closed) / sem


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("iid", [True, False])
def test_simulation_matches_closed_form(scheme: str, iid: bool) -> None:
    """The mean of 1000 simulated rounds (theta^0 ~ N(0, I_d)) is within 4 standard errors of the closed form.

    30 comparisons (3 schemes x 2 settings x 5 r): under the normal approximation a correct closed form fails one
    with probability below 30 x 6.3e-5 ~ 2e-3; the seeds are fixed, so the outcome is reproducible.
    """
    for index, r in enumerate((0.05, 0.1, 0.3, 0.6, 0.9)):
        case = setup(scheme, r, iid=iid)
        rng = stream_rng(11, Stream.MONTE_CARLO, int(iid), SCHEMES.index(scheme), index)
        runs = simulate_distances(*case[:4], simulations=1000, rng=rng, **TRAINING)
        assert runs.shape == (1000, 2)
        closed = expected_distance(case.clients, case.importances, case.moments, **TRAINING)
        assert abs(z_score(runs[:, 1], closed)) < 4.0, (scheme, iid, r)


def test_simulation_with_a_fixed_initial_model() -> None:
    """Fixed theta^0: the outcomes with a deterministic weight sum applied to identical updates (Full; MD, and
    Uniform at r = 1/n, when iid) equal the closed form, Full's also the clients' eq. 153 updates; the other
    means are within 4 standard errors (7 comparisons, false-failure rate below ~5e-4)."""
    theta0 = np.linspace(-1.0, 1.0, 20)
    for iid in (True, False):
        for scheme in SCHEMES:
            for r in (0.1, 0.9):
                case = setup(scheme, r, iid=iid, seed=5)
                rng = stream_rng(12, Stream.MONTE_CARLO, int(iid), SCHEMES.index(scheme), int(r * 10))
                runs = simulate_distances(*case[:4], simulations=1000, rng=rng, initial=theta0, **TRAINING)
                closed = expected_distance(case.clients, case.importances, case.moments, initial=theta0, **TRAINING)
                assert np.all(runs[:, 0] == runs[0, 0])
                if scheme == "full" or (iid and (scheme == "md" or r == 0.1)):
                    np.testing.assert_allclose(runs[:, 1], closed, rtol=1e-10)
                else:
                    assert abs(z_score(runs[:, 1], closed)) < 4.0, (scheme, iid, r)
                if scheme == "full":
                    updates = case.clients.local_updates(theta0, local_lr=0.1, local_steps=10)
                    theta1 = theta0 + case.importances @ updates
                    theta_star = case.clients.global_optimum(case.importances)
                    assert math.isclose(runs[0, 1], float(np.sum((theta1 - theta_star) ** 2)), rel_tol=1e-10)


def test_fig4_simulation_follows_the_recursion() -> None:
    """Fig. 4 (n = 100, m = 5, r = 0.9, eta_l = 0.2, K = 1): the simulated mean of each of 3 rounds is within
    4 standard errors of the exact recursion (18 comparisons, false-failure rate below ~1.2e-3 if they were
    independent), and Uniform's distance grows while MD's shrinks."""
    for iid in (True, False):
        for scheme in SCHEMES:
            case = setup(scheme, 0.9, iid=iid, n=100, m=5)
            rng = stream_rng(13, Stream.MONTE_CARLO, int(iid), SCHEMES.index(scheme))
            runs = simulate_distances(*case[:4], simulations=1000, rng=rng, rounds=3, **FIG4)
            closed = expected_distances(case.clients, case.importances, case.moments, rounds=3, **FIG4)
            for t in range(1, 4):
                assert abs(z_score(runs[:, t], closed[t])) < 4.0, (scheme, iid, t)
            if scheme == "uniform":
                assert closed[3] > closed[0]
            else:
                assert closed[3] < closed[0]


# --- the run ------------------------------------------------------------------------------------------------


def test_run_writes_json_plot_and_report(tmp_path: Path) -> None:
    out = tmp_path / "quadratic"
    result = run_quadratic_experiment(out, simulations=60, r_values=[0.9, 0.1, 0.5], seed=3)
    assert result.r_values.tolist() == [0.1, 0.5, 0.9]
    assert result.theory["iid"]["md"].shape == (3, 2)
    png = (out / "plots" / "quadratic.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(png) > 10_000
    data = json.loads((out / "quadratic.json").read_text())
    again = QuadraticResult.from_dict(data)
    assert again.to_dict() == data
    assert set(data["theory"]) == set(SETTINGS)
    # Non-finite numbers (a diverged growth factor) are written in fedsample's one JSON encoding and read back.
    diverged = dataclasses.replace(
        result, growth_factor={**result.growth_factor, "md": np.array([np.inf, 1.0, np.nan])}
    )
    text = dump_json(diverged.to_dict())
    assert "Infinity" not in text
    assert '{"__float__": "inf"}' in text
    back = QuadraticResult.from_dict(json.loads(text)).growth_factor["md"]
    np.testing.assert_array_equal(back, [np.inf, 1.0, np.nan])
    # The result keeps its settings as plain ints and floats, however they were given (numpy scalars here).
    numpy_settings = dataclasses.replace(result, num_clients=np.int64(10), local_lr=np.float32(0.25))
    assert type(numpy_settings.num_clients) is int
    assert type(numpy_settings.local_lr) is float
    assert json.loads(json.dumps(numpy_settings.to_dict()))["config"]["local_lr"] == 0.25
    report = (out / "report.md").read_text()
    assert "| r | full closed form |" in report
    for setting in SETTINGS:
        assert f"## {setting}:" in report
    for claim in result.claims:
        assert claim.name in report
        assert claim.holds, claim
    assert {c.name for c in result.claims} >= {"iid: MD equals Full", "non-iid: MD worse than Uniform near r = 1/n"}
    assert result.max_abs_z < 4.0
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]


def test_run_fig4_rounds(tmp_path: Path) -> None:
    """Several rounds: trajectories per point, a plot against the round, and the divergence claim."""
    result = run_quadratic_experiment(tmp_path, simulations=100, r_values=[0.9], num_clients=100, rounds=3, **FIG4)
    assert result.simulated_mean["non-iid"]["uniform"].shape == (1, 4)
    claims = {c.name: c for c in result.claims}
    divergence = claims["MD converges while Uniform diverges at r = 0.9"]
    assert divergence.holds
    assert result.growth_factor["uniform"][0] > 1.0 > result.growth_factor["md"][0]
    assert (tmp_path / "plots" / "quadratic.png").read_bytes().startswith(b"\x89PNG")
    assert "E||theta^3 - theta*||^2" in (tmp_path / "report.md").read_text()


def test_run_without_matplotlib_names_the_plot_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes "import matplotlib" fail
    with pytest.raises(FedsampleError, match=r"fedsample\[plot\]"):
        run_quadratic_experiment(tmp_path, simulations=2, r_values=[0.5])
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_default_run_reproduces_fig1(tmp_path: Path) -> None:
    """The default run (19 r, 1000 simulations): every claim holds, including |z| <= 4 at all 114 points."""
    result = run_quadratic_experiment(tmp_path)
    assert result.r_values.size == 19
    assert 0.1 in result.r_values.tolist()
    assert all(c.holds for c in result.claims), result.claims


# --- bad arguments ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"simulations": 1}, "simulations"),
        ({"seed": -1}, "seed"),
        ({"r_values": [0.0]}, "r_values"),
        ({"r_values": [0.5, 1.0]}, "r_values"),
        ({"r_values": []}, "r_values"),
        ({"r_values": "0.5"}, "r_values"),
        ({"num_clients": 1}, "num_clients"),
        ({"num_sampled": 11}, "num_sampled"),
        ({"num_sampled": 0}, "num_sampled"),
        ({"dim": 0}, "dim"),
        ({"local_lr": 0.0}, "local_lr"),
        ({"local_steps": 0}, "local_steps"),
        ({"server_lr": -1.0}, "server_lr"),
        ({"rounds": 0}, "rounds"),
    ],
)
def test_run_rejects_bad_arguments(tmp_path: Path, kwargs: dict[str, Any], parameter: str) -> None:
    with pytest.raises(FedsampleError) as info:
        run_quadratic_experiment(tmp_path / "out", **kwargs)
    assert info.value.parameter == parameter
    message = str(info.value)
    assert "\n" not in message
    assert f"'{parameter}' parameter of run_quadratic_experiment" in message
    assert not (tmp_path / "out").exists()


def test_closed_forms_and_simulation_reject_bad_arguments() -> None:
    case = setup("md", 0.5, iid=False, n=4, m=2, dim=3)
    args = (case.clients, case.importances, case.moments)
    three_clients = WeightMoments(mean=np.full(3, 1 / 3), second=np.eye(3))
    checks = [
        ("initial", lambda: expected_distance(*args, initial=[1.0, 2.0], **TRAINING)),
        ("importances", lambda: expected_distance(case.clients, [0.5, 0.5], case.moments, **TRAINING)),
        ("importances", lambda: expected_distance(case.clients, [0.5, 0.5, 0.5, 0.5], case.moments, **TRAINING)),
        ("moments", lambda: expected_distance(case.clients, case.importances, "md", **TRAINING)),
        ("moments", lambda: expected_distance(case.clients, case.importances, three_clients, **TRAINING)),
        ("clients", lambda: expected_distance(np.zeros((4, 3)), *args[1:], **TRAINING)),  # type: ignore[arg-type]
        ("rounds", lambda: expected_distances(*args, rounds=0, **TRAINING)),
        ("local_steps", lambda: expected_distances(*args, rounds=1, local_lr=0.1, local_steps=1.5, server_lr=1.0)),
        ("second", lambda: WeightMoments(mean=np.ones(2), second=np.ones((3, 3)))),
        ("simulations", lambda: simulate_distances(*case[:4], simulations=0, rng=np.random.default_rng(0), **TRAINING)),
        ("rng", lambda: simulate_distances(*case[:4], simulations=2, rng=0, **TRAINING)),  # type: ignore[arg-type]
        ("data", lambda: QuadraticResult.from_dict({"config": {}})),
    ]
    for parameter, call in checks:
        with pytest.raises(FedsampleError) as info:
            call()
        assert info.value.parameter == parameter, parameter
        assert "\n" not in str(info.value)
        assert f"'{parameter}'" in str(info.value)
