"""The engine's side of DP-FedAvg: what a private simulation accepts, and its plan before training.

:func:`plan_simulation` is the one call :func:`fedsample.engine.simulate` makes: it refuses what the
mechanism cannot protect (a local algorithm that keeps server state from the raw updates, a
participation policy that replays remembered updates), plans the runs (:func:`~fedsample.privacy.plan.plan_privacy`)
and, when a ``max_epsilon`` budget stops them early, warns in one line and shortens the rounds.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from typing import Any

from fedsample._validation import invalid
from fedsample.federation import Federation
from fedsample.privacy.mechanism import DPFedAvg, PrivacyBudgetWarning
from fedsample.privacy.plan import PrivacyPlan, plan_privacy

__all__ = ["PRIVATE_ALGORITHMS", "plan_simulation"]

# Local algorithms whose server keeps nothing computed from the raw updates (SCAFFOLD's control variates do).
PRIVATE_ALGORITHMS = ("fedavg", "fedprox", "minibatch-sgd")
# Policies that reuse a client's earlier update in later rounds (its noise was added once, in its round).
REPLAYING_POLICIES = ("mifa", "fedvarp")


def plan_simulation(
    privacy: DPFedAvg, federation: Federation, runs: Sequence[Any], config: Any, participation: Any
) -> tuple[PrivacyPlan, Any]:
    """The plan of ``runs`` (``RunSpec``) under ``config`` (a ``TrainingConfig``), and the configuration with
    the rounds the budget allows."""
    owner = "simulate"
    if not isinstance(privacy, DPFedAvg):
        raise invalid("privacy", owner, "a DPFedAvg or None", type(privacy).__name__)
    algorithm = getattr(config.algorithm, "name", type(config.algorithm).__name__)
    if algorithm not in PRIVATE_ALGORITHMS:
        rule = f"one of {PRIVATE_ALGORITHMS} under privacy (its server state would read the updates before the noise)"
        raise invalid("algorithm", owner, rule, algorithm)
    if participation.policy in REPLAYING_POLICIES:
        rule = "a policy that does not replay remembered updates under privacy (each update is noised in its round)"
        raise invalid("policy", owner, rule, participation.policy)
    labels = [run.label or run.sampler.name for run in runs]
    plan = plan_privacy(privacy, federation, [run.sampler for run in runs], config.num_sampled, config.rounds, labels)
    if plan.stop is not None:
        warnings.warn(plan.stop, PrivacyBudgetWarning, stacklevel=3)
        config = dataclasses.replace(config, rounds=plan.rounds)
    return plan, config
