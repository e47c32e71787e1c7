"""The one round loop.

For each round ``t`` and each run (a sampler and a seed on the shared federation):

1. the sampler draws ``S_t`` with the stream ``(seed, SAMPLING, t)``; a client drawn several times
   trains once and its weights are summed; a :class:`~fedsample.participation.rounds.Participation`
   setting decides which clients are available, asked and dropped out (default: all available,
   none fails);
2. every selected client that is available and did not drop out, of every run, trains together
   (:mod:`fedsample.engine.backends`), ``N`` local steps of batch ``B`` from its run's global
   model, with the algorithm's local rule;
3. updates holding NaN or infinity are rejected, over-selected clients beyond the first ``m`` to
   reply are dropped, and the participation policy corrects the weights of the kept clients;
   each run aggregates ``delta = sum_i w'_i(S_t) (theta_i - theta)`` over them and its server
   optimizer applies it (``theta + eta_g delta``, paper 003's eq. 3);
4. the sampler receives the round's :class:`~fedsample.samplers.Feedback` (the kept clients,
   update norms, local losses, gradient norms, and the update vectors when it asks for them);
5. metrics are recorded, and every ``eval_every`` rounds the global objective ``sum_i p_i L_i``
   and the test metrics are computed, batched over all data and all runs.

Runs of one comparison share the federation, the model and the configuration; training them in
one batch gives the same results as training them one by one (their randomness is keyed by
their own seed, round and client).
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import torch

from fedsample._validation import Interval, check_param, invalid
from fedsample.engine.backends import Backend, BatchedBackend, SequentialBackend
from fedsample.engine.checkpoint import SimulationCheckpoint
from fedsample.engine.history import History
from fedsample.engine.models import ModelSpec, Params
from fedsample.engine.rounds import check_rejections, run_round
from fedsample.engine.settings import (
    FallbackWarning,
    Progress,
    RunResult,
    RunSpec,
    TrainingConfig,
    TrainingData,
    check_history_memory,
    initial_params,
)
from fedsample.engine.simulation import Setup, SimulationState, prepare, restore, snapshot
from fedsample.errors import FedsampleError
from fedsample.participation.rounds import Participation

# Progress and check_history_memory live in fedsample.engine.settings; they stay importable from here.
__all__ = ["Progress", "check_history_memory", "simulate"]


def _device(name: str) -> torch.device:
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise FedsampleError(
            f"The 'device' parameter of simulate must name an available device. Got {name!r} "
            "(PyTorch sees no CUDA device) instead.",
            parameter="device",
        )
    return torch.device(name)


def _choose_backend(model: ModelSpec, requested: str) -> Backend:
    if requested == "sequential":
        return SequentialBackend(model)
    if model.kind == "lstm":
        # torch.func has no batching rule for the fused LSTM kernel; its fallback loops per sample.
        warnings.warn(
            "the batched backend does not serve the 'lstm' model; using the sequential backend",
            FallbackWarning,
            stacklevel=4,
        )
        return SequentialBackend(model)
    return BatchedBackend(model)


def simulate(
    data: TrainingData,
    model: ModelSpec,
    runs: Sequence[RunSpec],
    config: TrainingConfig,
    *,
    init_seed: int = 0,
    params: Params | None = None,
    batch_runs: bool = True,
    progress: Callable[[Progress], None] | None = None,
    evaluation_data: TrainingData | None = None,
    checkpoint: Callable[[SimulationCheckpoint], None] | None = None,
    checkpoint_every: int = 0,
    resume: SimulationCheckpoint | None = None,
    participation: Participation | None = None,
) -> list[RunResult]:
    """Train every run of ``runs`` for ``config.rounds`` rounds and return their results.

    All runs start from the same global model: ``params`` if given, else
    :func:`initial_params` of ``init_seed``. With ``batch_runs`` the clients of all runs train in
    one batch per round; otherwise the runs are simulated one after another (same results).
    ``evaluation_data`` (default: ``data``) supplies the clients, importances and test rows that
    the metrics are computed on; the centralized baseline trains on a pooled view of a federation
    and evaluates on the federation itself.

    Every ``checkpoint_every`` rounds (0: never) the loop hands a
    :class:`~fedsample.engine.checkpoint.SimulationCheckpoint` to ``checkpoint`` (which usually
    saves it). ``resume`` continues from such a checkpoint of the same runs and configuration; the
    results are those of an uninterrupted simulation. Checkpoints need the runs batched together.

    ``participation`` (default: everyone available, nobody fails) sets availability, dropout,
    over-selection and the aggregation policy (:mod:`fedsample.participation.rounds`); each run's fates
    are keyed by its seed. The failures of every round are counted in the runs' histories.
    """
    if not runs:
        raise invalid("runs", "simulate", "a non-empty sequence of RunSpec", runs)
    if (model.task == "regression") != (data.task == "regression"):
        raise invalid("model", "simulate", f"a model for a {data.task} task", model.kind)
    check_param("checkpoint_every", "simulate", checkpoint_every, Interval(int, 0, None, closed="left"))
    if participation is None:
        participation = Participation()
    elif not isinstance(participation, Participation):
        raise invalid("participation", "simulate", "a Participation or None", participation)
    participation.check_known_rates(int(np.asarray(data.train_indptr).size - 1), "simulate")
    check_history_memory(config, len(runs) if batch_runs else 1, "simulate")
    if not batch_runs and len(runs) > 1 and (checkpoint is not None or resume is not None):
        raise invalid("batch_runs", "simulate", "True when checkpointing or resuming several runs", batch_runs)
    if not batch_runs and len(runs) > 1:
        results = []
        for index, run in enumerate(runs):
            # Progress over the whole sequence of runs: rounds done so far out of runs x rounds.
            offset = index * config.rounds

            def report(update: Progress, offset: int = offset) -> None:
                if progress is not None:
                    progress(dataclasses.replace(update, done=offset + update.done, total=len(runs) * update.total))

            results.append(
                simulate(
                    data,
                    model,
                    [run],
                    config,
                    init_seed=init_seed,
                    params=params,
                    progress=report,
                    evaluation_data=evaluation_data,
                    participation=participation,
                )[0]
            )
        return results
    device = _device(config.device)
    backend = _choose_backend(model, config.backend)
    start_params = params if params is not None else initial_params(model, init_seed)
    setup, state = prepare(
        data, model, list(runs), config, backend, device, start_params, evaluation_data, participation
    )
    if resume is not None:
        state = restore(setup, state, resume)
    return _run(setup, state, progress, checkpoint, checkpoint_every)


def _run(
    setup: Setup,
    state: SimulationState,
    progress: Callable[[Progress], None] | None,
    checkpoint: Callable[[SimulationCheckpoint], None] | None,
    checkpoint_every: int,
) -> list[RunResult]:
    """Every remaining round of ``state``, with its evaluations, progress reports and checkpoints."""
    config = setup.config
    rounds = config.rounds

    def evaluate(done: int) -> None:
        state.eval_rounds.append(done)
        state.evaluations.append(setup.evaluator(state.globals))

    if not state.eval_rounds:
        evaluate(0)
    for t in range(state.rounds_done, rounds):
        begin = time.perf_counter()
        lr = config.local_lr * config.lr_decay**t
        state.record["local_lr"][t] = lr
        state = run_round(setup, state, t, lr)
        state.record["round_seconds"][t] = time.perf_counter() - begin
        if (t + 1) % config.eval_every == 0 or t + 1 == rounds:
            evaluate(t + 1)
        state.rounds_done = t + 1
        if progress is not None:
            progress(Progress(t + 1, rounds, state.evaluations[-1][0].copy(), state.eval_rounds[-1]))
        check_rejections(setup, state, t)
        if checkpoint is not None and checkpoint_every and (t + 1) % checkpoint_every == 0 and t + 1 < rounds:
            checkpoint(snapshot(setup, state))
    return [_result(setup, state, r) for r in range(len(setup.runs))]


def _result(setup: Setup, state: SimulationState, r: int) -> RunResult:
    """Run ``r``'s history, final global parameters and final sampler state."""
    run, evals = setup.runs[r], state.evaluations
    history = History(
        label=run.label or run.sampler.name,
        sampler=run.sampler.name,
        seed=run.seed,
        eval_rounds=np.asarray(state.eval_rounds, dtype=np.int64),
        train_loss=np.array([e[0][r] for e in evals]),
        test_loss=np.array([e[1][r] for e in evals]),
        test_accuracy=np.array([e[2][r] for e in evals]),
        **state.record.of_run(r, two_phase=run.sampler.two_phase, system=bool(setup.systems)),
        info={"backend": setup.backend.name, "runs_batched": len(setup.runs), "device": str(setup.device)},
    )
    params = {n: v[r].detach().cpu().numpy() for n, v in state.globals.items()}
    return RunResult(history=history, params=params, sampler_state=state.sampler_states[r])
