"""The settings of a simulation and what it returns: the data it reads, the training configuration,
the runs, the progress reports and the results.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt
import torch

from fedsample._arrays import IntArray
from fedsample._memory import check_fits_in_memory, gib, memory_limit
from fedsample._validation import Interval, check_param, invalid
from fedsample.engine.algorithms import FedAvg, LocalAlgorithm
from fedsample.engine.history import ROUND_METRICS, History
from fedsample.engine.paper_models import ModelSpec, Params
from fedsample.engine.registry import TRAINING
from fedsample.engine.server import ServerOptimizer, ServerSGD
from fedsample.federation import Federation, ImportanceMode
from fedsample.samplers import Sampler
from fedsample.samplers._base import check_state

__all__ = [
    "FallbackWarning",
    "Footprint",
    "Progress",
    "RunResult",
    "RunSpec",
    "TrainingConfig",
    "TrainingData",
    "check_history_memory",
    "check_round_memory",
    "initial_params",
    "model_footprint",
]


# What a server optimizer has (ServerOptimizer is a Protocol: a class of one's own needs no base class).
_STEPS = ("init", "step")


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
    rounds in a row cannot train: the simulation stops with an error (0: never stop). ``threads`` is
    PyTorch's thread count while the simulation runs: ``"auto"`` (PyTorch's own count, capped at the
    CPUs the process may use) or an int (:mod:`fedsample._threads`); the caller's count is restored after.
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
    threads: int | str = TRAINING.defaults["threads"]

    def __post_init__(self) -> None:
        # Every scalar setting, checked against its entry of the engine registry's table.
        TRAINING.validate({key: getattr(self, key) for key in TRAINING.parameters})
        if not isinstance(self.algorithm, LocalAlgorithm):
            raise invalid("algorithm", "TrainingConfig", "a LocalAlgorithm (FedAvg, FedProx, ...)", self.algorithm)
        server = self.server
        if not (
            isinstance(getattr(server, "name", None), str) and all(callable(getattr(server, a, None)) for a in _STEPS)
        ):
            rule = "a ServerOptimizer (ServerSGD, ServerMomentum, ...: a 'name', 'init' and 'step')"
            raise invalid("server", "TrainingConfig", rule, server)


@dataclass(frozen=True)
class RunSpec:
    """One run of a comparison: a sampler and the seed of its randomness (sampling, batches).

    ``state``: the sampler's state before round 1 when the caller has made it (``sampler.init`` on the
    run's federation and number asked), so that a sampler is initialised once; None: the engine makes it.
    """

    sampler: Sampler[Any]
    seed: int = 0
    label: str | None = None
    state: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.sampler, Sampler):
            raise invalid("sampler", "RunSpec", "a Sampler (make_sampler builds one by name)", self.sampler)
        check_param("seed", "RunSpec", self.seed, Interval(int, 0, 2**63 - 1, closed="both"))
        if self.label is not None and not isinstance(self.label, str):
            raise invalid("label", "RunSpec", "a str or None", self.label)
        if self.state is not None:
            check_state(self.sampler, self.state, "RunSpec")


@dataclass(frozen=True, eq=False)
class Progress:
    """Reported after every round: ``done`` of ``total`` rounds, and the latest evaluated
    training objective of each run (``train_loss``, one value per run, at round ``evaluated``)."""

    done: int
    total: int
    train_loss: np.ndarray
    evaluated: int


@dataclass(frozen=True, eq=False)
class RoundReport:
    """Reported after every round to ``on_round`` (and once for the initial model, ``round`` 0): the round
    of ``total``, whether the model was evaluated after it, and one row per run.

    A row is the run's line of the metrics table (:func:`fedsample.experiments.results.metrics.metrics_table`)
    for that round, every column of the run's record as a Python number (``label`` and ``sampler`` as
    strings): ``label``, ``sampler``, ``seed``, ``round``, the evaluation columns (NaN on a round
    without an evaluation), the per-round metrics, the failure counts, the two-phase and system metrics
    of runs that record them, and ``test_<name>`` for a model's extra metrics. Missing values are
    marked as in the files: ``-1`` for a count, NaN otherwise.
    """

    round: int
    total: int
    evaluated: bool
    rows: tuple[dict[str, Any], ...]


@dataclass(frozen=True, eq=False)
class RunResult:
    """A run's history, its final global parameters and buffers, and its final sampler state.

    ``params`` and ``buffers`` are named as ``named_parameters`` and ``named_buffers`` name them;
    :meth:`state_dict` gives them under the module's ``state_dict`` keys (``state_names``: each key with
    the tensor it holds; tied weights under every key, non-persistent buffers left out), for
    ``module.load_state_dict(result.state_dict())``.
    """

    history: History
    params: dict[str, np.ndarray]
    sampler_state: Any
    buffers: dict[str, np.ndarray] = field(default_factory=dict)
    state_names: tuple[tuple[str, str], ...] = ()

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The final model as CPU tensors under the module's ``state_dict`` keys."""
        tensors = {**self.params, **self.buffers}
        pairs = self.state_names or tuple((name, name) for name in tensors)
        return {key: torch.from_numpy(np.array(tensors[name])) for key, name in pairs}


def initial_params(model: ModelSpec, seed: int) -> Params:
    """The initial global model of a comparison, drawn from the stream ``(seed, MODEL_INIT)``."""
    from fedsample.engine.model_binding import torch_seed

    return model.init_params(torch.Generator().manual_seed(torch_seed(seed)))


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
    available = memory_limit()
    if available is not None and needed > available:
        raise invalid(
            "rounds",
            owner,
            f"small enough that the history of {num_runs} run(s) fits in memory: {config.rounds} rounds need "
            f"{gib(needed)} of history, more than this machine's {gib(available)}",
            config.rounds,
        )


@dataclass(frozen=True)
class Footprint:
    """What the model ``name`` costs in memory: ``count`` parameters of ``size`` bytes in all, and
    ``activations`` values per sample that a training step holds (a dense ReLU network's layer inputs and
    pre-activations, which the fused kernels keep; 0 where not counted: other modules)."""

    name: str
    count: int
    size: int
    activations: int


def model_footprint(model: Any, sample_shape: tuple[int, ...]) -> Footprint | None:
    """The footprint of ``model`` (any model :func:`~fedsample.engine.simulate` takes, or a bound one) for
    samples of ``sample_shape``, counted without allocating it: a module as it is, a ModelSpec or a factory
    built on PyTorch's meta device (shapes only); None when a factory fails there (count it once built)."""
    from fedsample.engine.model_binding import BoundModel
    from fedsample.engine.user_model import Model, dense_layout, describe_module

    module: Any
    if isinstance(model, BoundModel):
        name, module = model.name, model.train_module
    else:
        source = model.module if isinstance(model, Model) else model.build if isinstance(model, ModelSpec) else model
        name = getattr(model, "name", None) or getattr(model, "kind", None) or describe_module(source)
        module = source
        if not isinstance(source, torch.nn.Module):
            try:  # the global generators restored after: a factory may seed them
                with torch.random.fork_rng(devices=[]), torch.device("meta"):  # 10^12 values cost nothing here
                    module = source()
            except Exception:  # a factory that needs real tensors (loaded weights, numpy): counted once built
                return None
            if not isinstance(module, torch.nn.Module):
                return None
    params = list(module.parameters())
    layout = dense_layout(module, sample_shape)
    widths = [int(module.get_parameter(weight).shape[0]) for weight in layout.weights] if layout is not None else []
    size = sum(p.numel() * p.element_size() for p in params)
    return Footprint(name=str(name), count=sum(p.numel() for p in params), size=size, activations=2 * sum(widths))


def check_round_memory(
    config: TrainingConfig,
    data: TrainingData,
    model: Any,
    *,
    clients: int,
    runs: int,
    owner: str,
    batch: tuple[str, object],
    model_key: tuple[str, object | None],
    noun: str = "parameter",
) -> bool:
    """Refuse a round whose arrays cannot fit in this machine's memory, before they are allocated.

    ``runs`` train together, ``clients`` slots in all. A round holds its batches: ``local_steps x clients x
    batch_size`` planned row ids (int64), each slot's inputs (float32, at most a client's rows) and the
    activations of a training step; and its models (:func:`model_footprint`): each slot's parameters and
    gradients, each run's global model, and the activations of an evaluation chunk (a run at a time). Both
    are lower bounds of what training allocates. When they exceed the machine's memory
    (:func:`fedsample._memory.memory_limit`) the error names ``batch`` (the batch size's parameter or key,
    and its value) when the batches are the larger part, else ``model_key`` (the model's; a value None:
    its name); ``noun="key"`` for config keys. Returns False, having checked nothing, when ``model`` is a
    factory that cannot be built on the meta device: check again with the model once bound.
    """
    from fedsample.engine.evaluation import Evaluator

    footprint = model_footprint(model, tuple(int(s) for s in np.shape(data.train_features)[1:]))
    if footprint is None:
        return False
    sizes = np.diff(np.asarray(data.train_indptr, dtype=np.int64))
    values = int(np.prod(np.shape(data.train_features)[1:]))
    steps, size = config.local_steps, config.batch_size
    rows = clients * min(size, int(sizes.max(initial=1)))
    batches = 8.0 * steps * clients * size + 4.0 * rows * (values + footprint.activations)
    chunk = min(Evaluator.chunk, max(int(sizes.sum()), int(np.shape(data.test_targets)[0])))
    models = footprint.size * (2.0 * clients + runs) + 4.0 * chunk * footprint.activations
    what = (
        f"a round's batches ({gib(batches)}: row ids of {steps} steps x {clients} clients x batch_size {size}, "
        f"inputs, activations) and models ({gib(models)}: {footprint.count} parameters and gradients for {clients} "
        f"clients and {runs} runs, an evaluation's activations)"
    )
    name, value = batch if batches >= models else model_key
    shown = footprint.name if value is None else value
    check_fits_in_memory(name, owner, shown, batches + models, what, noun=noun)
    return True
