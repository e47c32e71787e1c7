"""What :class:`~fedsample.integrations.flower.FedsampleStrategy` settles before its first round: its
arguments checked against each other, the sampler fitted to the model, the clients left out of the
federation, and the summary it logs."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedsample._arrays import FloatArray, IntArray, readonly
from fedsample._params import Component
from fedsample._validation import Constraint, Interval, NoneOr, Options, invalid
from fedsample.errors import FedsampleError
from fedsample.integrations import flower_fedsampling as private
from fedsample.integrations._flwr import ArrayRecord
from fedsample.integrations.flower_client import arrays_to_numpy
from fedsample.integrations.flower_nodes import SubsetAvailability
from fedsample.integrations.flower_two_phase import check_flower_phases
from fedsample.participation.availability import Availability
from fedsample.participation.policies import AGGREGATION_POLICIES
from fedsample.participation.setting import Participation
from fedsample.samplers import FedSamplingSampler, Feedback, Sampler, fit_to_parameters

__all__ = [
    "OWNER",
    "STRATEGY_CONSTRAINTS",
    "check_arguments",
    "fitted_sampler",
    "left_out",
    "log_summary",
    "update_or_keep",
]

OWNER = "FedsampleStrategy"
_log = logging.getLogger("flwr")

# The strategy's constructor parameters and their constraints, declared once and checked in one place
# (``sampler``, ``clients``, ``sizes``, ``return_probabilities`` and ``availability`` are checked
# against each other and the federation by their own readers). The participation knobs are the
# engine's, with the constraints Participation declares.
STRATEGY_CONSTRAINTS: dict[str, Constraint] = {
    "num_sampled": Interval(int, 1, None, closed="left"),
    "seed": Interval(int, 0, None, closed="left"),
    "server_lr": Interval(float, 0, None, closed="neither"),
    "policy": Options(AGGREGATION_POLICIES),  # one round's corrections; those with state across rounds are the engine's
    "timeout": NoneOr(Interval(float, 0, None, closed="neither")),
    "num_nodes": NoneOr(Interval(int, 1, None, closed="left")),
    "importance": Options(("size", "uniform")),
    "redraws": Participation._parameter_constraints["redraws"],
    "over_selection": Participation._parameter_constraints["over_selection"],
    "norm_bound": NoneOr(Interval(float, 1, math.inf, closed="left")),
    "norm_bound_action": Options(("clip", "reject")),
}


def check_arguments(parameters: Component, arguments: Mapping[str, Any]) -> None:
    """Check the strategy's constructor ``arguments``: the sampler (one a Flower client can serve), the
    declared table ``parameters``, and the arguments that constrain each other."""
    sampler = arguments["sampler"]
    if not isinstance(sampler, Sampler):
        raise invalid("sampler", OWNER, "a fedsample Sampler", sampler)
    check_flower_phases(sampler, OWNER)
    parameters.validate(arguments)
    availability = arguments["availability"]
    if availability is not None and not isinstance(availability, Availability):
        raise invalid("availability", OWNER, "an Availability model or None", availability)
    if arguments["norm_bound"] is None and arguments["norm_bound_action"] != "clip":
        constraint = "'clip' (the default) unless 'norm_bound' is given"
        raise invalid("norm_bound_action", OWNER, constraint, arguments["norm_bound_action"])
    if isinstance(sampler, FedSamplingSampler):  # it keeps every size on its client
        private.check_strategy(
            sampler,
            sizes=arguments["sizes"],
            importance=arguments["importance"],
            policy=arguments["policy"],
            over_selection=float(arguments["over_selection"]),
        )


def fitted_sampler(sampler: Sampler[Any], arrays: ArrayRecord) -> Sampler[Any]:
    """``sampler`` fitted to the model whose global ``arrays`` the first round sends, as the engine fits
    it (:func:`~fedsample.samplers.fit_to_parameters`: HiCS-FL reads its output layer, the last two
    arrays, whose entries end every flattened update); a model it cannot read is refused in one line."""
    return fit_to_parameters(sampler, [array.shape for array in arrays_to_numpy(arrays).values()])


def left_out(
    participation: Participation, return_probabilities: float | FloatArray | None, num_clients: int, original: IntArray
) -> tuple[Participation, float | FloatArray | None]:
    """The participation and return probabilities restricted to the federation's clients, when only
    ``original`` of the ``num_clients`` clients joined it (client ``i`` was ``original[i]``)."""
    _log.warning("setup: %d of %d nodes left out of the federation", num_clients - original.size, num_clients)
    availability = SubsetAvailability(participation.availability, original, num_clients)
    participation = dataclasses.replace(participation, availability=availability)
    if isinstance(return_probabilities, np.ndarray):
        return_probabilities = readonly(return_probabilities[original])
    return participation, return_probabilities


def log_summary(
    sampler: Sampler[Any], *, num_sampled: int, seed: int, server_lr: float, policy: str,
    participation: Participation, timeout: float | None,
) -> None:  # fmt: skip
    """Log the strategy's configuration."""
    _log.info("\t├──> Sampler: %s %s", sampler.name, sampler.get_params())
    _log.info("\t├──> Clients per round: %d (seed %d)", num_sampled, seed)
    _log.info("\t├──> Server learning rate: %g, failure policy: %s", server_lr, policy)
    _log.info(
        "\t├──> Availability: connected nodes and %s, redraws: %d, over-selection: %g",
        type(participation.availability).__name__,
        participation.redraws,
        participation.over_selection,
    )
    _log.info("\t└──> Reply timeout: %s", "none" if timeout is None else f"{timeout:g} s")


def update_or_keep(sampler: Sampler[Any], state: Any, feedback: Feedback, where: str) -> Any:
    """The sampler's state after ``feedback``; ``state`` unchanged when the sampler refuses it (a
    ``FedsampleError``, for example feedback="gradient" when no kept node reported a gradient norm): what
    the nodes sent cannot end the round loop."""
    try:
        return sampler.update(state, feedback)
    except FedsampleError as error:
        _log.warning("%s: the sampler refused the round's feedback, its state is unchanged: %s", where, error)
        return state
