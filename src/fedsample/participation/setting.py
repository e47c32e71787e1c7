"""A simulation's participation setting: availability, failures, over-selection and the aggregation policy.

:class:`Participation` holds what :mod:`fedsample.participation.procedure` needs for each round (see its
module doc for the round itself); its scalar parameters are declared in one table
(:data:`~fedsample.participation.parameters.PARTICIPATION`), and its ``policy`` name becomes a policy
object (:attr:`Participation.aggregation`, :mod:`fedsample.participation.policies`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from fedsample._validation import Constraint, Interval, Options, check_params, invalid
from fedsample.participation.availability import AlwaysAvailable, Availability, Dropout
from fedsample.participation.mifa import MIFA_VARIANTS
from fedsample.participation.policies import AggregationPolicy, Estimator, Policy, PolicyNames, build_policy
from fedsample.participation.system import SystemModel

__all__ = ["Participation"]


def _mix_seed(model_seed: int, run_seed: int) -> int:
    """A model's seed for one run: the runs of a comparison see independent fates."""
    return int(np.random.SeedSequence([int(model_seed), int(run_seed)]).generate_state(1, np.uint64)[0] >> 1)


@dataclass(frozen=True, kw_only=True)
class Participation:
    """How clients take part in the rounds of a simulation (see the module doc).

    Parameters
    ----------
    availability:
        Which clients can be selected in a round (default: everyone, always).
    dropout:
        Failure after selection (``None``: nobody drops out).
    over_selection:
        ``o >= 0``: ask ``ceil(m (1 + o))`` clients and keep the first ``m`` to reply.
    policy:
        ``"renormalise"``, ``"inverse-probability"`` or ``"ignore"``
        (:func:`~fedsample.participation.policies.correct_weights`), or one of the policies for unknown
        participation rates: ``"fedau"``, ``"mifa"``, ``"fedvarp"`` (:mod:`fedsample.participation.policies`).
    return_rates:
        ``"known"`` (from the models' probabilities) or ``"estimated"`` (a
        :class:`~fedsample.participation.estimators.ReturnRateEstimator` per run, part of the checkpoints).
    redraws:
        Tries of the redraw loop for an unavailable entry of a per-row design
        (:func:`~fedsample.samplers.row_draws.redraw_unavailable`; 0: skip unavailable clients).
    system:
        The clients' speeds and links and the round deadline (:mod:`fedsample.participation.system`;
        ``None``: no clock, replies in a hashed random order).
    fedau_cutoff:
        ``K``, FedAU's cutoff: an interval without a return is recorded once it reaches ``K`` rounds
        (:class:`~fedsample.participation.estimators.IntervalEstimator`; the authors' default, 100000, is
        effectively none).
    mifa_variant:
        The ``"mifa"`` policy's memory: ``"zeros"`` (IBM/fedau's port) or ``"released"`` (its authors' code,
        with a warm-up until every client has taken part: :mod:`fedsample.participation.mifa`).
    """

    availability: Availability = field(default_factory=AlwaysAvailable)
    dropout: Dropout | None = None
    over_selection: float = 0.0
    policy: AggregationPolicy = "renormalise"
    return_rates: Literal["known", "estimated"] = "known"
    redraws: int = 10
    system: SystemModel | None = None
    fedau_cutoff: int = 100_000
    mifa_variant: Literal["zeros", "released"] = "zeros"

    # The scalar parameters' constraints (fedsample._params.declared reads them with the defaults above).
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "over_selection": Interval(float, 0, 10, closed="both"),
        "policy": PolicyNames(),
        "return_rates": Options(("known", "estimated")),
        "redraws": Interval(int, 0, 1000, closed="both"),
        "fedau_cutoff": Interval(int, 1, 10**9, closed="both"),
        "mifa_variant": Options(MIFA_VARIANTS),
    }

    def __post_init__(self) -> None:
        owner = "Participation"
        if not isinstance(self.availability, Availability):
            raise invalid("availability", owner, "an Availability model", self.availability)
        if self.dropout is not None and not isinstance(self.dropout, Dropout):
            raise invalid("dropout", owner, "a Dropout model or None", self.dropout)
        if self.system is not None and not isinstance(self.system, SystemModel):
            raise invalid("system", owner, "a SystemModel or None", self.system)
        constraints = self._parameter_constraints
        check_params(owner, {name: getattr(self, name) for name in constraints}, constraints)
        if self.released_mifa and self.over_selection > 0:  # every client fills its memory in one round
            raise invalid("over_selection", owner, "0 with mifa_variant='released'", self.over_selection)

    @property
    def is_default(self) -> bool:
        """Everyone available, nobody fails, nobody over-selected: the sampler's weights as they are."""
        no_deadline = self.system is None or self.system.deadline is None
        return (
            isinstance(self.availability, AlwaysAvailable)
            and self.dropout is None
            and self.over_selection == 0
            and no_deadline
        )

    def num_asked(self, num_sampled: int) -> int:
        """``ceil(m (1 + o))``, the ``num_sampled`` the sampler is initialised with."""
        if self.over_selection == 0:
            return int(num_sampled)
        # The epsilon keeps m (1 + o) = 12.000000000000002 from asking 13 clients.
        return math.ceil(num_sampled * (1.0 + self.over_selection) - 1e-9)

    def for_run(self, seed: int) -> Participation:
        """This setting with the models' seeds mixed with a run's ``seed`` (independent fates per run)."""

        def reseed(model: Any) -> Any:
            if model is None or "seed" not in {f.name for f in dataclasses.fields(model)}:
                return model
            return dataclasses.replace(model, seed=_mix_seed(model.seed, seed))

        return dataclasses.replace(self, availability=reseed(self.availability), dropout=reseed(self.dropout))

    @property
    def aggregation(self) -> Policy:
        """The aggregation policy ``policy`` names, with its parameters
        (:func:`~fedsample.participation.policies.build_policy`)."""
        return build_policy(self.policy, fedau_cutoff=self.fedau_cutoff, mifa_variant=self.mifa_variant)

    @property
    def released_mifa(self) -> bool:
        """The ``"mifa"`` policy as its authors released it (:mod:`fedsample.participation.mifa`)."""
        return self.aggregation.warms_up

    def new_estimator(self, num_clients: int) -> Estimator:
        """The policy's state for a run: FedAU's interval estimator, the released MIFA's warm-up, else
        estimated return rates (or ``None``)."""
        return self.aggregation.new_estimator(num_clients, self.return_rates)

    def check_known_rates(self, num_clients: int, owner: str) -> None:
        """Fail early when a policy dividing by the return rates needs availability probabilities the model lacks."""
        if (
            self.aggregation.needs_return_rates
            and self.return_rates == "known"
            and self.availability.probabilities(num_clients) is None
        ):
            raise invalid(
                "participation",
                owner,
                "return_rates='estimated' with the inverse-probability policy when the availability model "
                "has no probabilities (a trace)",
                "return_rates='known'",
            )
