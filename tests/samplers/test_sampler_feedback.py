"""How the learning samplers read a round's feedback (paper 001's ``a_m = lambda_m^2 ||g_m||^2``).

* ``feedback="update"`` (default): ``||g_m|| = ||theta_m - theta|| / (eta_l sqrt(N))``, the update
  scaled back to a gradient (paper 001's FedAvg feedback); ``"gradient"``: the mean mini-batch
  gradient's norm; ``"loss"`` (VRB only, the released code's choice): the local loss.
* A missing field raises FedsampleError naming 'feedback'.
* Clients that were selected but did not return are simply absent from ``feedback.clients``: the
  update goes on with the others, and the absent ones are treated as unobserved. So are clients
  whose feedback is NaN or infinite.
* The coefficient ``c_m`` read back from the selection (``w_m / lambda_m``) is ``N_m / (K p_m)`` with
  replacement and Des Raj's ``((1 - S_{k-1}) / p_m + (K - k)) / K`` without.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from fedsample import Federation, FedsampleError, Feedback, dumps
from fedsample.samplers import (
    AdaptiveOSMDSampler,
    AvareSampler,
    MABSSampler,
    OSMDSampler,
    UniformISSampler,
    VRBSampler,
)
from fedsample.samplers.adaptive._distribution import observed_feedback
from sampler_cases import (
    DISTRIBUTION_CASES,
    WITHOUT_REPLACEMENT_CASES,
    client_norms,
    contract_federation,
    make_case,
    synthetic_feedback,
)

LEARNERS: dict[str, Callable[..., Any]] = {
    "osmd": lambda **kw: OSMDSampler(eta=0.01, **kw),
    "adaptive-osmd": lambda **kw: AdaptiveOSMDSampler(**kw),
    "mabs": lambda **kw: MABSSampler(**kw),
    "vrb": lambda **kw: VRBSampler(**kw),
    "avare": lambda **kw: AvareSampler(**kw),
}
FEDERATION = Federation.from_sizes([5, 1, 3, 8, 2, 6, 4, 1])
LAM = FEDERATION.importances


def _selection_and_ids(sampler: Any, state: Any, seed: int) -> tuple[Any, np.ndarray]:
    selection = sampler.sample(state, np.random.default_rng(seed))
    return selection, np.unique(selection.clients)


# --- the feedback a_m ----------------------------------------------------------------------------


def test_observed_feedback_kinds() -> None:
    """a_m = lambda_m^2 s_m^2 with s_m = update_norm / (eta_l sqrt(N)), gradient_norm or loss."""
    sampler = OSMDSampler()
    state = sampler.init(FEDERATION, 3)
    selection, ids = _selection_and_ids(sampler, state, 0)
    update_norms = np.linspace(0.5, 2.0, ids.size)
    feedback = Feedback(
        round=0,
        selection=selection,
        clients=ids,
        update_norms=update_norms,
        gradient_norms=update_norms * 3,
        losses=update_norms + 1,
        local_lr=0.05,
        local_steps=10,
    )
    lam = LAM[ids]
    expected = {
        "update": lam**2 * (update_norms / (0.05 * np.sqrt(10))) ** 2,
        "gradient": lam**2 * (3 * update_norms) ** 2,
        "loss": lam**2 * (update_norms + 1) ** 2,
    }
    for kind, a in expected.items():
        clients, observed, _ = observed_feedback(feedback, LAM, kind=kind)
        np.testing.assert_array_equal(clients, ids)
        np.testing.assert_allclose(observed, a, rtol=1e-14)
    # Without eta_l and N the update norm is read as the gradient itself (one step of rate 1).
    bare = Feedback(round=0, selection=selection, clients=ids, update_norms=update_norms)
    np.testing.assert_allclose(observed_feedback(bare, LAM, kind="update")[1], lam**2 * update_norms**2, rtol=1e-14)


@pytest.mark.parametrize("replace", [True, False], ids=["with-replacement", "without-replacement"])
@pytest.mark.parametrize("name", list(LEARNERS))
def test_update_and_gradient_feedback_agree_when_they_describe_the_same_gradient(name: str, replace: bool) -> None:
    """feedback="update" with ||theta_m - theta|| = eta_l sqrt(N) ||g_m|| learns exactly what
    feedback="gradient" learns from ||g_m|| (eta_l = 0.05, N = 10), round after round."""
    by_update = LEARNERS[name](replace=replace, feedback="update")
    by_gradient = LEARNERS[name](replace=replace, feedback="gradient")
    state_u, state_g = by_update.init(FEDERATION, 3), by_gradient.init(FEDERATION, 3)
    norms = client_norms(8) * 0.3
    rng = np.random.default_rng(1)
    for t in range(6):
        selection = by_update.sample(state_u, rng)
        ids = np.unique(selection.clients)
        common = {"round": t, "selection": selection, "clients": ids, "local_lr": 0.05, "local_steps": 10}
        state_u = by_update.update(
            state_u, Feedback(update_norms=norms[ids] * 0.05 * np.sqrt(10), gradient_norms=None, **common)
        )
        state_g = by_gradient.update(state_g, Feedback(update_norms=None, gradient_norms=norms[ids], **common))
        np.testing.assert_allclose(by_update.probabilities(state_u), by_gradient.probabilities(state_g), rtol=1e-9)
    assert not np.allclose(by_update.probabilities(state_u), 1 / 8)


MISSING = [
    pytest.param(name, kind, id=f"{name}-{kind}")
    for name in LEARNERS
    for kind in (["update", "gradient", "loss"] if name == "vrb" else ["update", "gradient"])
]
FIELD = {"update": "update_norms", "gradient": "gradient_norms", "loss": "losses"}


@pytest.mark.parametrize(("name", "kind"), MISSING)
def test_missing_feedback_field_raises(name: str, kind: str) -> None:
    """A sampler whose feedback kind needs a field the Feedback lacks raises FedsampleError naming
    'feedback' and the missing field, instead of learning from garbage."""
    sampler = LEARNERS[name](feedback=kind)
    state = sampler.init(FEDERATION, 3)
    selection, ids = _selection_and_ids(sampler, state, 2)
    fields = {"update_norms": np.ones(ids.size), "gradient_norms": np.ones(ids.size), "losses": np.ones(ids.size)}
    fields[FIELD[kind]] = None
    feedback = Feedback(round=0, selection=selection, clients=ids, **fields)
    with pytest.raises(FedsampleError, match="'feedback'") as info:
        sampler.update(state, feedback)
    assert info.value.parameter == "feedback"
    assert FIELD[kind] in str(info.value)


def test_only_vrb_accepts_loss_feedback() -> None:
    """ "loss" is VRB's option alone (paper 001's released VRB); the others reject it at construction."""
    VRBSampler(feedback="loss")
    for build in (OSMDSampler, AdaptiveOSMDSampler, MABSSampler, AvareSampler, UniformISSampler):
        with pytest.raises(FedsampleError, match="'feedback'"):
            build(feedback="loss")


# --- clients that do not return ------------------------------------------------------------------


@pytest.mark.parametrize("replace", [True, False], ids=["with-replacement", "without-replacement"])
@pytest.mark.parametrize("name", list(LEARNERS))
def test_selected_clients_that_do_not_return_are_unobserved(name: str, replace: bool) -> None:
    """Every other round one selected client does not return (it is absent from feedback.clients).
    The update goes on: the state stays valid (a distribution with the floor), the absent client's
    own entries do not change, and for OSMD, Adaptive-OSMD and MABS the step equals the one where
    it returned a zero update (no information, no step)."""
    sampler = LEARNERS[name](replace=replace)
    state = sampler.init(FEDERATION, 4)
    norms = client_norms(8)
    rng = np.random.default_rng(3)
    dropped_any = False
    for t in range(12):
        selection = sampler.sample(state, rng)
        ids = np.unique(selection.clients)
        returned = ids[1:] if t % 2 == 0 and ids.size > 1 else ids
        dropped = np.setdiff1d(ids, returned)
        dropped_any |= dropped.size > 0
        new = sampler.update(state, synthetic_feedback(t, selection, norms, returned=returned))
        p = sampler.probabilities(new)
        assert p.sum() == pytest.approx(1.0, abs=1e-12)
        assert p.min() >= sampler.alpha / 8 * (1 - 1e-12)
        if name in ("mabs", "vrb", "avare"):
            np.testing.assert_array_equal(new.scores[dropped], state.scores[dropped])
            np.testing.assert_array_equal(new.observed[dropped], state.observed[dropped])
        if name in ("osmd", "adaptive-osmd", "mabs") and dropped.size:
            zeroed = norms.copy()
            zeroed[dropped] = 0.0
            as_zero = sampler.update(state, synthetic_feedback(t, selection, zeroed))
            np.testing.assert_allclose(sampler.probabilities(as_zero), p, rtol=1e-12)
        state = new
    assert dropped_any


@pytest.mark.parametrize("bad", [np.nan, np.inf, 1e200], ids=["nan", "inf", "overflow"])
@pytest.mark.parametrize("name", list(LEARNERS))
def test_non_finite_feedback_counts_as_not_returned(name: str, bad: float) -> None:
    """A client reporting a NaN or infinite norm (diverged local training), or one whose a_m
    overflows, is treated like a client that did not return: the state learns exactly what it
    learns without it, and never becomes NaN."""
    sampler = LEARNERS[name]()
    state = sampler.init(FEDERATION, 4)
    norms = client_norms(8)
    rng = np.random.default_rng(6)
    for t in range(5):
        selection = sampler.sample(state, rng)
        ids = np.unique(selection.clients)
        poisoned = norms.copy()
        poisoned[ids[0]] = bad
        new = sampler.update(state, synthetic_feedback(t, selection, poisoned))
        without = sampler.update(state, synthetic_feedback(t, selection, norms, returned=ids[1:]))
        assert dumps(new) == dumps(without)
        assert np.all(np.isfinite(sampler.probabilities(new)))
        state = new


@pytest.mark.parametrize("case", DISTRIBUTION_CASES)
def test_a_round_where_nobody_returns(case: str) -> None:
    """No client returned: the update still advances the round, leaves the learned distribution
    where it was, and does not need any feedback field."""
    federation = contract_federation()
    sampler, state = make_case(case, federation, 3)
    selection = sampler.sample(state, np.random.default_rng(0))
    empty = Feedback(round=state.round, selection=selection, clients=np.zeros(0, dtype=np.int64))
    new = sampler.update(state, empty)
    assert new.round == state.round + 1
    np.testing.assert_allclose(sampler.probabilities(new), sampler.probabilities(state), rtol=1e-12)


def test_feedback_from_a_client_that_was_not_selected_is_ignored() -> None:
    """A client listed in feedback.clients but absent from the selection has c_m = 0: no step."""
    sampler = OSMDSampler(eta=0.05)
    state = sampler.init(FEDERATION, 2)
    selection, ids = _selection_and_ids(sampler, state, 4)
    stranger = int(np.setdiff1d(np.arange(8), ids)[0])
    norms = client_norms(8)
    honest = sampler.update(state, synthetic_feedback(0, selection, norms))
    padded = sampler.update(state, synthetic_feedback(0, selection, norms, returned=np.append(ids, stranger)))
    assert dumps(padded) == dumps(honest)


# --- the coefficient c_m read back from the selection ---------------------------------------------


@pytest.mark.parametrize("case", DISTRIBUTION_CASES)
def test_coefficient_read_back_from_the_selection(case: str) -> None:
    """c_m = w_m / lambda_m equals N_m / (K p_m) with replacement (N_m = times drawn; K = 6 of 8
    clients, so repeats occur) and Des Raj's ((1 - S_{k-1}) / p_m + (K - k)) / K without."""
    federation = contract_federation()
    k = 6
    sampler, state = make_case(case, federation, k)
    p = sampler.probabilities(state)
    rng = np.random.default_rng(5)
    repeats = 0
    for t in range(40):
        selection = sampler.sample(state, rng)
        ids = np.unique(selection.clients)
        feedback = synthetic_feedback(t, selection, client_norms(8))
        clients, _, c = observed_feedback(feedback, federation.importances, kind="update")
        np.testing.assert_array_equal(clients, ids)
        expected = np.zeros(8)
        if case in WITHOUT_REPLACEMENT_CASES:
            assert ids.size == k
            taken = 0.0
            for position, client in enumerate(selection.clients, start=1):
                expected[client] = ((1 - taken) / p[client] + (k - position)) / k
                taken += p[client]
        else:
            counts = np.bincount(selection.clients, minlength=8)
            repeats += int((counts > 1).any())
            expected = counts / (k * p)
        np.testing.assert_allclose(c, expected[ids], rtol=1e-12)
    if case not in WITHOUT_REPLACEMENT_CASES:
        assert repeats > 0
