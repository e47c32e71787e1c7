"""The policies for unknown participation rates: FedAU's interval estimate, MIFA's and FedVARP's memory.

Statistical checks state their confidence where they make them; seeds are fixed, so every outcome
is deterministic. The bias of each policy is measured as in ``tests/stats/test_participation.py``:
the mean aggregated update ``U_t`` against the full-participation update ``sum_i p_i u_i``, per
coordinate, at family-wise confidence 99.9%. Rounds of the policies with state are dependent (the
estimates and the memory carry over), so the standard error comes from batch means (50 batches)
and the critical value is Student's t with 49 degrees of freedom, Bonferroni over the coordinates.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsample import Federation
from fedsample.engine.aggregation import memory_step, new_memory
from fedsample.errors import FedsampleError
from fedsample.participation import (
    BernoulliAvailability,
    Dropout,
    IntervalEstimator,
    MarkovAvailability,
    Participation,
    select_participants,
    settle_participants,
)
from fedsample.participation.policies import remembered_weights
from fedsample.samplers import FullSampler, MDSampler
from fedsample.stats.participation import participation_statistics

NUM_CLIENTS = 20
DIMENSION = 5
BATCHES = 50
# Student's t with 49 degrees of freedom at two-sided 1 - 0.001 / 5 (Bonferroni over 5 coordinates).
T_CRITICAL = 4.01


# --- FedAU's estimate ---------------------------------------------------------------------------


def _truncated_geometric_moments(rate: float, cutoff: int) -> tuple[float, float]:
    """Mean and variance of ``min(G, K)``, ``G`` geometric on {1, 2, ...} with success probability ``rate``."""
    j = np.arange(1, min(cutoff, 200_000) + 1, dtype=np.float64)
    survival = (1 - rate) ** (j - 1)  # P(G >= j)
    mean = float(survival.sum())
    second = float(((2 * j - 1) * survival).sum())
    return mean, second - mean**2


@settings(max_examples=25)
@given(
    rates=st.lists(st.floats(0.05, 1.0), min_size=1, max_size=6),
    cutoff=st.sampled_from([1, 2, 5, 20, 100_000]),
    seed=st.integers(0, 2**31),
)
def test_fedau_s_estimate_converges_to_the_mean_truncated_interval(rates: list[float], cutoff: int, seed: int) -> None:
    """Under Bernoulli returns with probability ``r``, the recorded intervals are i.i.d. ``min(G, K)``, so
    ``omega`` is their sample mean: within 5 standard errors of ``(1 - (1 - r)^K) / r`` (``1 / r`` for the
    authors' default ``K``); a false failure below 6e-7 per client and example."""
    r = np.asarray(rates)
    estimator = IntervalEstimator(r.size, cutoff=cutoff)
    rng = np.random.default_rng(seed)
    clients = np.arange(r.size)
    for _ in range(8000):
        estimator.observe(clients, rng.random(r.size) < r)
    omega = estimator.factors(clients)
    for i, rate in enumerate(r):
        mean, variance = _truncated_geometric_moments(float(rate), cutoff)
        assert math.isclose(mean, (1 - (1 - rate) ** min(cutoff, 200_000)) / rate, rel_tol=1e-9)
        stderr = math.sqrt(variance / estimator.count[i])
        assert abs(omega[i] - mean) <= 5 * stderr + 1e-12


def test_fedau_s_intervals_follow_the_authors_bookkeeping() -> None:
    """Returns at rounds 2 and 3 with K = 3: intervals 3 (rounds 0..2), 1, then 3 at the cutoff (rounds 4..6)."""
    estimator = IntervalEstimator(1, cutoff=3)
    factors = []
    for back in [False, False, True, True, False, False, False, True]:
        factors.append(float(estimator.factors([0])[0]))
        estimator.observe([0], [back])
    # 1 until the first interval; then the running mean of 3, (3, 1), (3, 1, 3).
    assert factors == [1.0, 1.0, 1.0, 3.0, 2.0, 2.0, 2.0, 7 / 3]
    assert estimator.counts()["interval_count"].tolist() == [4]  # the last return closed an interval of 1


# --- the weights each policy settles ------------------------------------------------------------------


def _selected(dropout: np.ndarray, round: int = 0) -> tuple[Any, Participation]:
    federation = Federation.from_sizes([10, 20, 30, 40])
    sampler = FullSampler()
    state = sampler.init(federation, 4)
    setting = Participation(dropout=Dropout(dropout, seed=2))
    return select_participants(sampler, state, setting, seed=0, round=round, num_clients=4), setting


def test_the_policies_settle_their_weights() -> None:
    selected, setting = _selected(np.array([0.0, 0.99, 0.0, 0.99]))  # clients 1 and 3 fail (seed 2, round 0)
    assert selected.returns.tolist() == [True, False, True, False]
    p = np.array([0.1, 0.2, 0.3, 0.4])
    finite = np.ones(4, dtype=bool)

    def settle(policy: str, estimator: Any = None) -> np.ndarray:
        chosen = Participation(dropout=setting.dropout, policy=policy)  # type: ignore[arg-type]
        settled = settle_participants(
            selected, finite, chosen, seed=0, round=0, num_kept=4, estimator=estimator, importances=p
        )
        return settled.weights

    estimator = IntervalEstimator(4)
    estimator.total[:] = [5, 1, 9, 1]
    estimator.count[:] = [2, 1, 3, 1]
    np.testing.assert_array_equal(settle("fedau", estimator), [0.1 * 2.5, 0.0, 0.3 * 3.0, 0.0])
    assert estimator.gap.tolist() == [0, 1, 0, 1]  # fed after being read
    np.testing.assert_array_equal(settle("mifa"), [0.1, 0.0, 0.3, 0.0])  # p_i of the kept clients
    np.testing.assert_allclose(settle("fedvarp"), [0.25, 0.0, 0.75, 0.0])  # renormalised
    with pytest.raises(FedsampleError, match=r"'estimator' parameter of settle_participants must be an Interval"):
        settle("fedau")
    with pytest.raises(FedsampleError, match=r"'importances' parameter of settle_participants must be every"):
        settle_participants(selected, finite, Participation(policy="mifa"), seed=0, round=0, num_kept=4, estimator=None)


def test_a_client_never_seen_contributes_nothing_to_the_memory() -> None:
    p = np.array([0.1, 0.2, 0.3, 0.4])
    seen = np.zeros(4, dtype=bool)
    # MIFA: the aggregate holds p_i u_i for every client seen so far, this round's included.
    assert remembered_weights("mifa", p, seen, np.array([1]), np.array([0.2])).tolist() == [0, 0.2, 0, 0]
    assert remembered_weights("mifa", p, seen, np.array([], dtype=np.int64), np.array([])).tolist() == [0, 0.2, 0, 0]
    # FedVARP: the memory's average, plus c_i for a client kept for the first time; no move without a kept client.
    seen = np.zeros(4, dtype=bool)
    assert remembered_weights("fedvarp", p, seen, np.array([0, 2]), np.array([0.25, 0.75])).tolist() == [
        0.25,
        0,
        0.75,
        0,
    ]
    assert remembered_weights("fedvarp", p, seen, np.array([], dtype=np.int64), np.array([])).tolist() == [0] * 4
    np.testing.assert_allclose(
        remembered_weights("fedvarp", p, seen, np.array([2, 3]), np.array([0.4, 0.6])), [0.1, 0, 0.3, 0.6]
    )


def test_memory_step_remembers_the_latest_update_and_moves_along_the_memory() -> None:
    globals_ = {"w": torch.zeros(2, 3)}  # two runs, three coordinates
    memory = new_memory(globals_, num_clients=4)
    p = np.array([0.1, 0.2, 0.3, 0.4])
    first = {"w": torch.tensor([[1.0, 0, 0], [0, 2.0, 0], [0, 0, 3.0]])}
    # Run 0 keeps clients 0 and 2, run 1 keeps client 1; MIFA: c_i = p_i.
    runs, clients = np.array([0, 0, 1]), np.array([0, 2, 1])
    delta, memory = memory_step(memory, first, runs, clients, p[clients], p[clients], still_without_kept=False)
    np.testing.assert_allclose(delta["w"].numpy(), [[0.1, 0.6, 0], [0, 0, 0.6]], rtol=1e-6)
    # Next round nobody is kept: MIFA moves along the memory's average, FedVARP does not move.
    none = np.zeros(0, dtype=np.int64)
    mifa, _ = memory_step(memory, None, none, none, np.zeros(0), np.zeros(0), still_without_kept=False)
    varp, _ = memory_step(memory, None, none, none, np.zeros(0), np.zeros(0), still_without_kept=True)
    np.testing.assert_allclose(mifa["w"].numpy(), [[0.1, 0.6, 0], [0, 0, 0.6]], rtol=1e-6)
    assert not varp["w"].any()
    # Client 0 of run 0 again with a new update: its old one is replaced, not added.
    again = {"w": torch.tensor([[5.0, 0, 0]])}
    delta, memory = memory_step(memory, again, np.array([0]), np.array([0]), [1.0], [0.1], still_without_kept=True)
    np.testing.assert_allclose(delta["w"].numpy()[0], [0.1 + 1.0 * (5 - 1), 0.6, 0], rtol=1e-6)  # FedVARP, c = 1
    np.testing.assert_allclose(memory.average["w"].numpy()[0], [0.1 + 0.1 * (5 - 1), 0.6, 0], rtol=1e-6)
    np.testing.assert_array_equal(memory.updates["w"][0, 0].numpy(), [5.0, 0, 0])


# --- bias, as the existing policies' is measured ----------------------------------------------------


def _setting(process: str) -> tuple[Participation, np.ndarray]:
    rates = np.linspace(0.15, 0.9, NUM_CLIENTS)
    if process == "markov":
        availability: Any = MarkovAvailability.stationary(rates, off_to_on=0.1, seed=7)
    else:
        availability = BernoulliAvailability(rates, seed=7)
    return Participation(availability=availability), rates


POLICIES = ("renormalise", "inverse-probability", "ignore", "fedau", "mifa", "fedvarp")


def _aggregates(process: str, *, rounds: int, warmup: int, noise: float) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """``U_t`` per policy (``rounds x d``) from the same draws, full participation asked every round, and
    the full-participation update. Client ``i``'s update in round ``t`` is ``u_i + noise * e_it``, where
    ``u_i`` trends with its availability (the rarely available clients pull one way)."""
    participation, rates = _setting(process)
    rng = np.random.default_rng(3)
    federation = Federation.from_sizes(rng.integers(20, 200, NUM_CLIENTS))
    updates = rng.normal(size=(NUM_CLIENTS, DIMENSION)) - 4.0 * rates[:, None]
    p = np.asarray(federation.importances)
    sampler = FullSampler()
    state = sampler.init(federation, NUM_CLIENTS)
    seed = 11
    run = participation.for_run(seed)
    settings_ = {policy: Participation(availability=run.availability, policy=policy) for policy in POLICIES}
    estimators = {policy: s.new_estimator(NUM_CLIENTS) for policy, s in settings_.items()}
    memories = {
        policy: new_memory({"u": torch.zeros(1, DIMENSION, dtype=torch.float64)}, NUM_CLIENTS)
        for policy in ("mifa", "fedvarp")
    }
    out = {policy: np.zeros((rounds, DIMENSION)) for policy in POLICIES}
    noise_rng = np.random.default_rng(5)
    for t in range(warmup + rounds):
        selected = select_participants(sampler, state, run, seed=seed, round=t, num_clients=NUM_CLIENTS)
        finite = np.ones(selected.clients.size, dtype=bool)
        fresh = updates[selected.clients] + noise * noise_rng.normal(size=(selected.clients.size, DIMENSION))
        for policy in POLICIES:
            settled = settle_participants(
                selected,
                finite,
                settings_[policy],
                seed=seed,
                round=t,
                num_kept=NUM_CLIENTS,
                estimator=estimators[policy],
                importances=p,
            )
            kept = np.flatnonzero(settled.kept)
            if policy in memories:
                ids = selected.clients[kept]
                delta, memories[policy] = memory_step(
                    memories[policy],
                    {"u": torch.as_tensor(fresh[kept])},
                    np.zeros(ids.size, dtype=np.int64),
                    ids,
                    settled.weights[kept],
                    p[ids],
                    still_without_kept=policy == "fedvarp",
                )
                value = delta["u"][0].numpy()
            else:
                value = settled.weights[kept] @ fresh[kept]
            if t >= warmup:
                out[policy][t - warmup] = value
    return out, p @ updates


def _batch_z(samples: np.ndarray, target: np.ndarray) -> float:
    """``max |mean - target| / se`` with the standard error of :data:`BATCHES` batch means."""
    means = samples.reshape(BATCHES, -1, samples.shape[1]).mean(axis=1)
    stderr = means.std(axis=0, ddof=1) / math.sqrt(BATCHES)
    return float(np.max(np.abs(samples.mean(axis=0) - target) / stderr))


@pytest.mark.parametrize("process", ["bernoulli", "markov"])
def test_the_bias_of_each_policy_under_unknown_heterogeneous_participation(process: str) -> None:
    aggregated, full = _aggregates(process, rounds=5_000, warmup=200, noise=1.0)
    z = {policy: _batch_z(aggregated[policy], full) for policy in POLICIES}
    relative = {
        policy: float(np.max(np.abs(aggregated[policy].mean(axis=0) - full)) / np.max(np.abs(full)))
        for policy in POLICIES
    }
    print(process, {policy: f"z {z[policy]:.2f}, rel {relative[policy]:.4f}" for policy in POLICIES})
    # Known rates, and the memory of every client's last update: no bias detected.
    for policy in ("inverse-probability", "mifa", "fedvarp"):
        assert z[policy] < T_CRITICAL, policy
    # FedAU learns 1/a_i from the intervals: no bias detected after 200 rounds either.
    assert z["fedau"] < T_CRITICAL
    # Renormalising over-weights the clients that are often there; ignoring loses the absent ones' weight.
    assert z["renormalise"] > T_CRITICAL
    assert relative["renormalise"] > 0.05
    assert z["ignore"] > T_CRITICAL
    assert relative["ignore"] > 0.2


def test_the_statistics_measure_the_memory_policies_warm_up_exactly() -> None:
    """With fixed updates MIFA's weight on client i in round t is p_i once i was seen, so over rounds
    0..R-1 its mean is ``p_i (1 - (1/R) sum_t (1 - a)^(t+1))`` under Bernoulli availability ``a``. 2000
    clients of one rate give independent replicates: the mean over clients within 5 standard errors
    (a false failure below 6e-7 per check)."""
    num_clients, rounds, a = 2000, 40, 0.05
    federation = Federation.from_sizes(np.full(num_clients, 10))
    sampler = FullSampler()
    state = sampler.init(federation, num_clients)
    setting = Participation(availability=BernoulliAvailability(a, seed=1))
    stats = participation_statistics(
        sampler, state, setting, num_sampled=num_clients, num_rounds=rounds, policies=("mifa", "fedvarp", "fedau")
    )
    # FedVARP gives a client kept for the first time c_i = 1 / |K| instead: conditioned on i kept,
    # |K| = 1 + Binomial(n - 1, a), E[1 / |K|] = (1 - (1 - a)^n) / (n a), so E[e_i(t)] / p_i = 1 - (1 - a)^(t + n).
    exact = {
        "mifa": 1 - np.mean([(1 - a) ** (t + 1) for t in range(rounds)]),
        "fedvarp": 1 - np.mean([(1 - a) ** (t + num_clients) for t in range(rounds)]),
    }
    for policy, expected in exact.items():
        ratio = stats.policies[policy].mean_weights.value * num_clients  # E[e_i] / p_i per client
        assert abs(ratio.mean() - expected) <= 5 * ratio.std(ddof=1) / math.sqrt(num_clients), policy
    # Warm-up left out: every weight is p_i once every client was seen (here after 400 rounds).
    settled = participation_statistics(
        sampler, state, setting, num_sampled=num_clients, num_rounds=5, policies=("mifa",), warmup=400
    )
    np.testing.assert_allclose(settled.policies["mifa"].mean_weights.value, 1 / num_clients)


def test_the_statistics_refuse_unknown_policies_in_one_line() -> None:
    federation = Federation.from_sizes([5, 5])
    sampler = MDSampler()
    state = sampler.init(federation, 1)
    with pytest.raises(FedsampleError, match=r"'policy' parameter of participation_statistics must be one of") as info:
        participation_statistics(sampler, state, Participation(), num_sampled=1, num_rounds=10, policies=("mifaa",))
    assert "\n" not in str(info.value)
    assert "Did you mean 'mifa'" in str(info.value)
    with pytest.raises(FedsampleError, match=r"'fedau_cutoff' parameter of Participation must be an int in"):
        Participation(policy="fedau", fedau_cutoff=0)


@pytest.mark.parametrize(
    ("counts", "parameter"),
    [
        ({"interval_gap": np.zeros(1, np.int64)}, "interval_gap"),  # one value, not one per client
        ({"interval_total": -np.ones(3, np.int64)}, "interval_total"),
        ({"interval_count": np.full(3, 0.5)}, "interval_count"),
        ({"interval_gap": np.full(3, 7, np.int64)}, "interval_gap"),  # at the cutoff: never stored
        ({"interval_count": np.full(3, 9, np.int64)}, "interval_gap"),  # more intervals than rounds
    ],
)
def test_a_checkpoints_interval_counts_are_checked_before_use(counts: dict[str, Any], parameter: str) -> None:
    from fedsample.errors import FedsampleError
    from fedsample.participation.estimators import ReturnRateEstimator

    estimator = IntervalEstimator(3, cutoff=7)
    stored = {**{name: values.copy() for name, values in estimator.counts().items()}, **counts}
    with pytest.raises(FedsampleError, match=f"'{parameter}' parameter of IntervalEstimator"):
        estimator.load_counts(stored)
    assert not estimator.count.any()  # left as it was
    rates = ReturnRateEstimator(2)
    with pytest.raises(FedsampleError, match="'return_returned' parameter of ReturnRateEstimator"):
        rates.load_counts({"return_selected": np.array([1, 1]), "return_returned": np.array([2, 0])})
