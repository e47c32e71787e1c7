"""One round of every run simulated together, as a function of the explicit state.

:func:`run_round` draws each run's participants, trains the slots of all runs in one backend call
(the local algorithm supplies their step), settles the replies (rejected, late, re-weighted),
aggregates per run (the buffers by :func:`~fedsample.engine.aggregation.combine_buffers`), applies the
server optimizer and hands each sampler its feedback (a two-phase
sampler reads its candidates' report before its draw instead, :mod:`fedsample.engine.first_phase`). It
returns the new state; the round's metrics are written into the state's record.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from fedsample._arrays import BoolArray, FloatArray, IntArray
from fedsample.engine.aggregation import combine_buffers, memory_step
from fedsample.engine.algorithms import ClientFinal, segment_sum
from fedsample.engine.batching import selection_batches
from fedsample.engine.first_phase import (
    Report,
    client_gradients,
    clock_times,
    first_phase,
    gradient_times,
    record_round,
)
from fedsample.engine.paper_models import Params
from fedsample.engine.simulation import Setup, SimulationState, train_slots
from fedsample.engine.trainers.base import LocalResult, flat_norms
from fedsample.errors import FedsampleError
from fedsample.participation.availability import AlwaysAvailable
from fedsample.participation.mifa import MemoryWarmup
from fedsample.participation.procedure import Selected, Settled, select_participants, settle_participants, warmed_up
from fedsample.samplers import Feedback

__all__ = ["check_rejections", "run_round"]


def run_round(setup: Setup, state: SimulationState, t: int, lr: float) -> SimulationState:
    """Round ``t`` at local learning rate ``lr``: the state after it."""
    runs, record = setup.runs, state.record
    num_runs = len(runs)
    num_clients = setup.offsets.size - 1
    # Two-phase samplers read their candidates' report before drawing (fedsample.engine.first_phase).
    state, reports = first_phase(setup, state, t, lr)
    selected_per_run: list[Selected] = []
    trained_per_run, sizes_per_run, kept_per_run = [], [], []
    filling = np.zeros(num_runs, dtype=bool)  # runs of the released MIFA filling their memory (they stay)
    for r, run in enumerate(runs):
        selected = select_participants(
            run.sampler,
            state.sampler_states[r],
            setup.participations[r],
            seed=run.seed,
            round=t,
            num_clients=num_clients,
        )
        record["distinct_clients"][r, t] = selected.clients.size
        if setup.label_presence is not None:
            record["distinct_labels"][r, t] = int(setup.label_presence[selected.clients].any(axis=0).sum())
        # A data-level selection's batch is the round's kept subset, read at every local step.
        batch_sizes, kept_subsets = selection_batches(selected.selection, selected.clients, setup.config.batch_size)
        warmup = state.estimators[r]
        if isinstance(warmup, MemoryWarmup):  # the released MIFA: who trains in its warm-up
            phase = warmup.observe(selected.clients, selected.trains)
            selected, filling[r] = warmed_up(selected, phase, num_clients), phase == "fill"
            if phase != "train":
                batch_sizes = np.full(selected.clients.size, setup.config.batch_size, dtype=np.int64)
                kept_subsets = np.zeros(selected.clients.size, dtype=bool)
        clients, trains = selected.clients, selected.trains
        selected_per_run.append(selected)
        trained_per_run.append(clients[trains])
        sizes_per_run.append(batch_sizes[trains])
        kept_per_run.append(kept_subsets[trains])
    counts = np.array([c.size for c in trained_per_run])
    run_of_slot = np.repeat(np.arange(num_runs), counts)
    clients = np.concatenate(trained_per_run) if counts.sum() else np.zeros(0, dtype=np.int64)
    slot_sizes = np.concatenate(sizes_per_run) if counts.sum() else np.zeros(0, dtype=np.int64)
    slot_kept = np.concatenate(kept_per_run) if counts.sum() else np.zeros(0, dtype=bool)
    result = None
    algorithm = setup.config.algorithm
    if clients.size:
        measure = any(run.sampler.needs_loss_squares for run in runs)
        result = train_slots(setup, state, t, lr, (run_of_slot, clients), (slot_sizes, slot_kept), measure)
    slot_weights, slot_kept, clocks = _settle(setup, state, t, selected_per_run, counts, result, reports)
    kept = np.flatnonzero(slot_kept)
    if result is not None and kept.size < clients.size:  # drop the rejected and late slots
        result = result.select(torch.as_tensor(kept, device=setup.device))
        run_of_slot, clients, slot_weights = run_of_slot[kept], clients[kept], slot_weights[kept]
    algorithm_state, buffers, memory = state.algorithm_state, state.buffers, state.memory
    if result is not None and clients.size:
        # A run filling its memory keeps its buffers (its model does not move).
        w = torch.as_tensor(slot_weights * ~filling[run_of_slot], device=setup.device, dtype=torch.float32)
        delta = {
            n: segment_sum(u * w.view(-1, *[1] * (u.dim() - 1)), run_of_slot, num_runs)
            for n, u in result.updates.items()
            if memory is None
        }
        final = ClientFinal(run_of_slot, clients, result.updates, lr, setup.steps, w)
        algorithm_state = algorithm.after_round(algorithm_state, final)
        buffers = combine_buffers(state.buffers, result.buffers, run_of_slot, w, num_runs)
    else:  # no client kept in any run (possible with Poisson sampling, or when all failed)
        result = None
        delta = {n: torch.zeros_like(v) for n, v in state.globals.items()}
    if memory is not None:  # MIFA, FedVARP: the remembered updates (fedsample.engine.aggregation)
        policy = setup.participations[0].aggregation
        released = policy.warms_up
        updates = result.updates if result is not None else None
        p = slot_weights if released else setup.importances[clients]  # the released MIFA's average is 1/N
        delta, memory = memory_step(
            memory,
            updates,
            run_of_slot,
            clients,
            slot_weights,
            p,
            still_without_kept=policy.still_without_kept,
            still_runs=filling,
            learning_rate=lr if released else 1.0,
        )
    new_globals, server_state = setup.config.server.step(state.globals, delta, state.server_state)
    # The samplers hear nothing of a memory's filling: no selected client of theirs took part.
    fed_run = np.where(filling[run_of_slot], -1, run_of_slot)
    clients_per_run = [clients[fed_run == r] for r in range(num_runs)]
    record_round(setup, state, t, reports, [c.size for c in clients_per_run])
    selections = [s.selection for s in selected_per_run]
    sampler_states = _feedback(
        setup, state, t, lr, selections, clients_per_run, fed_run, result, new_globals, clocks=clocks
    )
    return dataclasses.replace(
        state,
        globals=new_globals,
        buffers=buffers,
        server_state=server_state,
        algorithm_state=algorithm_state,
        sampler_states=sampler_states,
        memory=memory,
    )


def check_rejections(setup: Setup, state: SimulationState, t: int) -> None:
    """Stop a run whose every returned update was rejected in the last ``max_rejected_rounds`` rounds.

    Read from the recorded counts (a round with rejections and a zero weight sum), so a resumed
    simulation stops where the uninterrupted one does.
    """
    limit = setup.config.max_rejected_rounds
    if not limit or t + 1 < limit:
        return
    window = slice(t + 1 - limit, t + 1)
    stuck = (state.record["rejected"][:, window] > 0) & (state.record["weight_sum"][:, window] == 0)
    for r in np.flatnonzero(stuck.all(axis=1)):
        run = setup.runs[int(r)]
        raise FedsampleError(
            f"The 'local_lr' parameter of TrainingConfig must let the clients' updates stay finite. Got "
            f"{setup.config.local_lr!r} instead: every update of run {run.label or run.sampler.name!r} (seed "
            f"{run.seed}) was rejected as NaN or infinity in rounds {t + 2 - limit} to {t + 1} "
            f"(max_rejected_rounds = {limit}).",
            parameter="local_lr",
        )


def _settle(
    setup: Setup,
    state: SimulationState,
    t: int,
    selected_per_run: list[Selected],
    counts: IntArray,
    result: LocalResult | None,
    reports: list[Report | None],
) -> tuple[np.ndarray, BoolArray, list[dict[str, Any]]]:
    """Reject non-finite updates, keep the first replies, correct the weights: per slot, weight and kept flag.

    Also each run's clock feedback (:func:`_clock_feedback`; empty without a system model).
    """
    finite_slots = np.ones(int(counts.sum()), dtype=bool)
    if result is not None:
        # An update, or a floating-point buffer (a running variance), holding NaN or infinity is rejected.
        tensors = [*result.updates.values(), *(b for b in result.buffers.values() if b.is_floating_point())]
        flags = [t.reshape(t.shape[0], -1).isfinite().all(1) for t in tensors]
        finite_slots = torch.stack(flags).all(0).cpu().numpy()
    bounds = np.concatenate([[0], np.cumsum(counts)])
    weights, kept = [], []
    clocks: list[dict[str, Any]] = []
    for r, (run, selected) in enumerate(zip(setup.runs, selected_per_run, strict=True)):
        trains = selected.trains
        finite = np.ones(trains.size, dtype=bool)
        finite[trains] = finite_slots[bounds[r] : bounds[r + 1]]
        times, first_phase_seconds = _round_times(setup, state, r, selected.clients, reports[r])
        settled = settle_participants(
            selected,
            finite,
            setup.participations[r],
            seed=run.seed,
            round=t,
            num_kept=setup.config.num_sampled,
            estimator=state.estimators[r],
            round_times=times,
            importances=setup.importances,
        )
        for name, count in settled.counts.items():
            state.record[name][r, t] = count
        state.record["weight_sum"][r, t] = float(settled.weights.sum())
        weights.append(settled.weights[trains])
        kept.append(settled.kept[trains])
        clocks.append(_clock_feedback(setup, r, selected, settled, times))
        if times is not None:
            record, before = state.record, state.record["simulated_seconds"][r, t - 1] if t else 0.0
            # A two-phase round lasts at least its first phase, even when every chosen client is late.
            duration = max(settled.duration, first_phase_seconds)
            record["simulated_round_seconds"][r, t] = duration
            record["simulated_seconds"][r, t] = before + duration
            record["missed_deadline"][r, t] = settled.missed_deadline
    if not weights:
        return np.zeros(0), np.zeros(0, dtype=bool), clocks
    return np.concatenate(weights), np.concatenate(kept), clocks


def _clock_feedback(
    setup: Setup, r: int, selected: Selected, settled: Settled, times: FloatArray | None
) -> dict[str, Any]:
    """Run ``r``'s :class:`Feedback` fields from the clock: the kept clients' ``round_times`` and, with a
    deadline, the clients that returned after it (``timed_out``, the server waited ``deadline`` seconds
    for each). Dropped and unavailable clients are not timed out. Empty without a system model."""
    if times is None:
        return {}
    clock: dict[str, Any] = {"round_times": times[settled.kept]}
    system = setup.participations[r].system
    if system is not None and system.deadline is not None and settled.missed is not None:
        timed_out = selected.clients[settled.missed]
        clock.update(timed_out=timed_out, timed_out_seconds=np.full(timed_out.size, float(system.deadline)))
    return clock


def _available_next(setup: Setup, r: int, t: int) -> IntArray | None:
    """Run ``r``'s clients available in round ``t + 1`` (``None`` when everyone always is)."""
    availability = setup.participations[r].availability
    if isinstance(availability, AlwaysAvailable):
        return None
    return np.flatnonzero(availability.available(t + 1, np.arange(setup.offsets.size - 1)))


def _round_times(
    setup: Setup, state: SimulationState, r: int, clients: IntArray, report: Report | None
) -> tuple[FloatArray | None, float]:
    """Run ``r``'s simulated round times of ``clients`` and the length of its first phase: docs/system.md.

    ``None`` and 0 without a system model; the first phase is 0 for a one-phase run (``report``
    ``None``), and a two-phase run's times include it (:func:`~fedsample.engine.first_phase.clock_times`).
    """
    system = setup.participations[r].system
    if system is None or not setup.systems:
        return None, 0.0
    num_parameters = sum(v[0].numel() for v in state.globals.values())
    samples = setup.steps * setup.config.batch_size
    systems, reference = setup.systems[r], system.reference_parameters
    if report is None:
        times = systems.round_times(clients, samples, num_parameters, reference)
        if setup.runs[r].sampler.needs_gradients:  # each trained client also sends its full-batch gradient
            sizes = setup.offsets[clients + 1] - setup.offsets[clients]
            times = times + gradient_times(systems, clients, sizes, num_parameters, reference)
        return times, 0.0
    length, times = clock_times(
        systems, report, clients, samples=samples, num_parameters=num_parameters, reference=reference
    )
    return times, length


def _feedback(
    setup: Setup,
    state: SimulationState,
    t: int,
    lr: float,
    selections: list[Any],
    clients_per_run: list[IntArray],
    run_of_slot: IntArray,
    result: LocalResult | None,
    new_globals: Params,
    *,
    clocks: list[dict[str, Any]] | None = None,
) -> list[object]:
    """Each sampler's state after it reads the round's feedback (``clocks``: each run's fields from the clock)."""
    norms = flat_norms(result.updates).cpu().numpy() if result is not None else np.zeros(0)
    # losses: at the global model on the first batch (what the loss-fed samplers always read);
    # loss_squares: the mean squared sample loss over every sample seen in the round (Oort's utility).
    losses = _numpy(result.first_loss if result is not None else None)
    # None when no sampler of the round asked for them (the backend did not measure them).
    squares = None
    if result is None or result.loss_squares is not None:
        squares = _numpy(result.loss_squares if result is not None else None)
    grad_norms = result.gradient_norms.cpu().numpy() if result is not None else np.zeros(0)
    sampler_states = list(state.sampler_states)
    for r, run in enumerate(setup.runs):
        if run.sampler.two_phase:  # it read this round's report before the draw
            continue
        mine = np.flatnonzero(run_of_slot == r)
        updates = None
        if run.sampler.needs_updates:
            # A run may have no slot this round: its updates are then a (0, d) array.
            if result is None:
                updates = np.zeros((0, sum(v[0].numel() for v in new_globals.values())))
            else:
                flat = torch.cat([u[mine].reshape(mine.size, u[0].numel()) for u in result.updates.values()], dim=1)
                updates = flat.double().cpu().numpy()
        # The kept clients' full-batch gradients at the round's global model (DivFL's authors' vector).
        gradients = client_gradients(setup, state, r, clients_per_run[r]) if run.sampler.needs_gradients else None
        feedback = Feedback(
            round=t,
            selection=selections[r],
            clients=clients_per_run[r],
            update_norms=norms[mine],
            updates=updates,
            gradients=gradients,
            losses=losses[mine],
            loss_squares=squares[mine] if squares is not None else None,
            gradient_norms=grad_norms[mine],
            local_lr=lr,
            local_steps=setup.steps,
            available=_available_next(setup, r, t),
            **(clocks[r] if clocks is not None else {}),
        )
        sampler_states[r] = run.sampler.update(sampler_states[r], feedback)
    return sampler_states


def _numpy(values: torch.Tensor | None) -> FloatArray:
    """``values`` on the host (an empty array for ``None``: no slot trained)."""
    return values.double().cpu().numpy() if values is not None else np.zeros(0)
