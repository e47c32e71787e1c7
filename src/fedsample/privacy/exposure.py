"""What one round of a sampling design exposes of each client: the input of the accountant.

The mechanism (docs/privacy.md): every round the server adds ``N(0, (z C s)^2 I)`` once to the
weighted sum ``sum_i w_i(S_t) clip_C(Delta_i)``. ``z`` is the noise multiplier, ``C`` the clipping
norm and ``s`` the design's *noise scale* (:func:`noise_scale`): the largest weight one inclusion
of one client can carry. One inclusion of client ``i`` moves the sum by at most ``w_i C``, so its
noise multiplier is ``z s / w_i >= z``. An :class:`Exposure` holds, per group of clients exposed
alike, what the accountant composes: the kind of event (:data:`KINDS`), the inclusion rate, the
sensitivity in units of ``C s`` and, for designs that can draw a client several times, the law of
its multiplicity. Clients with the same parameters share one group, so one accountant computation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedsample._arrays import FloatArray, IntArray
from fedsample._validation import Interval, check_param
from fedsample.designs import BernoulliDesign, FixedSizeDesign, FullDesign, RowDesign, SystematicDesign
from fedsample.errors import FedsampleError
from fedsample.privacy.multiplicity import multiplicity_laws, row_columns

__all__ = [
    "ADD_REMOVE",
    "DEFAULT_MAX_GROUPS",
    "KINDS",
    "Exposure",
    "design_exposure",
    "design_refusal",
    "noise_scale",
    "noise_std",
]

# The events the accountant composes T times (accountant.py says how each is computed).
POISSON, GAUSSIAN, WITHOUT_REPLACEMENT, MULTIPLICITY = "poisson", "gaussian", "without-replacement", "multiplicity"
KINDS = (POISSON, GAUSSIAN, WITHOUT_REPLACEMENT, MULTIPLICITY)
ADD_REMOVE = "add/remove one client (its update zeroed, the design fixed)"
# Above this many distinct (rate, weight) pairs, parameters are rounded up to a geometric grid (a bound).
DEFAULT_MAX_GROUPS = 32
_STEPS = (1e-3, 2e-3, 5e-3, 0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 1e2, 1e9)


@dataclass(frozen=True, eq=False)
class Exposure:
    """How one round of a fixed design exposes each client, grouped for the accountant.

    Attributes
    ----------
    kind:
        ``"poisson"`` (independent inclusion with probability ``rates[g]``), ``"gaussian"`` (in every
        round), ``"without-replacement"`` (``sample_size`` of ``population`` uniformly) or
        ``"multiplicity"`` (drawn ``k`` times with probability ``multiplicities[g][k]``; the bound
        reveals ``k``, see docs/privacy.md).
    adjacency:
        The neighbouring relation the epsilons hold for: :data:`ADD_REMOVE`, one client's update
        replaced by zero while the design stays as it is.
    scale:
        ``s``, the noise scale: the server's noise has standard deviation ``z C s``.
    client_group:
        Each client's group, ``-1`` for a client that is never exposed (epsilon 0).
    rates, sensitivities:
        Per group: the probability of an inclusion in a round, and the L2 sensitivity of one
        inclusion in units of ``C s`` (``w_i / s``, at most 1).
    multiplicities, tails:
        Per group (``"multiplicity"`` and ``"without-replacement"``): the law of the number of draws,
        and the mass beyond it (counted as a total loss of privacy).
    rounding:
        ``0`` when every group holds the exact parameters of its clients; otherwise rates and
        sensitivities were rounded up by at most this relative step (the epsilons are upper bounds).
    model:
        One line: the design and the event (or bound) the accountant composes.
    """

    kind: str
    adjacency: str
    scale: float
    client_group: IntArray
    rates: FloatArray
    sensitivities: FloatArray
    model: str
    multiplicities: tuple[FloatArray, ...] = ()
    tails: tuple[float, ...] = ()
    population: int = 0
    sample_size: int = 0
    rounding: float = 0.0

    @property
    def num_clients(self) -> int:
        return int(self.client_group.size)

    @property
    def num_groups(self) -> int:
        return int(self.rates.size)

    def group_sizes(self) -> IntArray:
        """The number of clients in each group."""
        exposed = self.client_group[self.client_group >= 0]
        return np.bincount(exposed, minlength=self.num_groups).astype(np.int64)

    def client_sensitivities(self, clip_norm: float) -> FloatArray:
        """Each client's L2 sensitivity of one inclusion, ``w_i C`` (``0`` for a client never exposed; rounded up
        with its group when :attr:`rounding` is positive)."""
        out = np.zeros(self.num_clients)
        exposed = self.client_group >= 0
        out[exposed] = self.sensitivities[self.client_group[exposed]] * self.scale * clip_norm
        return out


def noise_scale(weights: FloatArray, exposed: np.ndarray) -> float:
    """``s``: the largest weight that one inclusion of an exposed client carries."""
    positive = weights[exposed & (weights > 0)]
    if positive.size == 0:
        raise FedsampleError(
            "The 'design' parameter of fedsample.privacy must give some client a positive weight with a positive "
            "probability. Got a design whose every inclusion has weight 0 instead.",
            parameter="design",
        )
    return float(positive.max())


def noise_std(exposure: Exposure, *, noise_multiplier: float, clip_norm: float) -> float:
    """The standard deviation ``z C s`` of the Gaussian noise the server adds once per round.

    The mechanism must add exactly this much noise for :func:`fedsample.privacy.privacy_cost` to hold.
    """
    return float(noise_multiplier) * float(clip_norm) * exposure.scale


def design_refusal(design: object) -> str | None:
    """Why the accountant refuses ``design`` (``None`` for the designs it bounds)."""
    if isinstance(design, (FullDesign, BernoulliDesign, FixedSizeDesign, RowDesign, SystematicDesign)):
        return None
    name = type(design).__name__
    if name == "NormalizedDesign":
        return "its weights are divided by the round's total, so one client changes every other client's weight"
    if name == "SuccessiveDesign":
        return "Des Raj's weights depend on the clients drawn before, so a client's weight is not its own"
    if name == "DataLevelDesign":
        return "a client's weight is the count of samples it keeps, not one inclusion of the client"
    return f"a {name} is none of the designs it bounds (full, independent inclusions, fixed size, rows, systematic)"


def design_exposure(design: object, *, max_groups: int = DEFAULT_MAX_GROUPS) -> Exposure:
    """The :class:`Exposure` of a fixed design; a design the accountant cannot bound is refused with the reason.

    ``max_groups``: above this many distinct client parameters, they are rounded up (a bound, see
    :attr:`Exposure.rounding`).
    """
    check_param("max_groups", "design_exposure", max_groups, Interval(int, 1, None, closed="left"))
    reason = design_refusal(design)
    if reason is not None:
        raise FedsampleError(
            "The 'design' parameter of design_exposure must be a design fixed before training whose every "
            f"client's sensitivity is its own weight times C. Got a {type(design).__name__} instead: {reason}.",
            parameter="design",
            value=type(design).__name__,
        )
    if isinstance(design, FullDesign):
        return _full(design, max_groups)
    if isinstance(design, BernoulliDesign):
        return _independent(design, max_groups)
    if isinstance(design, FixedSizeDesign):
        return _without_replacement(design, max_groups)
    if isinstance(design, RowDesign):
        return _with_replacement(design, max_groups)
    assert isinstance(design, SystematicDesign)
    return _systematic(design, max_groups)


def _full(design: FullDesign, max_groups: int) -> Exposure:
    w = design.weights
    s = noise_scale(w, np.ones(w.size, dtype=bool))
    exposed = w > 0
    keys, group, rounding = _group(np.column_stack([w[exposed] / s]), max_groups)
    return Exposure(
        kind=GAUSSIAN,
        adjacency=ADD_REMOVE,
        scale=s,
        client_group=_scatter(group, exposed),
        rates=np.ones(keys.shape[0]),
        sensitivities=keys[:, 0],
        model="full participation: a Gaussian mechanism every round",
        rounding=rounding,
    )


def _independent(design: BernoulliDesign, max_groups: int) -> Exposure:
    q, w = design.inclusion, design.weights
    s = noise_scale(w, q > 0)
    exposed = (q > 0) & (w > 0)
    keys, group, rounding = _group(np.column_stack([q[exposed], w[exposed] / s]), max_groups)
    return Exposure(
        kind=POISSON,
        adjacency=ADD_REMOVE,
        scale=s,
        client_group=_scatter(group, exposed),
        rates=keys[:, 0],
        sensitivities=keys[:, 1],
        model="independent inclusions: a Poisson-subsampled Gaussian per client (its own rate and weight)",
        rounding=rounding,
    )


def _without_replacement(design: FixedSizeDesign, max_groups: int) -> Exposure:
    w, n, m = design.weights, design.num_clients, design.num_sampled
    s = noise_scale(w, np.ones(n, dtype=bool))
    exposed = w > 0
    keys, group, rounding = _group(np.column_stack([w[exposed] / s]), max_groups)
    rate = m / n
    return Exposure(
        kind=WITHOUT_REPLACEMENT,
        adjacency=ADD_REMOVE,
        scale=s,
        client_group=_scatter(group, exposed),
        rates=np.full(keys.shape[0], rate),
        sensitivities=keys[:, 0],
        model=f"{m} of {n} uniformly without replacement: the smaller of a sampled-without-replacement Gaussian "
        "(replace-one) and the bound that reveals whether the client is in",
        multiplicities=tuple(np.array([1.0 - rate, rate]) for _ in range(keys.shape[0])),
        tails=(0.0,) * keys.shape[0],
        population=n,
        sample_size=m,
        rounding=rounding,
    )


def _with_replacement(design: RowDesign, max_groups: int) -> Exposure:
    counts, probabilities = row_columns(design)
    exposed = probabilities.sum(axis=1) > 0
    s = noise_scale(design.draw_weights, exposed)
    exposed &= design.draw_weights > 0
    relative = design.draw_weights[exposed] / s
    width = counts.shape[1]
    keys, group, rounding = _group(
        np.column_stack([probabilities[exposed], relative]),
        max_groups,
        fixed=np.asarray(counts[exposed], dtype=np.float64),
    )
    laws, tails = multiplicity_laws(keys[:, :width].astype(np.int64), keys[:, width : 2 * width])
    return Exposure(
        kind=MULTIPLICITY,
        adjacency=ADD_REMOVE,
        scale=s,
        client_group=_scatter(group, exposed),
        rates=np.array([1.0 - law[0] for law in laws]),
        sensitivities=keys[:, -1],
        model="draws with replacement: a Gaussian whose shift is the client's multiplicity, the multiplicity revealed "
        "(a bound)",
        multiplicities=tuple(laws),
        tails=tuple(tails),
        rounding=rounding,
    )


def _systematic(design: SystematicDesign, max_groups: int) -> Exposure:
    pi, w = design.inclusion, design.weights
    s = noise_scale(w, pi > 0)
    exposed = (pi > 0) & (w > 0)
    keys, group, rounding = _group(np.column_stack([pi[exposed], w[exposed] / s]), max_groups)
    laws = tuple(np.array([1.0 - rate, rate]) for rate in keys[:, 0])
    return Exposure(
        kind=MULTIPLICITY,
        adjacency=ADD_REMOVE,
        scale=s,
        client_group=_scatter(group, exposed),
        rates=keys[:, 0],
        sensitivities=keys[:, 1],
        model="systematic sampling: one uniform draw selects the round, so the bound reveals whether the client is in",
        multiplicities=laws,
        tails=(0.0,) * len(laws),
        rounding=rounding,
    )


def _scatter(group: IntArray, exposed: np.ndarray) -> IntArray:
    out = np.full(exposed.size, -1, dtype=np.int64)
    out[exposed] = group
    return out


def _group(
    values: FloatArray, max_groups: int, *, fixed: FloatArray | None = None
) -> tuple[FloatArray, IntArray, float]:
    """The distinct rows of ``[fixed, values]`` and each row's group; with more than ``max_groups`` of them,
    each column of ``values`` (positive or 0) is rounded up to a geometric grid that ends at the column's
    largest value, the finest that leaves at most ``max_groups`` groups. Returns the keys, the groups and
    the relative step of the grid (0: exact)."""
    head = np.zeros((values.shape[0], 0)) if fixed is None else fixed
    keys, group = np.unique(np.column_stack([head, values]), axis=0, return_inverse=True)
    step = 0.0
    if keys.shape[0] > max_groups:
        for step in _STEPS:
            rounded = _round_up(values, 1.0 + step)
            keys, group = np.unique(np.column_stack([head, rounded]), axis=0, return_inverse=True)
            if keys.shape[0] <= max_groups:
                break
    return keys, group.ravel().astype(np.int64), step


def _round_up(values: FloatArray, ratio: float) -> FloatArray:
    """Each value raised to the nearest point ``top ratio^-j`` (``j >= 0``) at or above it, where ``top`` is
    its column's largest value: the largest stays exact, 0 stays 0."""
    out = np.zeros_like(values)
    top = values.max(axis=0) if values.size else np.zeros(values.shape[1])
    for column in range(values.shape[1]):
        x = values[:, column]
        positive = x > 0
        scaled = x[positive] / top[column]
        exponent = np.floor(-np.log(scaled) / np.log(ratio))
        grid = top[column] * ratio**-exponent
        grid = np.where(grid < x[positive], top[column] * ratio ** -(exponent - 1), grid)
        out[positive, column] = np.minimum(grid, top[column])
    return out
