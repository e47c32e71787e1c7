"""The one round loop.

For each round ``t`` and each run (a sampler and a seed on the shared federation):

1. the sampler draws ``S_t`` with the stream ``(seed, SAMPLING, t)``; a client drawn several times
   trains once and its weights are summed; a :class:`~fedsample.participation.setting.Participation`
   setting decides which clients are available, asked and dropped out (default: all available,
   none fails);
2. every selected client that is available and did not drop out, of every run, trains together
   (:mod:`fedsample.engine.trainers.base`), ``N`` local steps of batch ``B`` from its run's global
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

import contextlib
import dataclasses
import functools
import math
import time
import warnings
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch

from fedsample._threads import resolve_threads
from fedsample._validation import Interval, check_param, invalid
from fedsample.engine.checkpoint import SimulationCheckpoint
from fedsample.engine.history import History
from fedsample.engine.paper_models import Params
from fedsample.engine.round_step import check_rejections, run_round
from fedsample.engine.simulation import (
    Setup,
    SimulationState,
    fit_to_model,
    prepare,
    restore,
    snapshot,
)
from fedsample.engine.specs import (
    FallbackWarning,
    Progress,
    RoundReport,
    RunResult,
    RunSpec,
    TrainingConfig,
    TrainingData,
    check_history_memory,
    check_round_memory,
)
from fedsample.engine.trainers.base import Backend, BatchedBackend, SequentialBackend, batching_problem
from fedsample.engine.user_model import BoundModel, ModelLike, bind_to_data, check_batches
from fedsample.errors import FedsampleError
from fedsample.participation.setting import Participation
from fedsample.samplers import Sampler

# Progress and check_history_memory live in fedsample.engine.specs; they stay importable from here.
__all__ = ["Progress", "check_history_memory", "simulate"]


def _device(name: str) -> torch.device:
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise FedsampleError(
            f"The 'device' parameter of simulate must name an available device. Got {name!r} "
            "(PyTorch sees no CUDA device) instead.",
            parameter="device",
        )
    return torch.device(name)


def _choose_backend(model: BoundModel, requested: str, data: TrainingData, device: torch.device) -> Backend:
    """The backend ``requested``, or the sequential one with a :class:`FallbackWarning` saying why when
    ``torch.func`` cannot batch the model (a random operation other than dropout, an operation
    without a batching rule such as the fused LSTM kernel, an in-place write it refuses)."""
    if requested == "sequential":
        return SequentialBackend(model)
    problem = batching_problem(model, data.train_features, data.train_targets, device)
    if problem is not None:
        warnings.warn(
            f"the batched backend does not serve the model {model.name!r} ({problem}); using the sequential backend",
            FallbackWarning,
            stacklevel=4,
        )
        return SequentialBackend(model)
    return BatchedBackend(model)


def simulate(
    data: TrainingData,
    model: ModelLike | BoundModel,
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
    on_round: Callable[[RoundReport], None] | None = None,
) -> list[RunResult]:
    """Train every run of ``runs`` for ``config.rounds`` rounds and return their results.

    ``model`` is any ``torch.nn.Module`` (an instance, or a factory returning one), a
    :class:`~fedsample.engine.user_model.Model` (a module with its loss and metrics) or a
    :class:`~fedsample.engine.paper_models.ModelSpec` (the papers' models); see docs/your-model.md. It is
    checked on the data's first rows before anything trains. All runs start from the same global
    model: ``params`` (a mapping of parameter names, and optionally buffer names, to tensors) if
    given, else the model's initial state for ``init_seed`` (a factory is called under a generator
    seeded from it; a module instance starts from its own parameters and buffers). With
    ``batch_runs`` the clients of all runs train in one batch per round; otherwise the runs are
    simulated one after another (same results).
    ``evaluation_data`` (default: ``data``) supplies the clients, importances and test rows that
    the metrics are computed on; the centralized baseline trains on a pooled view of a federation
    and evaluates on the federation itself.

    Every ``checkpoint_every`` rounds (0: never) the loop hands a
    :class:`~fedsample.engine.checkpoint.SimulationCheckpoint` to ``checkpoint`` (which usually
    saves it). ``resume`` continues from such a checkpoint of the same runs and configuration; the
    results are those of an uninterrupted simulation. Checkpoints need the runs batched together.

    ``participation`` (default: everyone available, nobody fails) sets availability, dropout,
    over-selection and the aggregation policy (:mod:`fedsample.participation.procedure`); each run's fates
    are keyed by its seed. The failures of every round are counted in the runs' histories.

    ``progress`` receives a :class:`~fedsample.engine.specs.Progress` after every round (the latest
    training objective of each run); ``on_round`` a :class:`~fedsample.engine.specs.RoundReport` (every
    column of each run's metrics record for the round, the initial model's as round 0), for a tracker
    such as TensorBoard or MLflow (:mod:`fedsample.experiments.results.tracking`). A resumed simulation reports
    the rounds it runs. An exception raised by either callback ends the simulation.
    """
    _check_inputs(data, runs, config)
    check_param("checkpoint_every", "simulate", checkpoint_every, Interval(int, 0, None, closed="left"))
    check_param("init_seed", "simulate", init_seed, Interval(int, 0, None, closed="left"))
    if participation is None:
        participation = Participation()
    elif not isinstance(participation, Participation):
        raise invalid("participation", "simulate", "a Participation or None", participation)
    participation.check_known_rates(int(np.asarray(data.train_indptr).size - 1), "simulate")
    for name, callback in (("progress", progress), ("checkpoint", checkpoint), ("on_round", on_round)):
        if callback is not None and not callable(callback):
            raise invalid(name, "simulate", "a callable or None", callback)
    check_history_memory(config, len(runs) if batch_runs else 1, "simulate")
    if not batch_runs and len(runs) > 1 and (checkpoint is not None or resume is not None):
        raise invalid("batch_runs", "simulate", "True when checkpointing or resuming several runs", batch_runs)
    together = len(runs) if batch_runs else 1
    check_memory = functools.partial(
        check_round_memory,
        config,
        data,
        clients=participation.num_asked(config.num_sampled) * together,
        runs=together,
        owner="simulate",
        batch=("batch_size", config.batch_size),
        model_key=("model", None),
    )
    counted = check_memory(model)
    bound = model if isinstance(model, BoundModel) else bind_to_data(model, data, "simulate")
    if not counted:  # a factory that cannot be built on the meta device, counted once built
        check_memory(bound)
    check_batches(bound, np.diff(np.asarray(data.train_indptr)), config.batch_size, "simulate")
    # A sampler that reads the model's layout (HiCS-FL: its output layer) takes it from the model.
    runs = [dataclasses.replace(run, sampler=fit_to_model(run.sampler, bound)) for run in runs]
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
                    bound,
                    [run],
                    config,
                    init_seed=init_seed,
                    params=params,
                    progress=report,
                    evaluation_data=evaluation_data,
                    participation=participation,
                    on_round=on_round,
                )[0]
            )
        return results
    device = _device(config.device)
    bound = bound.to(device)
    backend = _choose_backend(bound, config.backend, data, device)
    start = _start(bound, params, init_seed)
    setup, state = prepare(data, bound, list(runs), config, backend, device, start, evaluation_data, participation)
    if resume is not None:
        state = restore(setup, state, resume)
    with torch_threads(config.threads) as threads:
        results = _run(setup, state, progress, checkpoint, checkpoint_every, on_round)
    return [
        dataclasses.replace(r, history=dataclasses.replace(r.history, info={**r.history.info, "threads": threads}))
        for r in results
    ]


@contextlib.contextmanager
def torch_threads(setting: int | str) -> Iterator[int]:
    """PyTorch's intra-op threads set from ``setting`` (:func:`fedsample._threads.resolve_threads`) for the
    block, the caller's count restored after; yields the count."""
    before = torch.get_num_threads()
    count = resolve_threads(setting, current=before)
    torch.set_num_threads(count)
    try:
        yield count
    finally:
        torch.set_num_threads(before)


def _check_inputs(data: object, runs: object, config: object) -> None:
    """The data, the runs and the configuration are what simulate reads (one line naming the first that is not)."""
    if not all(hasattr(data, name) for name in ("train_features", "train_targets", "train_indptr", "task")):
        raise invalid("data", "simulate", "a FederatedDataset (or any TrainingData)", type(data).__name__)
    if isinstance(runs, (str, bytes)) or not isinstance(runs, Sequence) or not runs:
        raise invalid("runs", "simulate", "a non-empty sequence of RunSpec", runs)
    for index, run in enumerate(runs):
        if not isinstance(run, RunSpec) or not isinstance(run.sampler, Sampler):
            raise invalid(f"runs[{index}]", "simulate", "a RunSpec of a sampler", run)
        check_param(f"runs[{index}].seed", "simulate", run.seed, Interval(int, 0, None, closed="left"))
    if not isinstance(config, TrainingConfig):
        raise invalid("config", "simulate", "a TrainingConfig", type(config).__name__)


def _start(model: BoundModel, params: Params | None, init_seed: int) -> tuple[Params, Params]:
    """The initial parameters and buffers: ``params`` (buffers it does not name keep the model's) or the model's own."""
    initial_params, initial_buffers = model.initial_state(init_seed)
    if params is None:
        return initial_params, initial_buffers
    if not isinstance(params, dict) or not all(isinstance(v, torch.Tensor) for v in params.values()):
        raise invalid("params", "simulate", "a dict of parameter names to tensors", type(params).__name__)
    expected = {n: tuple(v.shape) for n, v in initial_params.items()}
    given = {n: tuple(v.shape) for n, v in params.items() if n in expected}
    unknown = sorted(set(params) - set(expected) - set(initial_buffers))
    wrong_buffers = [n for n, v in initial_buffers.items() if n in params and params[n].shape != v.shape]
    if given != expected or unknown or wrong_buffers:
        raise invalid(
            "params", "simulate", f"the model's parameters {expected}", {n: tuple(v.shape) for n, v in params.items()}
        )
    buffers = {n: params.get(n, v) for n, v in initial_buffers.items()}
    for name, value in (*params.items(),):
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise invalid("params", "simulate", "finite initial parameters", f"NaN or infinity in {name!r}")
    return {n: params[n] for n in expected}, buffers


def _run(
    setup: Setup,
    state: SimulationState,
    progress: Callable[[Progress], None] | None,
    checkpoint: Callable[[SimulationCheckpoint], None] | None,
    checkpoint_every: int,
    on_round: Callable[[RoundReport], None] | None = None,
) -> list[RunResult]:
    """Every remaining round of ``state``, with its evaluations, progress reports and checkpoints."""
    config = setup.config
    rounds = config.rounds

    def evaluate(done: int) -> None:
        state.eval_rounds.append(done)
        state.evaluations.append(setup.evaluator(state.globals, state.buffers))

    if not state.eval_rounds:
        evaluate(0)
        if on_round is not None:
            on_round(round_report(setup, state, 0))
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
        if on_round is not None:
            on_round(round_report(setup, state, t + 1))
        check_rejections(setup, state, t)
        if checkpoint is not None and checkpoint_every and (t + 1) % checkpoint_every == 0 and t + 1 < rounds:
            checkpoint(snapshot(setup, state))
    return [_result(setup, state, r) for r in range(len(setup.runs))]


def round_report(setup: Setup, state: SimulationState, done: int) -> RoundReport:
    """Every run's metrics record after round ``done`` (the row :func:`_result`'s history gives that round in
    the metrics table)."""
    evaluated = bool(state.eval_rounds) and state.eval_rounds[-1] == done
    evaluation = state.evaluations[-1] if evaluated else None
    names = ("train_loss", "test_loss", "test_accuracy", *(f"test_{name}" for name in setup.model.metrics))
    rows = []
    for r, run in enumerate(setup.runs):
        scores = {name: float(evaluation[k][r]) if evaluation is not None else math.nan for k, name in enumerate(names)}
        rows.append(
            {
                "label": run.label or run.sampler.name,
                "sampler": run.sampler.name,
                "seed": run.seed,
                "round": done,
                **{name: scores[name] for name in names[:3]},
                **state.record.at(r, done, two_phase=run.sampler.two_phase, system=bool(setup.systems)),
                **{name: scores[name] for name in names[3:]},
            }
        )
    return RoundReport(round=done, total=setup.config.rounds, evaluated=evaluated, rows=tuple(rows))


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
        test_metrics={name: np.array([e[3 + k][r] for e in evals]) for k, name in enumerate(setup.model.metrics)},
        **state.record.of_run(r, two_phase=run.sampler.two_phase, system=bool(setup.systems)),
        info={
            "backend": setup.backend.name,
            "runs_batched": len(setup.runs),
            "device": str(setup.device),
            "model": setup.model.name,
        },
    )
    params = {n: v[r].detach().cpu().numpy() for n, v in state.globals.items()}
    buffers = {n: v[r].detach().cpu().numpy() for n, v in state.buffers.items()}
    return RunResult(
        history=history,
        params=params,
        sampler_state=state.sampler_states[r],
        buffers=buffers,
        state_names=setup.model.state_names,
    )
