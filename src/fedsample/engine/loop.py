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

import contextlib
import dataclasses
import os
import resource
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt
import torch

from fedsample._arrays import BoolArray, IntArray
from fedsample._validation import Interval, check_param, invalid
from fedsample.engine.algorithms import FedAvg, LocalAlgorithm, segment_sum
from fedsample.engine.backends import Backend, BatchedBackend, LocalResult, SequentialBackend, flat_norms
from fedsample.engine.batching import plan_batches
from fedsample.engine.checkpoint import SimulationCheckpoint, tree_map_tensors
from fedsample.engine.history import ROUND_METRICS, History, RoundRecord
from fedsample.engine.kernels import per_sample_loss
from fedsample.engine.models import ModelSpec, Params
from fedsample.engine.registry import TRAINING
from fedsample.engine.server import ServerOptimizer, ServerSGD
from fedsample.errors import FedsampleError
from fedsample.federation import Federation, ImportanceMode
from fedsample.participation.policies import ReturnRateEstimator
from fedsample.participation.rounds import (
    Participation,
    Selected,
    select_participants,
    settle_participants,
)
from fedsample.rng import Stream, stream_rng
from fedsample.samplers import Feedback, Sampler

__all__ = [
    "FallbackWarning",
    "Progress",
    "RunResult",
    "RunSpec",
    "TrainingConfig",
    "TrainingData",
    "check_history_memory",
    "initial_params",
    "simulate",
]


class FallbackWarning(UserWarning):
    """The batched backend cannot serve a model, and the sequential one is used instead."""


class TrainingData(Protocol):
    """What the loop reads from a federated dataset (see :class:`fedsample.data.FederatedDataset`)."""

    # Read-only properties, so that frozen dataclasses such as FederatedDataset conform.
    @property
    def train_features(self) -> npt.NDArray[Any]: ...
    @property
    def train_targets(self) -> npt.NDArray[Any]: ...
    @property
    def train_indptr(self) -> IntArray: ...
    @property
    def test_features(self) -> npt.NDArray[Any]: ...
    @property
    def test_targets(self) -> npt.NDArray[Any]: ...
    @property
    def test_indptr(self) -> IntArray: ...
    @property
    def num_classes(self) -> int | None: ...
    @property
    def task(self) -> str: ...

    def federation(self, *, importance: ImportanceMode = "size") -> Federation: ...


@dataclass(frozen=True, kw_only=True)
class TrainingConfig:
    """Settings shared by the runs of a simulation.

    ``local_lr`` is ``eta_l``, decayed per round as ``eta_l * lr_decay**t``; the server step is the
    ``server`` optimizer (``ServerSGD(lr=eta_g)`` by default, ``eta_g = 1``). ``backend`` is
    ``"batched"`` (all clients of a round together) or ``"sequential"`` (the reference loop).
    A run in which every returned update is rejected (NaN or infinity) for ``max_rejected_rounds``
    rounds in a row cannot train: the simulation stops with an error (0: never stop).
    """

    rounds: int = TRAINING.defaults["rounds"]
    num_sampled: int = TRAINING.defaults["num_sampled"]
    local_steps: int = TRAINING.defaults["local_steps"]
    batch_size: int = TRAINING.defaults["batch_size"]
    local_lr: float = TRAINING.defaults["local_lr"]
    lr_decay: float = TRAINING.defaults["lr_decay"]
    eval_every: int = TRAINING.defaults["eval_every"]
    importance: ImportanceMode = TRAINING.defaults["importance"]
    algorithm: LocalAlgorithm = field(default_factory=FedAvg)
    server: ServerOptimizer = field(default_factory=ServerSGD)
    backend: Literal["batched", "sequential"] = TRAINING.defaults["backend"]
    device: str = TRAINING.defaults["device"]
    max_rejected_rounds: int = TRAINING.defaults["max_rejected_rounds"]

    def __post_init__(self) -> None:
        # Every scalar setting, checked against its entry of the engine registry's table.
        TRAINING.validate({key: getattr(self, key) for key in TRAINING.parameters})


@dataclass(frozen=True)
class RunSpec:
    """One run of a comparison: a sampler and the seed of its randomness (sampling, batches)."""

    sampler: Sampler[Any]
    seed: int = 0
    label: str | None = None


@dataclass(frozen=True, eq=False)
class Progress:
    """Reported after every round: ``done`` of ``total`` rounds, and the latest evaluated
    training objective of each run (``train_loss``, one value per run, at round ``evaluated``)."""

    done: int
    total: int
    train_loss: np.ndarray
    evaluated: int


@dataclass(frozen=True, eq=False)
class RunResult:
    """A run's history, its final global parameters and its final sampler state."""

    history: History
    params: dict[str, np.ndarray]
    sampler_state: Any


def initial_params(model: ModelSpec, seed: int) -> Params:
    """The initial global model of a comparison, drawn from the stream ``(seed, MODEL_INIT)``."""
    torch_seed = int(stream_rng(seed, Stream.MODEL_INIT).integers(0, 2**62))
    return model.init_params(torch.Generator().manual_seed(torch_seed))


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


@dataclass
class _Evaluator:
    """Global objective and test metrics of stacked models, batched over data and runs."""

    model: ModelSpec
    features: torch.Tensor
    targets: torch.Tensor
    client_of_row: torch.Tensor
    sizes: torch.Tensor
    importances: torch.Tensor
    test_features: torch.Tensor
    test_targets: torch.Tensor
    chunk: int = 8192

    def __post_init__(self) -> None:
        self._module = self.model.build().to(self.features.device)

    def _outputs(self, params: Params, x: torch.Tensor) -> torch.Tensor:
        """``(R, rows, ...)`` outputs of the ``R`` stacked models."""
        if self.model.is_dense:
            h = x.reshape(x.shape[0], -1)
            num_layers = len(self.model.dense_widths) - 1
            out: torch.Tensor = h.unsqueeze(0)
            for i in range(num_layers):
                w = params[f"layers.{i}.weight"]
                out = out @ w.transpose(1, 2)
                if f"layers.{i}.bias" in params:
                    out = out + params[f"layers.{i}.bias"].unsqueeze(1)
                if i + 1 < num_layers:
                    out = torch.relu(out)
            return out.squeeze(-1) if self.model.kind == "linear" else out
        runs = next(iter(params.values())).shape[0]
        return torch.stack(
            [torch.func.functional_call(self._module, {n: v[r] for n, v in params.items()}, (x,)) for r in range(runs)]
        )

    def _losses(self, params: Params, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-sample losses ``(R, rows)`` and correct predictions ``(R, rows)``."""
        losses, correct = [], []
        for start in range(0, x.shape[0], self.chunk):
            out = self._outputs(params, x[start : start + self.chunk])
            yy = y[start : start + self.chunk]
            runs = out.shape[0]
            flat_out = out.reshape(runs * out.shape[1], *out.shape[2:])
            flat_y = yy.repeat(runs)
            losses.append(per_sample_loss(flat_out, flat_y, self.model.task).reshape(runs, -1))
            if self.model.task == "classification":
                correct.append((out.argmax(-1) == yy.unsqueeze(0)).to(out.dtype))
        loss = torch.cat(losses, dim=1)
        acc = torch.cat(correct, dim=1) if correct else torch.full_like(loss, float("nan"))
        return loss, acc

    @torch.no_grad()
    def __call__(self, params: Params) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # One run at a time: a run's metrics then come from the same kernels, bit for bit, whichever
        # runs it is simulated with (a stacked matmul over runs rounds differently for 1 and R runs),
        # so a comparison split over Ray tasks reports exactly what one batch reports.
        runs = next(iter(params.values())).shape[0]
        train, test_loss, test_accuracy = [], [], []
        for r in range(runs):
            one = {n: v[r : r + 1] for n, v in params.items()}
            loss, _ = self._losses(one, self.features, self.targets)
            per_client = torch.zeros(self.sizes.shape[0], dtype=loss.dtype, device=loss.device)
            per_client.index_add_(0, self.client_of_row, loss[0])
            train.append((per_client / self.sizes).dot(self.importances))
            if self.test_features.shape[0]:
                run_loss, run_acc = self._losses(one, self.test_features, self.test_targets)
                test_loss.append(run_loss[0].mean())
                test_accuracy.append(run_acc[0].mean())
        objective = torch.stack(train)
        tl = torch.stack(test_loss) if test_loss else torch.full_like(objective, float("nan"))
        ta = torch.stack(test_accuracy) if test_accuracy else torch.full_like(objective, float("nan"))
        return objective.double().cpu().numpy(), tl.double().cpu().numpy(), ta.double().cpu().numpy()


def _batch_sizes(selection: Any, clients: IntArray, default: int) -> IntArray:
    """Each distinct client's batch size: the selection's ``batch_size`` instruction, else ``B``."""
    sizes = selection.instructions.get("batch_size")
    if sizes is None:
        return np.full(clients.size, default, dtype=np.int64)
    # The instruction of a client's first entry (data-level samplers list each client once).
    first = np.unique(selection.clients, return_index=True)[1]
    out: IntArray = np.maximum(np.asarray(sizes)[first], 1).astype(np.int64)
    return out


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
    simulation = _Simulation(
        data, model, list(runs), config, backend, device, start_params, progress, evaluation_data, participation
    )
    if resume is not None:
        simulation.restore(resume)
    return simulation.run(checkpoint, checkpoint_every)


def check_history_memory(config: TrainingConfig, num_runs: int, owner: str) -> None:
    """Refuse ``config.rounds`` when the per-round history of ``num_runs`` runs cannot fit in memory.

    The loop keeps, per run and round, the distinct clients and labels, the weight sum and the
    failure counts, then copies them into each run's history; per evaluation, three values per
    run. This estimate of those bytes is compared with the machine's physical memory (or the
    process's address-space limit when lower), before anything is allocated or written.
    """
    per_run = sum(m.per_run for m in ROUND_METRICS)
    per_round = num_runs * per_run * 8 * 2 + (len(ROUND_METRICS) - per_run) * 8 * (1 + num_runs)
    per_evaluation = 3 * (112 + 8 * num_runs) + 64 + 4 * 8 * num_runs
    needed = config.rounds * per_round + (config.rounds // config.eval_every + 1) * per_evaluation
    available = _memory_limit()
    if available is not None and needed > available:
        raise invalid(
            "rounds",
            owner,
            f"small enough that the history of {num_runs} run(s) fits in memory: {config.rounds} rounds need "
            f"{_gib(needed)} of history, more than this machine's {_gib(available)}",
            config.rounds,
        )


def _memory_limit() -> int | None:
    """Physical memory in bytes, or the address-space limit of this process when lower (None: unknown)."""
    limits = []
    with contextlib.suppress(ValueError, OSError, AttributeError):  # sysconf names vary across systems
        limits.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        limits.append(soft)
    return min(limits) if limits else None


def _gib(count: float) -> str:
    return f"{count / 2**30:.3g} GiB"


class _Simulation:
    """State of the runs simulated together (one instance per call of :func:`simulate`)."""

    def __init__(
        self,
        data: TrainingData,
        model: ModelSpec,
        runs: list[RunSpec],
        config: TrainingConfig,
        backend: Backend,
        device: torch.device,
        start: Params,
        progress: Callable[[Progress], None] | None,
        evaluation_data: TrainingData | None = None,
        participation: Participation | None = None,
    ) -> None:
        self.data, self.model, self.runs, self.config = data, model, runs, config
        setting = participation if participation is not None else Participation()
        self.participations = [setting.for_run(run.seed) for run in runs]
        self.backend, self.device, self.progress = backend, device, progress
        self.federation = data.federation(importance=config.importance)
        self.offsets = np.asarray(data.train_indptr, dtype=np.int64)
        float_dtype = torch.float32
        # np.array copies: the dataset's arrays are read-only, torch tensors are writable.
        self.features = torch.as_tensor(np.array(data.train_features), device=device)
        if self.features.is_floating_point():
            self.features = self.features.to(float_dtype)
        target_dtype = float_dtype if data.task == "regression" else torch.long
        self.targets = torch.as_tensor(np.array(data.train_targets), device=device).to(target_dtype)
        test_features = torch.as_tensor(np.array(data.test_features), device=device)
        if test_features.is_floating_point():
            test_features = test_features.to(float_dtype)
        test_targets = torch.as_tensor(np.array(data.test_targets), device=device).to(target_dtype)
        sizes = np.diff(self.offsets)
        self.label_presence: BoolArray | None = None
        if data.task == "classification" and data.num_classes:
            presence = np.zeros((sizes.size, int(data.num_classes)), dtype=bool)
            client_of_row = np.repeat(np.arange(sizes.size), sizes)
            presence[client_of_row, np.asarray(data.train_targets, dtype=np.int64)] = True
            self.label_presence = presence
        evaluated = evaluation_data if evaluation_data is not None else data
        eval_sizes: IntArray = np.diff(np.asarray(evaluated.train_indptr, dtype=np.int64)).astype(np.int64)
        eval_features, eval_targets = self.features, self.targets
        if evaluated.train_features is not data.train_features:  # the same arrays: reuse the tensors
            eval_features = torch.as_tensor(np.array(evaluated.train_features), device=device)
            if eval_features.is_floating_point():
                eval_features = eval_features.to(float_dtype)
            eval_targets = torch.as_tensor(np.array(evaluated.train_targets), device=device).to(target_dtype)
        eval_importances = evaluated.federation(importance=config.importance).importances
        self.evaluator = _Evaluator(
            model=model,
            features=eval_features,
            targets=eval_targets,
            client_of_row=torch.as_tensor(np.repeat(np.arange(eval_sizes.size), eval_sizes), device=device),
            sizes=torch.as_tensor(eval_sizes, device=device, dtype=float_dtype),
            importances=torch.as_tensor(np.array(eval_importances), device=device, dtype=float_dtype),
            test_features=test_features,
            test_targets=test_targets,
        )
        num_runs = len(runs)
        self.globals: Params = {
            n: v.to(device=device, dtype=float_dtype).unsqueeze(0).repeat(num_runs, *[1] * v.dim())
            for n, v in start.items()
        }
        self.server_state = config.server.init(self.globals)
        self.algorithm_state = config.algorithm.init_state(
            num_runs, sizes.size, self.globals, importances=np.asarray(self.federation.importances)
        )
        asked = setting.num_asked(config.num_sampled)
        self.sampler_states = [run.sampler.init(self.federation, asked) for run in runs]
        self.estimators: list[ReturnRateEstimator | None] = [setting.new_estimator(sizes.size) for _ in runs]
        self.steps = config.algorithm.num_local_steps(config.local_steps)
        self.rounds_done = 0
        self.record = RoundRecord(num_runs, config.rounds)
        self.eval_rounds: list[int] = []
        self.evals: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def _run_keys(self) -> tuple[tuple[str, str, int], ...]:
        return tuple((run.label or run.sampler.name, run.sampler.name, int(run.seed)) for run in self.runs)

    def snapshot(self) -> SimulationCheckpoint:
        """The loop's state now (tensors copied to the CPU)."""

        def to_cpu(tensor: torch.Tensor) -> torch.Tensor:
            return tensor.detach().to("cpu", copy=True)

        return SimulationCheckpoint(
            rounds_done=self.rounds_done,
            rounds=self.config.rounds,
            run_keys=self._run_keys(),
            globals={n: to_cpu(v) for n, v in self.globals.items()},
            server_state=tree_map_tensors(to_cpu, self.server_state),
            algorithm_state=tree_map_tensors(to_cpu, self.algorithm_state),
            sampler_states=tuple(self.sampler_states),
            metrics={**self.record.snapshot(), **self._estimator_counts()},
            eval_rounds=tuple(self.eval_rounds),
            evaluations=tuple(self.evals),
        )

    def _estimator_counts(self) -> dict[str, np.ndarray]:
        """The return-rate estimators' counts, ``(runs, clients)`` each (empty when rates are known)."""
        estimators = [e for e in self.estimators if e is not None]
        if not estimators:
            return {}
        return {
            "return_selected": np.stack([e.selected.copy() for e in estimators]),
            "return_returned": np.stack([e.returned.copy() for e in estimators]),
        }

    def restore(self, checkpoint: SimulationCheckpoint) -> None:
        """Continue from ``checkpoint``, which must come from the same runs and configuration."""
        if checkpoint.run_keys != self._run_keys():
            raise invalid("resume", "simulate", f"a checkpoint of the runs {self._run_keys()}", checkpoint.run_keys)
        if checkpoint.rounds != self.config.rounds or not 0 <= checkpoint.rounds_done <= self.config.rounds:
            raise invalid(
                "resume", "simulate", f"a checkpoint of a {self.config.rounds}-round simulation", checkpoint.rounds
            )
        shapes = {n: tuple(v.shape) for n, v in self.globals.items()}
        if {n: tuple(v.shape) for n, v in checkpoint.globals.items()} != shapes:
            raise invalid("resume", "simulate", f"a checkpoint of a model with parameters {shapes}", "another model")

        def to_device(tensor: torch.Tensor) -> torch.Tensor:
            return tensor.to(self.device)

        self.rounds_done = checkpoint.rounds_done
        self.globals = {n: to_device(v) for n, v in checkpoint.globals.items()}
        self.server_state = tree_map_tensors(to_device, checkpoint.server_state)
        self.algorithm_state = tree_map_tensors(to_device, checkpoint.algorithm_state)
        self.sampler_states = list(checkpoint.sampler_states)
        metrics = checkpoint.metrics
        self.record.restore(metrics)
        for r, estimator in enumerate(self.estimators):
            if estimator is not None:
                if "return_selected" not in metrics:
                    raise invalid("resume", "simulate", "a checkpoint with return-rate counts", "none")
                estimator.selected[...] = metrics["return_selected"][r]
                estimator.returned[...] = metrics["return_returned"][r]
        self.eval_rounds = list(checkpoint.eval_rounds)
        self.evals = list(checkpoint.evaluations)

    def run(
        self, checkpoint: Callable[[SimulationCheckpoint], None] | None = None, checkpoint_every: int = 0
    ) -> list[RunResult]:
        cfg, num_runs = self.config, len(self.runs)
        rounds = cfg.rounds

        def evaluate(done: int) -> None:
            self.eval_rounds.append(done)
            self.evals.append(self.evaluator(self.globals))

        if not self.eval_rounds:
            evaluate(0)
        for t in range(self.rounds_done, rounds):
            begin = time.perf_counter()
            lr = cfg.local_lr * cfg.lr_decay**t
            self.record["local_lr"][t] = lr
            self._round(t, lr)
            self.record["round_seconds"][t] = time.perf_counter() - begin
            if (t + 1) % cfg.eval_every == 0 or t + 1 == rounds:
                evaluate(t + 1)
            self.rounds_done = t + 1
            if self.progress is not None:
                self.progress(Progress(t + 1, rounds, self.evals[-1][0].copy(), self.eval_rounds[-1]))
            self._check_rejections(t)
            if checkpoint is not None and checkpoint_every and (t + 1) % checkpoint_every == 0 and t + 1 < rounds:
                checkpoint(self.snapshot())
        eval_rounds, evals = self.eval_rounds, self.evals
        results = []
        for r, run in enumerate(self.runs):
            label = run.label or run.sampler.name
            history = History(
                label=label,
                sampler=run.sampler.name,
                seed=run.seed,
                eval_rounds=np.asarray(eval_rounds, dtype=np.int64),
                train_loss=np.array([e[0][r] for e in evals]),
                test_loss=np.array([e[1][r] for e in evals]),
                test_accuracy=np.array([e[2][r] for e in evals]),
                **self.record.of_run(r),
                info={"backend": self.backend.name, "runs_batched": num_runs, "device": str(self.device)},
            )
            params = {n: v[r].detach().cpu().numpy() for n, v in self.globals.items()}
            results.append(RunResult(history=history, params=params, sampler_state=self.sampler_states[r]))
        return results

    def _round(self, t: int, lr: float) -> None:
        num_runs = len(self.runs)
        num_clients = self.offsets.size - 1
        selected_per_run: list[Selected] = []
        trained_per_run, sizes_per_run, kept_per_run = [], [], []
        for r, run in enumerate(self.runs):
            selected = select_participants(
                run.sampler,
                self.sampler_states[r],
                self.participations[r],
                seed=run.seed,
                round=t,
                num_clients=num_clients,
            )
            clients, trains = selected.clients, selected.trains
            selected_per_run.append(selected)
            trained_per_run.append(clients[trains])
            sizes_per_run.append(_batch_sizes(selected.selection, clients, self.config.batch_size)[trains])
            # A data-level selection's batch is the round's kept subset, read at every local step.
            kept_per_run.append(np.full(int(trains.sum()), "batch_size" in selected.selection.instructions))
            self.record["distinct_clients"][r, t] = clients.size
            if self.label_presence is not None:
                self.record["distinct_labels"][r, t] = int(self.label_presence[clients].any(axis=0).sum())
        counts = np.array([c.size for c in trained_per_run])
        run_of_slot = np.repeat(np.arange(num_runs), counts)
        clients = np.concatenate(trained_per_run) if counts.sum() else np.zeros(0, dtype=np.int64)
        slot_sizes = np.concatenate(sizes_per_run) if counts.sum() else np.zeros(0, dtype=np.int64)
        slot_kept = np.concatenate(kept_per_run) if counts.sum() else np.zeros(0, dtype=bool)
        result = None
        if clients.size:
            seeds = np.array([self.runs[r].seed for r in run_of_slot], dtype=np.int64)
            plan = plan_batches(
                seeds=seeds,
                round_index=t,
                clients=clients,
                offsets=self.offsets,
                steps=self.steps,
                batch_size=self.config.batch_size,
                slot_batch_sizes=slot_sizes,
                kept_subsets=slot_kept,
            )
            slot_index = torch.as_tensor(run_of_slot, device=self.device)
            start = {n: v.index_select(0, slot_index) for n, v in self.globals.items()}
            result = self.backend.train(
                start,
                features=self.features,
                targets=self.targets,
                plan=plan,
                steps=self.steps,
                local_lr=lr,
                proximal_mu=self.config.algorithm.proximal_mu,
                corrections=self.config.algorithm.corrections(self.algorithm_state, run_of_slot, clients),
            )
        slot_weights, slot_kept = self._settle(t, selected_per_run, counts, result)
        kept = np.flatnonzero(slot_kept)
        if result is not None and kept.size < clients.size:  # drop the rejected and late slots
            index = torch.as_tensor(kept, device=self.device)
            result = LocalResult(
                updates={n: u.index_select(0, index) for n, u in result.updates.items()},
                first_loss=result.first_loss.index_select(0, index),
                gradient_norms=result.gradient_norms.index_select(0, index),
            )
            run_of_slot, clients, slot_weights = run_of_slot[kept], clients[kept], slot_weights[kept]
        if result is not None and clients.size:
            w = torch.as_tensor(slot_weights, device=self.device, dtype=torch.float32)
            delta = {
                n: segment_sum(u * w.view(-1, *[1] * (u.dim() - 1)), run_of_slot, num_runs)
                for n, u in result.updates.items()
            }
            self.algorithm_state = self.config.algorithm.after_round(
                self.algorithm_state,
                run_of_slot=run_of_slot,
                clients=clients,
                updates=result.updates,
                local_lr=lr,
                steps=self.steps,
                weights=w,
            )
        else:  # no client kept in any run (possible with Poisson sampling, or when all failed)
            result = None
            delta = {n: torch.zeros_like(v) for n, v in self.globals.items()}
        self.globals, self.server_state = self.config.server.step(self.globals, delta, self.server_state)
        kept_per_run = [clients[run_of_slot == r] for r in range(num_runs)]
        self._feedback(t, lr, [s.selection for s in selected_per_run], kept_per_run, run_of_slot, result)

    def _check_rejections(self, t: int) -> None:
        """Stop a run whose every returned update was rejected in the last ``max_rejected_rounds`` rounds.

        Read from the recorded counts (a round with rejections and a zero weight sum), so a resumed
        simulation stops where the uninterrupted one does.
        """
        limit = self.config.max_rejected_rounds
        if not limit or t + 1 < limit:
            return
        window = slice(t + 1 - limit, t + 1)
        stuck = (self.record["rejected"][:, window] > 0) & (self.record["weight_sum"][:, window] == 0)
        for r in np.flatnonzero(stuck.all(axis=1)):
            run = self.runs[int(r)]
            raise FedsampleError(
                f"The 'local_lr' parameter of TrainingConfig must let the clients' updates stay finite. Got "
                f"{self.config.local_lr!r} instead: every update of run {run.label or run.sampler.name!r} (seed "
                f"{run.seed}) was rejected as NaN or infinity in rounds {t + 2 - limit} to {t + 1} "
                f"(max_rejected_rounds = {limit}).",
                parameter="local_lr",
            )

    def _settle(
        self,
        t: int,
        selected_per_run: list[Selected],
        counts: IntArray,
        result: LocalResult | None,
    ) -> tuple[np.ndarray, BoolArray]:
        """Reject non-finite updates, keep the first replies, correct the weights: per slot, weight and kept flag."""
        finite_slots = np.ones(int(counts.sum()), dtype=bool)
        if result is not None:
            flags = [u.reshape(u.shape[0], -1).isfinite().all(1) for u in result.updates.values()]
            finite_slots = torch.stack(flags).all(0).cpu().numpy()
        bounds = np.concatenate([[0], np.cumsum(counts)])
        weights, kept = [], []
        for r, (run, selected) in enumerate(zip(self.runs, selected_per_run, strict=True)):
            trains = selected.trains
            finite = np.ones(trains.size, dtype=bool)
            finite[trains] = finite_slots[bounds[r] : bounds[r + 1]]
            settled = settle_participants(
                selected,
                finite,
                self.participations[r],
                seed=run.seed,
                round=t,
                num_kept=self.config.num_sampled,
                estimator=self.estimators[r],
            )
            for name, count in settled.counts.items():
                self.record[name][r, t] = count
            self.record["weight_sum"][r, t] = float(settled.weights.sum())
            weights.append(settled.weights[trains])
            kept.append(settled.kept[trains])
        if not weights:
            return np.zeros(0), np.zeros(0, dtype=bool)
        return np.concatenate(weights), np.concatenate(kept)

    def _feedback(
        self,
        t: int,
        lr: float,
        selections: list[Any],
        clients_per_run: list[IntArray],
        run_of_slot: IntArray,
        result: LocalResult | None,
    ) -> None:
        norms = flat_norms(result.updates).cpu().numpy() if result is not None else np.zeros(0)
        losses = result.first_loss.cpu().numpy() if result is not None else np.zeros(0)
        grad_norms = result.gradient_norms.cpu().numpy() if result is not None else np.zeros(0)
        for r, run in enumerate(self.runs):
            mine = np.flatnonzero(run_of_slot == r)
            updates = None
            if run.sampler.needs_updates:
                # A run may have no slot this round: its updates are then a (0, d) array.
                if result is None:
                    updates = np.zeros((0, sum(v[0].numel() for v in self.globals.values())))
                else:
                    flat = torch.cat([u[mine].reshape(mine.size, u[0].numel()) for u in result.updates.values()], dim=1)
                    updates = flat.double().cpu().numpy()
            feedback = Feedback(
                round=t,
                selection=selections[r],
                clients=clients_per_run[r],
                update_norms=norms[mine],
                updates=updates,
                losses=losses[mine],
                gradient_norms=grad_norms[mine],
                local_lr=lr,
                local_steps=self.steps,
            )
            self.sampler_states[r] = run.sampler.update(self.sampler_states[r], feedback)
