"""The first phase of a two-phase round (:attr:`fedsample.samplers.Sampler.two_phase`): the candidates report.

A two-phase sampler draws the round from what its candidates report *before* the draw
(:mod:`fedsample.samplers.two_phase`); a sampler with an initial phase (DivFL, ``high-loss``) asks
for one such report from every available client before its first selection only
(:func:`~fedsample.samplers.two_phase.phase_due` says which runs have one due). For each such run,
round ``t``:

1. the candidates are drawn among the clients available in round ``t`` under the run's
   availability model (:func:`~fedsample.samplers.two_phase.draw_candidates`, stream
   ``(seed, SAMPLING, t, 1)``): every available client by default, ``K`` of them for ``optimal``'s
   ``candidates``, Power-of-Choice's ``d``; an unavailable client never computes nor reports;
2. the candidates compute what the sampler's :class:`~fedsample.samplers.two_phase.FirstPhase`
   asks: their updates (they train from the run's global model with the round's batches, keyed by
   seed, round and client, so a chosen client's update in the second phase is the one it computed
   here; ``optimal``, ``optimal-distribution``, DivFL), their loss at the global model (the
   evaluation's forward pass over all their data or a mini-batch, no training; Power-of-Choice's
   pow-d and cpow-d, ``high-loss``), or the gradient of their mean loss over all their data at the
   global model (DivFL's ``representative="gradient"``), all runs' candidates of a kind batched
   where the backend allows (the gradients are one forward and backward pass per candidate);
3. the report reaches the sampler through :meth:`~fedsample.samplers.Sampler.update` (its
   ``selection`` is the candidate draw, with its weights), and the sampler then draws the round.
   A two-phase sampler gets no feedback after the round; a sampler with an initial phase does.

On the simulated clock (a run with a system model) the round lasts the first phase, until the
last candidate's report, plus the chosen clients' second phase (:func:`clock_times`, docs/system.md).

For a two-phase run the engine counts the clients that computed (the candidates) apart from those
that communicated (the chosen ones whose update was kept). For a run whose candidates reported
updates it records the variance of the aggregate that the sampler's second-stage design achieves
*given the candidates* (:func:`design_variance`, exact); when the candidates are every client, also
that of MD and of uniform sampling with the same ``m`` on the same updates
(:func:`aggregate_variances`), which need every client's update and are NaN otherwise.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from fedsample._arrays import FloatArray, IntArray
from fedsample.designs.exact import weight_covariance
from fedsample.designs.row_moments import MAX_COVARIANCE_CLIENTS
from fedsample.engine.batching import plan_batches
from fedsample.engine.simulation import Setup, SimulationState, train_slots
from fedsample.engine.trainers.base import flat_norms
from fedsample.participation.availability import AlwaysAvailable
from fedsample.participation.system import FORWARD_SHARE, ClientSystems
from fedsample.samplers import Feedback, Selection
from fedsample.samplers.two_phase import EVERY_UPDATE, FirstPhase, candidates_rng, draw_candidates, phase_due

__all__ = [
    "Report",
    "aggregate_variances",
    "client_gradients",
    "clock_times",
    "design_variance",
    "first_phase",
    "gradient_times",
    "record_round",
]


@dataclass(frozen=True, eq=False)
class Report:
    """One run's first phase: its candidates and, when they trained, their updates ``(K, d)`` in that order.

    ``samples``: the samples each candidate processed (trained on, or evaluated its loss or gradient
    over); ``phase``: what they computed.
    """

    candidates: Selection
    updates: FloatArray | None
    samples: IntArray
    phase: FirstPhase = EVERY_UPDATE


def first_phase(setup: Setup, state: SimulationState, t: int, lr: float) -> tuple[SimulationState, list[Report | None]]:
    """Phase 1 of round ``t``: the state whose samplers with a first phase due have read their candidates' report.

    Returns the new state and, per run, its :class:`Report` (``None`` for a run without a first
    phase this round, which is left untouched).
    """
    reports: list[Report | None] = [None] * len(setup.runs)
    phases = {r: phase_due(run.sampler, state.sampler_states[r]) for r, run in enumerate(setup.runs)}
    due = {r: phase for r, phase in phases.items() if phase is not None}
    if not due:
        return state, reports
    candidates = {r: _candidates(setup, state, r, t) for r in due}
    training = [r for r, phase in due.items() if phase.report == "updates"]
    feedback = _train_candidates(setup, state, t, lr, {r: candidates[r] for r in training}, due, reports)
    for r, phase in due.items():
        if phase.report == "gradients":
            feedback[r], evaluated = _gradient_feedback(setup, state, r, t, candidates[r])
        elif phase.report != "updates":
            feedback[r], evaluated = _loss_feedback(setup, state, r, t, candidates[r], phase)
        else:
            continue
        reports[r] = Report(candidates=candidates[r], updates=None, samples=evaluated, phase=phase)
    sampler_states = list(state.sampler_states)
    for r in due:
        sampler_states[r] = setup.runs[r].sampler.update(sampler_states[r], feedback[r])
    return dataclasses.replace(state, sampler_states=sampler_states), reports


def _candidates(setup: Setup, state: SimulationState, r: int, t: int) -> Selection:
    """Run ``r``'s candidates of round ``t``, among the clients available then."""
    run, n = setup.runs[r], setup.offsets.size - 1
    availability = setup.participations[r].availability
    everyone = np.arange(n, dtype=np.int64)
    available = everyone if isinstance(availability, AlwaysAvailable) else everyone[availability.available(t, everyone)]
    rng = candidates_rng(run.seed, t)
    return draw_candidates(run.sampler, state.sampler_states[r], available, rng, setup.importances)


def _train_candidates(
    setup: Setup,
    state: SimulationState,
    t: int,
    lr: float,
    candidates: dict[int, Selection],
    phases: dict[int, FirstPhase],
    reports: list[Report | None],
) -> dict[int, Feedback]:
    """The feedback of the runs whose candidates train (one backend call for all); fills their reports."""
    runs = [r for r, selection in candidates.items() if selection.clients.size]
    feedback = {r: _empty_feedback(t, candidates[r], phases[r]) for r in candidates if r not in runs}
    dimension = sum(v[0].numel() for v in state.globals.values())
    for r in feedback:  # nobody available: nothing computed
        reports[r] = Report(
            candidates=candidates[r], updates=np.zeros((0, dimension)), samples=np.zeros(0, np.int64), phase=phases[r]
        )
    if not runs:
        return feedback
    counts = [candidates[r].clients.size for r in runs]
    run_of_slot = np.repeat(np.asarray(runs, dtype=np.int64), counts)
    clients = np.concatenate([candidates[r].clients for r in runs]).astype(np.int64)
    result = train_slots(setup, state, t, lr, (run_of_slot, clients))
    norms = flat_norms(result.updates).cpu().numpy()
    gradient_norms = result.gradient_norms.cpu().numpy()
    losses = result.first_loss.cpu().numpy()
    flat = torch.cat([u.reshape(u.shape[0], -1) for u in result.updates.values()], dim=1).double().cpu().numpy()
    bounds = np.concatenate([[0], np.cumsum(counts)])
    for k, r in enumerate(runs):
        mine = slice(int(bounds[k]), int(bounds[k + 1]))
        selection = candidates[r]
        feedback[r] = Feedback(
            round=t,
            selection=selection,
            clients=selection.clients,
            update_norms=norms[mine],
            updates=flat[mine] if phases[r].vectors else None,
            losses=losses[mine],
            gradient_norms=gradient_norms[mine],
            local_lr=lr,
            local_steps=setup.steps,
        )
        trained = np.full(selection.clients.size, setup.steps * setup.config.batch_size, dtype=np.int64)
        reports[r] = Report(candidates=selection, updates=flat[mine], samples=trained, phase=phases[r])
    return feedback


def _gradient_feedback(
    setup: Setup, state: SimulationState, r: int, t: int, candidates: Selection
) -> tuple[Feedback, IntArray]:
    """Run ``r``'s candidates' full-batch gradients at its global model, and the samples each read."""
    clients = np.asarray(candidates.clients, dtype=np.int64)
    gradients = client_gradients(setup, state, r, clients)
    counts = (setup.offsets[clients + 1] - setup.offsets[clients]).astype(np.int64)
    return Feedback(round=t, selection=candidates, clients=clients, gradients=gradients), counts


def client_gradients(setup: Setup, state: SimulationState, r: int, clients: IntArray) -> FloatArray:
    """``(len(clients), d)``: each client's gradient of its mean loss over all its rows at run ``r``'s
    global model, flattened in the order of the parameters (that of the updates)."""
    ids = np.asarray(clients, dtype=np.int64)
    dimension = sum(v[0].numel() for v in state.globals.values())
    if ids.size == 0:
        return np.zeros((0, dimension))
    starts, ends = setup.offsets[ids], setup.offsets[ids + 1]
    rows = np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in zip(starts, ends, strict=True)])
    index = torch.as_tensor(rows, device=setup.device)
    model = {name: v[r : r + 1] for name, v in state.globals.items()}
    buffers = {name: v[r : r + 1] for name, v in state.buffers.items()}
    gradients = setup.evaluator.mean_loss_gradients(
        model, buffers, setup.features.index_select(0, index), setup.targets.index_select(0, index), ends - starts
    )
    out: FloatArray = gradients.double().cpu().numpy()
    return out


def _loss_feedback(
    setup: Setup, state: SimulationState, r: int, t: int, candidates: Selection, phase: FirstPhase
) -> tuple[Feedback, IntArray]:
    """Run ``r``'s candidates' loss at its global model (over all their rows, or a mini-batch of ``b`` each).

    Also the number of samples each candidate evaluated.
    """
    clients = np.asarray(candidates.clients, dtype=np.int64)
    if clients.size == 0:  # nobody available: nothing computed
        return _empty_feedback(t, candidates, phase), np.zeros(0, dtype=np.int64)
    if phase.report == "losses":  # pow-d: every local sample
        starts, ends = setup.offsets[clients], setup.offsets[clients + 1]
        counts = ends - starts
        rows = np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in zip(starts, ends, strict=True)])
    else:  # cpow-d: b distinct samples, keyed by (seed, TRAINING, t, client) like a first local batch
        plan = plan_batches(
            seeds=np.full(clients.size, setup.runs[r].seed, dtype=np.int64),
            round_index=t,
            clients=clients,
            offsets=setup.offsets,
            steps=1,
            batch_size=phase.loss_batch or setup.config.batch_size,
        )
        counts = plan.counts
        rows = np.concatenate([plan.rows[0, j, : counts[j]] for j in range(clients.size)]).astype(np.int64)
    losses = _mean_losses(setup, state, r, rows, counts)
    return Feedback(round=t, selection=candidates, clients=clients, losses=losses), np.asarray(counts, dtype=np.int64)


def clock_times(
    systems: ClientSystems,
    report: Report,
    clients: IntArray,
    *,
    samples: float,
    num_parameters: int,
    reference: float,
) -> tuple[float, FloatArray]:
    """A first-phase round on the simulated clock: the first phase's length ``P`` and each chosen client's time.

    Each candidate receives the model, computes its report (``report.samples`` samples: training, a
    gradient over its data, or a loss evaluation at ``FORWARD_SHARE`` of a training sample's cost)
    and sends it: a few scalars (a latency), or a model-sized vector (DivFL's update or gradient: a
    latency and an upload). The phase lasts until the last report, ``P``, with no deadline (the
    server needs every report to draw). Each of ``clients`` (the chosen ones) then trains
    ``samples`` samples unless it trained in the first phase, and uploads its update unless it sent
    it with its report; its time is ``P`` plus that (docs/system.md).
    """
    phase = report.phase
    trained = phase.report == "updates"
    share = FORWARD_SHARE if phase.report in ("losses", "batch-losses") else 1.0
    ids = np.asarray(report.candidates.clients, dtype=np.int64)
    first = systems.report_times(ids, report.samples, num_parameters, reference, work_share=share)
    if phase.uploads_vectors:
        first = first + systems.upload_times(ids, 0.0, num_parameters, reference) - systems.latency[ids]
    length = float(first.max()) if first.size else 0.0
    if trained and phase.vectors:  # the chosen clients' updates came with their reports
        return length, np.full(np.asarray(clients).size, length)
    second = systems.upload_times(clients, 0.0 if trained else samples, num_parameters, reference)
    out: FloatArray = length + second
    return length, out


def gradient_times(
    systems: ClientSystems, clients: IntArray, sizes: IntArray, num_parameters: int, reference: float
) -> FloatArray:
    """The extra seconds each of ``clients`` spends, in a round it trains, on computing its gradient over
    its ``sizes`` samples (a training sample's cost each) and uploading it beside its update (DivFL's
    ``representative="gradient"``, as in its authors' code)."""
    ids = np.asarray(clients, dtype=np.int64)
    work = np.asarray(sizes, dtype=np.float64) * systems.compute[ids] * (num_parameters / reference)
    upload = systems.upload_times(ids, 0.0, num_parameters, reference) - systems.latency[ids]
    out: FloatArray = work + upload
    return out


def _empty_feedback(t: int, candidates: Selection, phase: FirstPhase) -> Feedback:
    """The report of a round without candidates."""
    nothing = np.zeros(0)
    vectors = np.zeros((0, 0)) if phase.uploads_vectors else None
    return Feedback(
        round=t,
        selection=candidates,
        clients=candidates.clients,
        update_norms=nothing,
        updates=vectors if phase.report == "updates" else None,
        gradients=vectors if phase.report == "gradients" else None,
        losses=nothing,
        gradient_norms=nothing,
    )


def _mean_losses(setup: Setup, state: SimulationState, r: int, rows: IntArray, counts: IntArray) -> FloatArray:
    """Mean loss of run ``r``'s global model over consecutive groups of ``counts`` of the pooled ``rows``."""
    index = torch.as_tensor(rows, device=setup.device)
    model = {name: v[r : r + 1] for name, v in state.globals.items()}
    buffers = {name: v[r : r + 1] for name, v in state.buffers.items()}
    sample_losses = setup.evaluator.sample_losses(
        model, buffers, setup.features.index_select(0, index), setup.targets.index_select(0, index)
    )[0].double()
    group = torch.as_tensor(np.repeat(np.arange(counts.size), counts), device=setup.device)
    sums = torch.zeros(counts.size, dtype=sample_losses.dtype, device=setup.device).index_add_(0, group, sample_losses)
    out: FloatArray = sums.cpu().numpy() / np.maximum(counts, 1)
    return out


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
        if report is None or not setup.runs[r].sampler.two_phase:  # an initial phase records nothing here
            continue
        candidates = np.asarray(report.candidates.clients, dtype=np.int64)
        record["computed_clients"][r, t] = candidates.size
        record["communicated_clients"][r, t] = sent[r]
        if report.updates is None:  # losses only: no update to take a variance of
            continue
        updates = np.zeros((n, report.updates.shape[1]))
        updates[candidates] = report.updates
        # Given the candidates: the second stage's weights are zero outside them.
        design = setup.runs[r].sampler.design(state.sampler_states[r])
        record["aggregate_variance"][r, t] = design_variance(design, p, updates)
        if candidates.size == n:
            md, uniform = aggregate_variances(p, updates, setup.config.num_sampled)
            record["aggregate_variance_md"][r, t] = md
            record["aggregate_variance_uniform"][r, t] = uniform
