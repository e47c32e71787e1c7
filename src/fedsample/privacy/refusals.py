"""Which samplers the accountant bounds, and the reason it gives for each one it refuses.

The accountant composes the same event every round, so it needs a design that is fixed before
training and does not depend on the clients' data: the samplers that do not learn
(:class:`~fedsample.samplers._base.FixedDesignSampler`, and ``uniform-is``, whose distribution never
moves). A sampler that learns from the clients' updates, losses or sizes, or that selects by a rule
over them, makes the selection itself a function of private data; no amplification-by-sampling
bound holds for it, and it is refused with its reason in one line.
"""

from __future__ import annotations

from typing import Any

from fedsample._validation import invalid
from fedsample.errors import FedsampleError
from fedsample.privacy.exposure import DEFAULT_MAX_GROUPS, Exposure, design_exposure, design_refusal
from fedsample.samplers import Sampler
from fedsample.samplers._base import FixedDesignSampler

__all__ = ["NEVER_LEARN", "REASONS", "exposure_of", "refusal"]

# Samplers that define update() but never change the distribution they draw from.
NEVER_LEARN = frozenset({"uniform-is"})

_LEARNS = (
    "it learns its sampling distribution from the clients' {}, so a round's inclusion probabilities depend on "
    "private data of earlier rounds"
)
_SELECTS = "it selects clients by their {}, so who is selected depends on private data"
_SCHEDULE = (
    "it follows a deterministic schedule, with no sampling randomness to amplify privacy; bound it as full "
    "participation ('full') over the rounds each client takes part in"
)
_POPULATION = (
    "it draws from memory-mapped sizes without a design object; account '{}' on the same sizes (the same design)"
)

REASONS: dict[str, str] = {
    "osmd": _LEARNS.format("update norms (online mirror descent)"),
    "adaptive-osmd": _LEARNS.format("update norms (online mirror descent)"),
    "mabs": _LEARNS.format("update norms (a bandit)"),
    "vrb": _LEARNS.format("update norms (a bandit)"),
    "avare": _LEARNS.format("update norms (a bandit)"),
    "delta": _LEARNS.format("gradient diversity"),
    "optimal": "it draws each round from the update norms the candidate clients report in that round (two-phase)",
    "optimal-distribution": "it draws each round from the clients' current gradient or update norms",
    "clustered-similarity": "its clusters come from the clients' update vectors, so the design depends on private data",
    "fedsampling": (
        "data-level sampling: its rate comes from the clients' randomized size reports and a client's weight is "
        "the count of samples it keeps; the size query's own local DP is fedsample.privacy.PrivacyReport"
    ),
    "fixed-rate": "data-level sampling: a client's weight is the count of samples it keeps, not one inclusion",
    "oort": _SELECTS.format("training losses and round times (Oort's utility)"),
    "power-of-choice": _SELECTS.format("current losses"),
    "high-loss": _SELECTS.format("last reported losses"),
    "divfl": _SELECTS.format("stale gradients (submodular diversity)"),
    "afl": _SELECTS.format("loss-based valuations"),
    "fedcor": _SELECTS.format("loss changes (a Gaussian process)"),
    "hics-fl": _SELECTS.format("output-layer updates (estimated heterogeneity)"),
    "fedcbs": _SELECTS.format("label counts (class balance)"),
    "number-of-samples": (
        "it draws successively among the available clients and divides the weights by the round's total, "
        "so one client changes every other client's weight"
    ),
    "round-robin": _SCHEDULE,
    "sequential": _SCHEDULE,
    "population-md": _POPULATION.format("md"),
    "population-uniform": _POPULATION.format("uniform"),
    "population-clustered-size": _POPULATION.format("clustered-size"),
}


def refusal(sampler: Sampler[Any], state: object | None = None) -> str | None:
    """Why the accountant refuses ``sampler`` (at ``state``, when given, its design is checked too), or
    ``None`` when it bounds it."""
    if not isinstance(sampler, Sampler):
        raise invalid("sampler", "refusal", "a fedsample Sampler", sampler)
    if sampler.name in REASONS:
        return REASONS[sampler.name]
    if not (isinstance(sampler, FixedDesignSampler) or sampler.name in NEVER_LEARN):
        return "it updates its state from the clients' feedback, so its design may depend on their data"
    return None if state is None else design_refusal(sampler.design(state))


def exposure_of(sampler: Sampler[Any], state: object, *, max_groups: int = DEFAULT_MAX_GROUPS) -> Exposure:
    """The :class:`~fedsample.privacy.exposure.Exposure` of ``sampler``'s design at ``state``, the input of
    :func:`~fedsample.privacy.privacy_cost`; a sampler the accountant cannot bound is refused with its reason."""
    reason = refusal(sampler, state)
    if reason is not None:
        raise FedsampleError(
            "The 'sampler' parameter of fedsample.privacy must be a sampler whose design is fixed before training "
            f"and independent of the clients' data. Got {sampler.name!r} instead: {reason}.",
            parameter="sampler",
            value=sampler.name,
        )
    return design_exposure(sampler.design(state), max_groups=max_groups)
