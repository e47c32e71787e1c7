"""One bound on what a learning sampler reads, applied by every ``Sampler.update`` whoever calls it (issue 32,
item 9).

The Flower strategy bounds its nodes' replies before they reach a sampler; a loop of your own calls
``sampler.update(state, feedback)`` directly, and a finite but enormous value there (a loss of 1e308, an
update of 1e200) used to reach the samplers' arithmetic: HiCS-FL raised SciPy's "condensed distance matrix
must contain only finite values". Now ``check_feedback`` (the base class's check of every update) treats a
finite value beyond ``FEEDBACK_LIMIT`` (1e100), or a negative norm, square or time, like NaN: a client
whose result is unknown, as one that did not return. Every registered learning sampler (``LEARNING_CASES``)
is fed each such value in each field: its state stays valid, and equals the state it learns from NaN.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from fedsample import Feedback
from fedsample.serialization import dumps, loads
from sampler_cases import LEARNING_CASES, WARM_UP_ROUNDS, client_norms, contract_federation, make_case, next_feedback

FEEDBACK_LIMIT = 1e100  # fedsample.samplers._feedback.FEEDBACK_LIMIT (checked below)
MAGNITUDES = ("update_norms", "gradient_norms", "loss_squares", "round_times")
SIGNED = ("losses", "updates", "gradients")
BEYOND = {
    "1e308": 1e308,
    "-1e308": -1e308,
    "1e200": 1e200,
    "just-beyond-1e100": math.nextafter(FEEDBACK_LIMIT, math.inf),
}


def _with(feedback: Feedback, field: str, value: float) -> Feedback:
    """``feedback`` with its first returned client's ``field`` (its first entry, for vectors) set to
    ``value``; a field the feedback lacks is given, 1 for every client."""
    current = getattr(feedback, field)
    if current is None:
        current = np.ones(feedback.clients.size)
    values = np.array(current, dtype=np.float64, copy=True)
    if values.size:
        values.reshape(values.shape[0], -1)[0, 0] = value
    return replace(feedback, **{field: values})


def _valid(sampler: Any, state: Any) -> None:
    """The state loads back (its invariants hold), draws finite weights, and a learned distribution is one."""
    loads(dumps(state))
    rng = np.random.default_rng(0)
    for _ in range(3):
        assert np.isfinite(sampler.sample(state, rng).weights).all()
    if hasattr(sampler, "probabilities"):
        p = np.asarray(sampler.probabilities(state))
        assert np.isfinite(p).all()
        assert p.sum() == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("case", sorted(LEARNING_CASES))
def test_a_value_beyond_the_bound_given_directly_counts_as_not_returned(case: str) -> None:
    """Each field of each learning sampler's feedback, poisoned in one client: the state is valid and the
    same as with NaN there (base: HiCS-FL crashed on 1e200 updates, and the others learned from the value)."""
    sampler, state = make_case(case, contract_federation(), 3)
    feedback = next_feedback(sampler, state, WARM_UP_ROUNDS, np.random.default_rng(1), client_norms(8))
    poisons = [(field, name, value) for field in SIGNED + MAGNITUDES for name, value in BEYOND.items()]
    poisons += [(field, "negative", -1.0) for field in MAGNITUDES]
    for field, name, value in poisons:
        poisoned = sampler.update(state, _with(feedback, field, value))
        _valid(sampler, poisoned)
        unknown = sampler.update(state, _with(feedback, field, math.nan))
        assert dumps(poisoned) == dumps(unknown), f"{field} = {name}"


@pytest.mark.parametrize("case", sorted(LEARNING_CASES))
def test_every_value_at_the_bound_leaves_a_valid_state(case: str) -> None:
    """The largest values a sampler reads (+-1e100 in every entry of a field, of every client) keep every
    learning sampler's state valid: the bound is low enough for their squares and sums."""
    sampler, state = make_case(case, contract_federation(), 3)
    feedback = next_feedback(sampler, state, WARM_UP_ROUNDS, np.random.default_rng(2), client_norms(8))
    for field in SIGNED + MAGNITUDES:
        for value in (FEEDBACK_LIMIT, -FEEDBACK_LIMIT) if field in SIGNED else (FEEDBACK_LIMIT,):
            current = getattr(feedback, field)
            shape = current.shape if current is not None else feedback.clients.shape
            _valid(sampler, sampler.update(state, replace(feedback, **{field: np.full(shape, value)})))


def test_the_feedback_within_the_bound_is_passed_on_as_it_is() -> None:
    """No copy in the common case: the check hands the sampler the caller's own feedback."""
    from fedsample.samplers._feedback import FEEDBACK_LIMIT as declared
    from fedsample.samplers._feedback import check_feedback

    assert declared == FEEDBACK_LIMIT
    sampler, state = make_case("osmd", contract_federation(), 3)
    feedback = next_feedback(sampler, state, WARM_UP_ROUNDS, np.random.default_rng(3), client_norms(8))
    assert check_feedback(feedback, 8, "test") is feedback
    bounded = check_feedback(_with(feedback, "losses", 1e200), 8, "test")
    assert bounded is not feedback
    assert np.isnan(bounded.losses[0])
    np.testing.assert_array_equal(bounded.losses[1:], feedback.losses[1:])
