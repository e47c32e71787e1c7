"""The exact KL projection onto the truncated simplex ``A = {p : sum p = 1, p >= floor}`` that OSMD
(paper 001, Algorithm 2) and VRB use, with ``floor = alpha / M``.

The projection of a positive ``q`` minimises ``sum_m p_m log(p_m / q_m) - p_m + q_m`` over ``A``.
Its KKT conditions: ``p_m = c q_m`` with one common ``c > 0`` on the unfloored set and
``c q_m <= floor`` where ``p_m = floor``. Checked on random inputs spanning 200 orders of magnitude
against two slow references: a bisection on ``c`` of ``sum_m max(floor, c q_m) = 1``, and SciPy's
constrained minimiser of the KL objective. Hypothesis runs derandomized (fixed seed).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from fedsample import FedsampleError
from fedsample.samplers import project_truncated_simplex

# The floored entries equal the floor to rounding; the unfloored ones share c to this tolerance.
RTOL = 1e-9


@st.composite
def projection_inputs(
    draw: st.DrawFn, max_size: int = 300, *, min_size: int = 1, uniform: bool = True
) -> tuple[np.ndarray, float, float]:
    """``(q, alpha, floor)``: ``M`` in ``[min_size, max_size]``, ``q = 10^u`` with ``u`` in
    ``[-100, 100]`` (or a narrower band, or with ties), ``alpha`` in ``(0, 1]`` (``alpha = 1`` one
    time in ten, never if not ``uniform``), ``floor = alpha / M``."""
    size = draw(st.integers(min_size, max_size))
    seed = draw(st.integers(0, 2**32 - 1))
    spread = draw(st.sampled_from([0.0, 1e-3, 1.0, 10.0, 100.0]))
    rng = np.random.default_rng(seed)
    q = 10.0 ** rng.uniform(-spread, spread, size=size)
    if draw(st.booleans()):  # ties: a few distinct values repeated
        q = rng.choice(q[: max(1, size // 4)], size=size)
    if uniform and draw(st.integers(0, 9)) == 0:
        alpha = 1.0
    else:
        alpha = draw(st.floats(1e-6, 1.0, exclude_min=True, exclude_max=True))
    return q, alpha, alpha / size


def reference_bisection(q: np.ndarray, floor: float) -> np.ndarray:
    """``max(floor, c q)`` with ``c`` found by bisection of the increasing ``sum max(floor, c q) = 1``.

    ``c`` lies in ``[0, 1 / sum q]`` since ``sum max(floor, c q) >= c sum q``; after 200 halvings of
    the scaled bracket the answer is exact to rounding. Independent of the sort-and-threshold
    algorithm under test."""
    scale = q.max()
    u = q / scale  # the projection is invariant to scaling q
    lo, hi = 0.0, 1.0 / u.sum()
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if np.maximum(floor, mid * u).sum() > 1.0:
            hi = mid
        else:
            lo = mid
    return np.maximum(floor, 0.5 * (lo + hi) * u)


def check_kkt(p: np.ndarray, q: np.ndarray, floor: float) -> None:
    """sum p = 1, p >= floor, p = c q on the unfloored set (one c > 0), c q <= floor on the floored set."""
    assert p.shape == q.shape
    assert np.all(np.isfinite(p))
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.all(p >= floor)
    floored = p <= floor * (1 + RTOL)
    free = ~floored
    if free.any():
        ratios = p[free] / q[free]
        c = float(np.median(ratios))
        assert c > 0
        np.testing.assert_allclose(ratios, c, rtol=RTOL)
        assert np.all(c * q[floored] <= floor * (1 + RTOL))
    else:  # everything at the floor: only possible when M floor = 1, i.e. alpha = 1
        assert floor * p.size == pytest.approx(1.0)


@settings(deadline=None, max_examples=300, derandomize=True, database=None)
@given(projection_inputs())
def test_projection_satisfies_kkt(inputs: tuple[np.ndarray, float, float]) -> None:
    """The output is a distribution with the floor, proportional to q off the floor, and every
    floored entry would fall below the floor if scaled like the others (001, Lemma on Algorithm 2)."""
    q, _, floor = inputs
    check_kkt(project_truncated_simplex(q, floor), q, floor)


@settings(deadline=None, max_examples=300, derandomize=True, database=None)
@given(projection_inputs())
def test_projection_matches_bisection_reference(inputs: tuple[np.ndarray, float, float]) -> None:
    """The sort-and-threshold projection equals the bisection on c to 1e-9 relative error."""
    q, _, floor = inputs
    np.testing.assert_allclose(project_truncated_simplex(q, floor), reference_bisection(q, floor), rtol=RTOL, atol=0)


def kl_objective(p: np.ndarray, q: np.ndarray) -> float:
    return float(np.sum(p * np.log(p / q) - p + q))


@settings(deadline=None, max_examples=40, derandomize=True, database=None)
@given(projection_inputs(max_size=8, min_size=2, uniform=False))
def test_projection_minimises_the_kl_divergence(inputs: tuple[np.ndarray, float, float]) -> None:
    """No feasible point found by SciPy's SLSQP on the generalised KL objective does better (M <= 8),
    and the two minimisers agree to 1e-4 (the optimiser's own tolerance)."""
    q, _, floor = inputs
    q = q / q.sum()  # SLSQP needs a well-scaled objective; the projection is scale-invariant
    p = project_truncated_simplex(q, floor)
    start = np.full(q.size, 1.0 / q.size)
    result = minimize(
        kl_objective,
        start,
        args=(q,),
        method="SLSQP",
        bounds=[(floor, 1.0)] * q.size,
        constraints=[{"type": "eq", "fun": lambda x: x.sum() - 1.0}],
        options={"ftol": 1e-14, "maxiter": 500},
    )
    scipy_p = np.maximum(result.x, floor)
    scipy_p /= scipy_p.sum()
    best = kl_objective(p, q)
    assert best <= kl_objective(scipy_p, q) + 1e-9 * max(1.0, abs(best))
    np.testing.assert_allclose(p, scipy_p, atol=1e-4)


@settings(deadline=None, max_examples=100, derandomize=True, database=None)
@given(projection_inputs(max_size=50), st.floats(-300, 300))
def test_projection_is_scale_invariant_and_idempotent(
    inputs: tuple[np.ndarray, float, float], log_scale: float
) -> None:
    """P(s q) = P(q) for any s > 0 (OSMD's log-space step relies on it), and P(P(q)) = P(q)."""
    q, _, floor = inputs
    p = project_truncated_simplex(q, floor)
    with np.errstate(over="ignore", under="ignore"):
        scaled = q * 10.0**log_scale
    if np.all(np.isfinite(scaled)) and np.all(scaled > 0):
        np.testing.assert_allclose(project_truncated_simplex(scaled, floor), p, rtol=RTOL)
    np.testing.assert_allclose(project_truncated_simplex(p, floor), p, rtol=RTOL)


@pytest.mark.parametrize("size", [1, 2, 7, 300])
def test_alpha_one_gives_uniform(size: int) -> None:
    """alpha = 1 leaves A = {1/M}: the projection is uniform whatever q (001: alpha = 1 is uniform sampling)."""
    q = 10.0 ** np.random.default_rng(size).uniform(-50, 50, size=size)
    np.testing.assert_array_equal(project_truncated_simplex(q, 1.0 / size), np.full(size, 1.0 / size))


def test_projection_worked_example() -> None:
    """q = (1, 1, 8), floor 0.2: c = 0.6 / 8 leaves the first two below the floor, so p = (0.2, 0.2, 0.6)."""
    np.testing.assert_allclose(project_truncated_simplex(np.array([1.0, 1.0, 8.0]), 0.2), [0.2, 0.2, 0.6])
    # A feasible q that already sums to one is its own projection; floor 0 is plain normalisation.
    np.testing.assert_allclose(project_truncated_simplex(np.array([0.3, 0.7]), 0.1), [0.3, 0.7])
    np.testing.assert_allclose(project_truncated_simplex(np.array([1.0, 3.0]), 0.0), [0.25, 0.75])


def test_projection_of_values_near_the_float_maximum() -> None:
    """Entries near the largest float do not overflow the tail sums (no warning, same answer as for q / 1e300)."""
    q = np.array([1e308, 1.5e308, 1e3, 1.0])
    p = project_truncated_simplex(q, 0.05)  # RuntimeWarnings are errors in this suite
    np.testing.assert_allclose(p, project_truncated_simplex(q / 1e300, 0.05), rtol=1e-12)
    check_kkt(p, q / 1e300, 0.05)


BAD_INPUTS = [
    pytest.param(np.array([]), 0.1, "q", id="empty"),
    pytest.param(np.ones((2, 2)), 0.1, "q", id="two-dimensional"),
    pytest.param(np.array([1.0, 0.0]), 0.1, "q", id="zero-entry"),
    pytest.param(np.array([1.0, -2.0]), 0.1, "q", id="negative-entry"),
    pytest.param(np.array([1.0, np.nan]), 0.1, "q", id="nan-entry"),
    pytest.param(np.array([1.0, np.inf]), 0.1, "q", id="inf-entry"),
    pytest.param(np.array([1.0, 2.0]), -0.1, "floor", id="negative-floor"),
    pytest.param(np.array([1.0, 2.0]), 0.6, "floor", id="floor-above-1-over-M"),
    pytest.param(np.array([1.0, 2.0]), float("nan"), "floor", id="nan-floor"),
]


@pytest.mark.parametrize(("q", "floor", "parameter"), BAD_INPUTS)
def test_invalid_inputs_raise(q: np.ndarray, floor: float, parameter: str) -> None:
    """Bad q (empty, not 1-D, non-positive or non-finite entries) or floor (outside [0, 1/M]) raise
    FedsampleError naming the parameter."""
    with pytest.raises(FedsampleError, match=f"'{parameter}'") as info:
        project_truncated_simplex(q, floor)
    assert info.value.parameter == parameter
