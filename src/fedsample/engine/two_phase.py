"""The first phase of a two-phase round (:attr:`fedsample.samplers.Sampler.two_phase`): every client reports.

A two-phase sampler (``optimal``, ``optimal-distribution``) draws the round from norms the
candidates report *before* the draw. Here the candidates are every client: each trains from its
run's global model with the round's batches (keyed by seed, round and client, so a chosen client's
update in the second phase is the one it computed here), the norms of the updates and of the first
mini-batch gradients reach the sampler through :meth:`~fedsample.samplers.Sampler.update`, and the
sampler then draws the round as usual. The engine counts the clients that computed (every
candidate) apart from those that communicated (the chosen ones whose update was kept), and for the
round's updates the exact variance of the aggregate the sampler's design achieves, of MD sampling
and of uniform sampling with the same ``m`` (:func:`aggregate_variances`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from fedsample._arrays import FloatArray
from fedsample.engine.backends import flat_norms
from fedsample.engine.batching import plan_batches
from fedsample.engine.simulation import Setup, SimulationState
from fedsample.samplers import Feedback, Selection
from fedsample.stats.exact import weight_covariance
from fedsample.stats.row_moments import MAX_COVARIANCE_CLIENTS

__all__ = ["Report", "aggregate_variances", "design_variance", "record_round", "report_norms"]


@dataclass(frozen=True, eq=False)
class Report:
    """What one run's candidates computed in the first phase: their updates ``(n, d)``, in client order."""

    updates: FloatArray


def report_norms(
    setup: Setup, state: SimulationState, t: int, lr: float
) -> tuple[SimulationState, list[Report | None]]:
    """Phase 1 of round ``t``: the state whose two-phase samplers have read every client's report.

    Returns the new state and, per run, its :class:`Report` (``None`` for a run whose sampler is
    not two-phase, which is left untouched).
    """
    two_phase = [r for r, run in enumerate(setup.runs) if run.sampler.two_phase]
    reports: list[Report | None] = [None] * len(setup.runs)
    if not two_phase:
        return state, reports
    n = setup.offsets.size - 1
    run_of_slot = np.repeat(np.asarray(two_phase, dtype=np.int64), n)
    clients = np.tile(np.arange(n, dtype=np.int64), len(two_phase))
    seeds = np.array([setup.runs[r].seed for r in run_of_slot], dtype=np.int64)
    plan = plan_batches(
        seeds=seeds,
        round_index=t,
        clients=clients,
        offsets=setup.offsets,
        steps=setup.steps,
        batch_size=setup.config.batch_size,
    )
    slot_index = torch.as_tensor(run_of_slot, device=setup.device)
    result = setup.backend.train(
        {name: v.index_select(0, slot_index) for name, v in state.globals.items()},
        features=setup.features,
        targets=setup.targets,
        plan=plan,
        steps=setup.steps,
        local_lr=lr,
        step=setup.config.algorithm.client_init(state.algorithm_state, run_of_slot, clients),
    )
    norms = flat_norms(result.updates).cpu().numpy()
    gradient_norms = result.gradient_norms.cpu().numpy()
    losses = result.first_loss.cpu().numpy()
    flat = torch.cat([u.reshape(u.shape[0], -1) for u in result.updates.values()], dim=1).double().cpu().numpy()
    sampler_states = list(state.sampler_states)
    everyone = Selection(clients=np.arange(n, dtype=np.int64), weights=setup.importances)
    for k, r in enumerate(two_phase):
        mine = slice(k * n, (k + 1) * n)
        feedback = Feedback(
            round=t,
            selection=everyone,
            clients=np.arange(n, dtype=np.int64),
            update_norms=norms[mine],
            losses=losses[mine],
            gradient_norms=gradient_norms[mine],
            local_lr=lr,
            local_steps=setup.steps,
        )
        sampler_states[r] = setup.runs[r].sampler.update(sampler_states[r], feedback)
        reports[r] = Report(updates=flat[mine])
    return dataclasses.replace(state, sampler_states=sampler_states), reports


def design_variance(design: object, importances: FloatArray, updates: FloatArray) -> float:
    """``E||sum_i w_i U_i - E[sum_i w_i U_i]||^2`` for the weights of ``design``: ``sum_ij Cov(w_i, w_j) <U_i, U_j>``.

    Exact from the design's weight covariance; NaN for a design without one (or beyond
    ``MAX_COVARIANCE_CLIENTS`` clients).
    """
    if updates.shape[0] > MAX_COVARIANCE_CLIENTS:
        return float("nan")
    try:
        cov = weight_covariance(design, importances)
    except TypeError:
        return float("nan")
    return float(np.sum(cov * (updates @ updates.T)))


def aggregate_variances(importances: FloatArray, updates: FloatArray, num_sampled: int) -> tuple[float, float]:
    """The variance of the aggregate ``sum_i w_i U_i`` of MD and of uniform sampling of ``m`` clients, exactly.

    MD (``m`` draws from ``p``, weight ``1/m`` per draw): ``(sum_i p_i ||U_i||^2 - ||sum_i p_i U_i||^2) / m``.
    Uniform (``m`` distinct of ``n``, weights ``a_i = n p_i / m``): ``pi (1 - pi) sum_i a_i^2 ||U_i||^2 +
    (pi_2 - pi^2) sum_{i != j} a_i a_j <U_i, U_j>`` with ``pi = m / n``, ``pi_2 = m (m - 1) / (n (n - 1))``.
    """
    p = np.asarray(importances, dtype=np.float64)
    u = np.asarray(updates, dtype=np.float64)
    n, m = p.size, num_sampled
    squared = np.einsum("ij,ij->i", u, u)
    mean = p @ u
    md = max(float(p @ squared - mean @ mean), 0.0) / m
    a = n * p / m
    pi = min(m / n, 1.0)
    pi2 = m * (m - 1) / (n * (n - 1)) if n > 1 else 0.0
    diagonal = float((a * a) @ squared)
    total = a @ u
    off = float(total @ total) - diagonal
    uniform = max(pi * (1 - pi) * diagonal + (pi2 - pi * pi) * off, 0.0) if m < n else 0.0
    return md, uniform


def record_round(setup: Setup, state: SimulationState, t: int, reports: list[Report | None], sent: list[int]) -> None:
    """Write round ``t``'s two-phase metrics of every run with a report (``sent[r]``: its kept clients)."""
    record = state.record
    n = setup.offsets.size - 1
    p = setup.importances
    for r, report in enumerate(reports):
        if report is None:
            continue
        record["computed_clients"][r, t] = n
        record["communicated_clients"][r, t] = sent[r]
        design = setup.runs[r].sampler.design(state.sampler_states[r])
        record["aggregate_variance"][r, t] = design_variance(design, p, report.updates)
        md, uniform = aggregate_variances(p, report.updates, setup.config.num_sampled)
        record["aggregate_variance_md"][r, t] = md
        record["aggregate_variance_uniform"][r, t] = uniform
