"""A privacy cost as the table ``fedsample privacy`` prints, and as its JSON object."""

from __future__ import annotations

from typing import Any

import numpy as np

from fedsample.privacy.accountant import PrivacyCost

__all__ = ["cost_to_json", "format_cost"]


def cost_to_json(sampler: str, cost: PrivacyCost) -> dict[str, Any]:
    """``{"sampler", "epsilon_max", "epsilon", "delta", "rounds", "noise_multiplier"}``: the epsilons per
    client in client order (a non-finite one as ``{"__float__": "inf"}``, fedsample's JSON encoding)."""
    return {
        "sampler": sampler,
        "epsilon_max": cost.epsilon_max,
        "epsilon": cost.epsilon.tolist(),
        "delta": cost.delta,
        "rounds": cost.rounds,
        "noise_multiplier": cost.noise_multiplier,
    }


def format_cost(sampler: str, cost: PrivacyCost) -> str:
    """One sampler's block: the model, a row per group of clients (the most exposed first), the worst
    client and the median."""
    exposure = cost.exposure
    lines = [
        f"{sampler}: {exposure.model}",
        f"  noise multiplier z = {cost.noise_multiplier:.6g}, {cost.rounds} rounds, noise std z C s with "
        f"s = {exposure.scale:.6g}",
        f"  {'clients':>8}  {'inclusion':>10}  {'weight/s':>9}  {'multiplier':>10}  {'epsilon':>10}",
    ]
    sizes = exposure.group_sizes()
    for group in np.argsort(-cost.group_epsilon, kind="stable").tolist():
        multiplier = cost.noise_multiplier / float(exposure.sensitivities[group])
        lines.append(
            f"  {int(sizes[group]):>8}  {float(exposure.rates[group]):>10.4g}  "
            f"{float(exposure.sensitivities[group]):>9.4g}  {multiplier:>10.4g}  {_eps(cost.group_epsilon[group]):>10}"
        )
    never = exposure.num_clients - int(sizes.sum())
    if never:
        lines.append(f"  {never:>8}  {0:>10}  {'':>9}  {'':>10}  {_eps(0.0):>10}")
    tail = f"  worst client {cost.worst_client}: epsilon {_eps(cost.epsilon_max)}; median {_eps(cost.epsilon_median)}"
    if exposure.rounding > 0:
        tail += f" (rates and weights rounded up by at most {exposure.rounding:.0%}: upper bounds)"
    lines.append(tail)
    return "\n".join(lines)


def _eps(value: float) -> str:
    return f"{value:.4g}"
