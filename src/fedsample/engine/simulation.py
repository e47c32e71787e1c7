"""The explicit state of a simulation: what stays fixed (:class:`Setup`) and what each round changes
(:class:`SimulationState`), how they are built from the inputs of :func:`~fedsample.engine.simulate`,
and how the state goes to and comes back from a checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedsample._arrays import BoolArray, FloatArray, IntArray
from fedsample._validation import invalid
from fedsample.engine.aggregation import UpdateMemory, new_memory
from fedsample.engine.batching import plan_batches
from fedsample.engine.checkpoint import SimulationCheckpoint, tree_map_tensors
from fedsample.engine.evaluation import FLOAT_DTYPE, Evaluation, Evaluator, as_features, as_targets
from fedsample.engine.history import RoundRecord
from fedsample.engine.model_binding import BoundModel
from fedsample.engine.paper_models import Params
from fedsample.engine.specs import RunSpec, TrainingConfig, TrainingData
from fedsample.engine.trainers.base import LocalResult, Trainer
from fedsample.federation import Federation
from fedsample.participation.policies import Estimator
from fedsample.participation.setting import Participation
from fedsample.participation.system import ClientSystems
from fedsample.privacy.plan import PrivacyPlan
from fedsample.rng import Stream, stream_rng
from fedsample.samplers import ModelReader, Sampler, fit_to_parameters

__all__ = [
    "Evaluation",
    "ModelReader",
    "Setup",
    "SimulationState",
    "fit_to_model",
    "prepare",
    "restore",
    "slot_keys",
    "snapshot",
    "train_slots",
]


def fit_to_model(sampler: Sampler[Any], model: BoundModel) -> Sampler[Any]:
    """``sampler`` fitted to ``model`` when it reads the model's layout (:class:`ModelReader`): the shapes of
    the model's parameters in the order of the update vectors (``model.parameter_names``)."""
    if not isinstance(sampler, ModelReader):
        return sampler
    named = dict(model.train_module.named_parameters())
    return fit_to_parameters(sampler, [tuple(named[name].shape) for name in model.parameter_names])


@dataclass(frozen=True, eq=False)
class Setup:
    """What stays fixed while the runs train: the runs, the settings, the data on the device.

    ``model`` is the bound model (its loss, its private modules, its parameter and buffer names);
    ``offsets`` delimit each client's rows of ``features`` / ``targets``; ``label_presence[i, c]``
    says whether client ``i`` holds label ``c`` (``None`` for regression); ``steps`` is the local
    algorithm's number of local steps; ``importances`` the clients' ``p_i``.
    """

    runs: tuple[RunSpec, ...]
    config: TrainingConfig
    model: BoundModel
    backend: Trainer
    device: torch.device
    features: torch.Tensor
    targets: torch.Tensor
    offsets: IntArray
    label_presence: BoolArray | None
    participations: tuple[Participation, ...]
    steps: int
    evaluator: Evaluator
    importances: FloatArray
    # Each run's clients' speeds and links (docs/system.md); empty without a system model.
    systems: tuple[ClientSystems, ...] = ()
    # DP-FedAvg (docs/privacy.md): each run's noise, spent epsilon and clip norms; None without it.
    privacy: PrivacyPlan | None = None

    @property
    def run_keys(self) -> tuple[tuple[str, str, int], ...]:
        """(label, sampler, seed) of every run: what a checkpoint must match."""
        return tuple((run.label or run.sampler.name, run.sampler.name, int(run.seed)) for run in self.runs)


@dataclass(eq=False)
class SimulationState:
    """Everything a round reads and changes, after ``rounds_done`` rounds.

    ``globals`` holds the global models' parameters stacked over the runs ``(R, ...)``, ``buffers``
    their buffers (BatchNorm's running statistics; empty for a model without any); ``record`` the
    per-round metrics (written in place, round by round); ``estimators`` each run's return-rate
    estimator (FedAU's interval estimator under ``"fedau"``, the released MIFA's warm-up; ``None`` when
    the rates are known); ``evaluations`` the metrics at ``eval_rounds``; ``memory`` every client's
    remembered update under the memory policies ``"mifa"`` and ``"fedvarp"`` (``None`` otherwise).
    """

    rounds_done: int
    globals: Params
    buffers: Params
    server_state: object
    algorithm_state: object
    sampler_states: list[object]
    estimators: list[Estimator]
    record: RoundRecord
    eval_rounds: list[int]
    evaluations: list[Evaluation]
    memory: UpdateMemory | None = None


def train_slots(
    setup: Setup,
    state: SimulationState,
    t: int,
    lr: float,
    slots: tuple[IntArray, IntArray],
    batches: tuple[IntArray, BoolArray] | None = None,
    measure_losses: bool = False,
) -> LocalResult:
    """Round ``t``'s local training of the slots ``(run_of_slot[j], clients[j]) = slots``, in one backend call.

    Each slot starts from its run's global model and reads the batches keyed by its run's seed,
    the round and the client (:func:`~fedsample.engine.batching.plan_batches`; ``batches``: each
    slot's batch size and kept-subset flag, from
    :func:`~fedsample.engine.batching.selection_batches`); the local algorithm supplies the step.
    """
    run_of_slot, clients = slots
    slot_batch_sizes, kept_subsets = batches if batches is not None else (None, None)
    plan = plan_batches(
        seeds=np.array([setup.runs[r].seed for r in run_of_slot], dtype=np.int64),
        round_index=t,
        clients=clients,
        offsets=setup.offsets,
        steps=setup.steps,
        batch_size=setup.config.batch_size,
        slot_batch_sizes=slot_batch_sizes,
        kept_subsets=kept_subsets,
    )
    slot_index = torch.as_tensor(run_of_slot, device=setup.device)
    return setup.backend.train(
        {name: v.index_select(0, slot_index) for name, v in state.globals.items()},
        features=setup.features,
        targets=setup.targets,
        plan=plan,
        steps=setup.steps,
        local_lr=lr,
        step=setup.config.algorithm.client_init(state.algorithm_state, run_of_slot, clients),
        measure_losses=measure_losses,
        buffers={name: v.index_select(0, slot_index) for name, v in state.buffers.items()},
        keys=slot_keys(setup, t, run_of_slot, clients),
    )


def slot_keys(setup: Setup, t: int, run_of_slot: IntArray, clients: IntArray) -> torch.Tensor:
    """Each slot's 31-bit random key for round ``t``, from its run's stream ``(seed, DROPOUT, t, client)``.

    Only a model with keyed dropout, or the sequential backend (which seeds any other random
    operation of a slot with it), reads the keys; otherwise they are 0 and no stream is built.
    """
    keys = np.zeros(clients.size, dtype=np.int64)
    if setup.model.keyed_dropout or setup.backend.name == "sequential":
        for j, (r, client) in enumerate(zip(run_of_slot, clients, strict=True)):
            rng = stream_rng(int(setup.runs[int(r)].seed), Stream.DROPOUT, t, int(client))
            keys[j] = int(rng.integers(0, 2**31))
    return torch.as_tensor(keys, device=setup.device)


def prepare(
    data: TrainingData,
    model: BoundModel,
    runs: list[RunSpec],
    config: TrainingConfig,
    backend: Trainer,
    device: torch.device,
    start: tuple[Params, Params],
    evaluation_data: TrainingData | None,
    participation: Participation,
) -> tuple[Setup, SimulationState]:
    """The setup and the initial state of ``runs`` trained together from the global model ``start``
    (its parameters and buffers)."""
    federation = data.federation(importance=config.importance)
    offsets = np.asarray(data.train_indptr, dtype=np.int64)
    features = as_features(data.train_features, device)
    targets = as_targets(data.train_targets, device, data.task)
    sizes = np.diff(offsets)
    label_presence: BoolArray | None = None
    if data.task == "classification" and data.num_classes:
        label_presence = np.zeros((sizes.size, int(data.num_classes)), dtype=bool)
        client_of_row = np.repeat(np.arange(sizes.size), sizes)
        label_presence[client_of_row, np.asarray(data.train_targets, dtype=np.int64)] = True
    setup = Setup(
        runs=tuple(runs),
        config=config,
        model=model,
        backend=backend,
        device=device,
        features=features,
        targets=targets,
        offsets=offsets,
        label_presence=label_presence,
        participations=tuple(participation.for_run(run.seed) for run in runs),
        steps=config.algorithm.num_local_steps(config.local_steps),
        evaluator=_evaluator(model, data, evaluation_data, features, targets, config, device),
        importances=np.asarray(federation.importances, dtype=np.float64),
        systems=tuple(participation.system.clients(sizes.size, run.seed) for run in runs)
        if participation.system is not None
        else (),
    )
    num_runs = len(runs)
    start_params, start_buffers = start
    stacked: Params = {
        n: v.to(device=device, dtype=FLOAT_DTYPE).unsqueeze(0).repeat(num_runs, *[1] * v.dim())
        for n, v in start_params.items()
    }
    # Buffers keep their dtype (BatchNorm's num_batches_tracked is an int64 counter).
    stacked_buffers: Params = {
        n: v.to(device=device, dtype=FLOAT_DTYPE if v.is_floating_point() else v.dtype)
        .unsqueeze(0)
        .repeat(num_runs, *[1] * v.dim())
        for n, v in start_buffers.items()
    }
    asked = participation.num_asked(config.num_sampled)
    state = SimulationState(
        rounds_done=0,
        globals=stacked,
        buffers=stacked_buffers,
        server_state=config.server.init(stacked),
        algorithm_state=config.algorithm.init_state(
            num_runs, sizes.size, stacked, importances=np.asarray(federation.importances)
        ),
        sampler_states=[_init_sampler(setup, r, federation, asked, start_params) for r in range(num_runs)],
        estimators=[participation.new_estimator(sizes.size) for _ in runs],
        record=RoundRecord(num_runs, config.rounds),
        eval_rounds=[],
        evaluations=[],
        memory=new_memory(stacked, sizes.size) if participation.aggregation.remembers_updates else None,
    )
    return setup, state


def _init_sampler(setup: Setup, r: int, federation: Federation, asked: int, start_params: Params) -> object:
    """Run ``r``'s sampler state before round 1, with what its ``init`` reads (``init_reads``, each from
    its gatherer in :data:`INIT_GATHERERS`; one that has nothing to give, ``None``, is left out)."""
    if setup.runs[r].state is not None:  # made by the caller, who checked the sampler on this federation
        return setup.runs[r].state
    sampler = setup.runs[r].sampler
    options = {}
    for name in sorted(sampler.init_reads):
        gather = INIT_GATHERERS.get(name)
        if gather is None:
            constraint = f"a sampler whose init reads what the engine gathers ({', '.join(sorted(INIT_GATHERERS))})"
            raise invalid("init_reads", f"{type(sampler).__name__} in the engine", constraint, name)
        value = gather(setup, r, federation, start_params)
        if value is not None:
            options[name] = value
    init: Callable[..., object] = sampler.init  # each of init_reads is a keyword argument of it
    return init(federation, asked, **options)


def _durations(setup: Setup, r: int, federation: Federation, start_params: Params) -> FloatArray | None:
    """Every client's one-phase round time from the system model (Oort, as FedScale's selector has them
    from registration); ``None`` when the run has no system model."""
    system = setup.participations[r].system
    if not (setup.systems and system is not None):
        return None
    num_parameters = sum(v.numel() for v in start_params.values())
    samples = setup.steps * setup.config.batch_size
    clients = np.arange(federation.num_clients)
    durations: FloatArray = setup.systems[r].round_times(clients, samples, num_parameters, system.reference_parameters)
    return durations


# What a sampler's init may read (Sampler.init_reads), each gathered by one function.
INIT_GATHERERS: dict[str, Callable[[Setup, int, Federation, Params], Any]] = {"durations": _durations}


def _evaluator(
    model: BoundModel,
    data: TrainingData,
    evaluation_data: TrainingData | None,
    features: torch.Tensor,
    targets: torch.Tensor,
    config: TrainingConfig,
    device: torch.device,
) -> Evaluator:
    """The evaluator on ``evaluation_data`` (default ``data``), reusing the training tensors when it is ``data``."""
    evaluated = evaluation_data if evaluation_data is not None else data
    eval_sizes: IntArray = np.diff(np.asarray(evaluated.train_indptr, dtype=np.int64)).astype(np.int64)
    if evaluated.train_features is not data.train_features:  # the same arrays: reuse the tensors
        features = as_features(evaluated.train_features, device)
        targets = as_targets(evaluated.train_targets, device, data.task)
    importances = evaluated.federation(importance=config.importance).importances
    return Evaluator(
        model=model,
        features=features,
        targets=targets,
        client_of_row=torch.as_tensor(np.repeat(np.arange(eval_sizes.size), eval_sizes), device=device),
        sizes=torch.as_tensor(eval_sizes, device=device, dtype=FLOAT_DTYPE),
        importances=torch.as_tensor(np.array(importances), device=device, dtype=FLOAT_DTYPE),
        test_features=as_features(data.test_features, device),
        test_targets=as_targets(data.test_targets, device, data.task),
    )


def snapshot(setup: Setup, state: SimulationState) -> SimulationCheckpoint:
    """The state now, as a checkpoint (tensors copied to the CPU)."""

    def to_cpu(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.detach().to("cpu", copy=True)

    return SimulationCheckpoint(
        rounds_done=state.rounds_done,
        rounds=setup.config.rounds,
        run_keys=setup.run_keys,
        globals={n: to_cpu(v) for n, v in state.globals.items()},
        buffers={n: to_cpu(v) for n, v in state.buffers.items()},
        server_state=tree_map_tensors(to_cpu, state.server_state),
        algorithm_state=tree_map_tensors(to_cpu, state.algorithm_state),
        sampler_states=tuple(state.sampler_states),
        metrics={**state.record.snapshot(), **_estimator_counts(state)},
        eval_rounds=tuple(state.eval_rounds),
        evaluations=tuple(state.evaluations),
        memory=tree_map_tensors(to_cpu, state.memory),
    )


def _estimator_counts(state: SimulationState) -> dict[str, np.ndarray]:
    """The estimators' counts (return rates, or FedAU's intervals), ``(runs, clients)`` each (empty when
    rates are known)."""
    counts = [e.counts() for e in state.estimators if e is not None]
    if not counts:
        return {}
    return {name: np.stack([c[name].copy() for c in counts]) for name in counts[0]}


def restore(setup: Setup, state: SimulationState, checkpoint: SimulationCheckpoint) -> SimulationState:
    """``state`` continued from ``checkpoint``, which must come from the same runs and configuration."""
    config = setup.config
    if checkpoint.run_keys != setup.run_keys:
        raise invalid("resume", "simulate", f"a checkpoint of the runs {setup.run_keys}", checkpoint.run_keys)
    if checkpoint.rounds != config.rounds or not 0 <= checkpoint.rounds_done <= config.rounds:
        raise invalid("resume", "simulate", f"a checkpoint of a {config.rounds}-round simulation", checkpoint.rounds)
    shapes = {n: tuple(v.shape) for n, v in state.globals.items()}
    if {n: tuple(v.shape) for n, v in checkpoint.globals.items()} != shapes:
        raise invalid("resume", "simulate", f"a checkpoint of a model with parameters {shapes}", "another model")
    buffer_shapes = {n: tuple(v.shape) for n, v in state.buffers.items()}
    if {n: tuple(v.shape) for n, v in checkpoint.buffers.items()} != buffer_shapes:
        raise invalid("resume", "simulate", f"a checkpoint of a model with buffers {buffer_shapes}", "other buffers")
    width = 3 + len(setup.model.metrics)  # objective, test loss, test accuracy, the extra metrics
    if any(len(evaluation) != width for evaluation in checkpoint.evaluations):
        names = sorted(setup.model.metrics)
        raise invalid("resume", "simulate", f"a checkpoint of a model with the extra metrics {names}", "others")

    def to_device(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(setup.device)

    metrics = checkpoint.metrics
    state.record.restore(metrics)
    for r, estimator in enumerate(state.estimators):
        if estimator is not None:
            names = list(estimator.counts())
            if not all(name in metrics for name in names):
                raise invalid("resume", "simulate", f"a checkpoint with the counts {names}", "none")
            try:
                stored = {name: np.asarray(metrics[name])[r] for name in names}
            except (IndexError, TypeError, ValueError):
                raise invalid(
                    "resume", "simulate", f"a checkpoint with the counts {names} of every run", "others"
                ) from None
            estimator.load_counts(stored)
    memory = None
    if state.memory is not None:
        shapes = {n: tuple(v.shape) for n, v in state.memory.updates.items()}
        stored = checkpoint.memory
        if not isinstance(stored, UpdateMemory) or {n: tuple(v.shape) for n, v in stored.updates.items()} != shapes:
            raise invalid("resume", "simulate", f"a checkpoint with remembered updates of shapes {shapes}", "none")
        # A copy: the rounds write the remembered updates in place, and the checkpoint may be resumed again.
        memory = tree_map_tensors(lambda tensor: tensor.to(setup.device, copy=True), stored)
    return SimulationState(
        rounds_done=checkpoint.rounds_done,
        globals={n: to_device(v) for n, v in checkpoint.globals.items()},
        buffers={n: to_device(v) for n, v in checkpoint.buffers.items()},
        server_state=tree_map_tensors(to_device, checkpoint.server_state),
        algorithm_state=tree_map_tensors(to_device, checkpoint.algorithm_state),
        sampler_states=list(checkpoint.sampler_states),
        estimators=state.estimators,
        record=state.record,
        eval_rounds=list(checkpoint.eval_rounds),
        evaluations=list(checkpoint.evaluations),
        memory=memory,
    )
