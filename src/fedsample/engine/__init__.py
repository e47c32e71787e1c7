"""The simulation engine (PyTorch): one round loop, batched local training, paper models.

Requires the ``torch`` extra (``pip install 'fedsample[torch]'``). The package is lazy: a name is
imported on first use, so :mod:`fedsample.engine.registry` (the engine's names and parameter tables)
reads without PyTorch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedsample.engine.algorithms import (
        ALGORITHMS,
        FedAvg,
        FedProx,
        LocalAlgorithm,
        MiniBatchSGD,
        Scaffold,
        ScaffoldState,
        make_algorithm,
    )
    from fedsample.engine.backends import (
        BatchedBackend,
        LocalResult,
        SequentialBackend,
    )
    from fedsample.engine.batching import (
        BatchPlan,
        draw_client_batches,
        plan_batches,
    )
    from fedsample.engine.centralized import simulate_centralized
    from fedsample.engine.checkpoint import (
        SimulationCheckpoint,
        load_checkpoint,
        save_checkpoint,
    )
    from fedsample.engine.history import History
    from fedsample.engine.loop import simulate
    from fedsample.engine.models import (
        MODEL_KINDS,
        ModelSpec,
    )
    from fedsample.engine.server import (
        SERVER_OPTIMIZERS,
        AdaptiveState,
        FedAdagrad,
        FedAdam,
        FedYogi,
        MomentumState,
        ServerMomentum,
        ServerOptimizer,
        ServerSGD,
        make_server_optimizer,
    )
    from fedsample.engine.settings import (
        FallbackWarning,
        Progress,
        RunResult,
        RunSpec,
        TrainingConfig,
        TrainingData,
        initial_params,
    )
    from fedsample.participation.rounds import Participation

# Where each public name lives; __getattr__ imports the module on first use.
_HOMES: dict[str, str] = {
    "ALGORITHMS": "fedsample.engine.algorithms",
    "FedAvg": "fedsample.engine.algorithms",
    "FedProx": "fedsample.engine.algorithms",
    "LocalAlgorithm": "fedsample.engine.algorithms",
    "MiniBatchSGD": "fedsample.engine.algorithms",
    "Scaffold": "fedsample.engine.algorithms",
    "ScaffoldState": "fedsample.engine.algorithms",
    "make_algorithm": "fedsample.engine.algorithms",
    "BatchedBackend": "fedsample.engine.backends",
    "LocalResult": "fedsample.engine.backends",
    "SequentialBackend": "fedsample.engine.backends",
    "BatchPlan": "fedsample.engine.batching",
    "draw_client_batches": "fedsample.engine.batching",
    "plan_batches": "fedsample.engine.batching",
    "simulate_centralized": "fedsample.engine.centralized",
    "SimulationCheckpoint": "fedsample.engine.checkpoint",
    "load_checkpoint": "fedsample.engine.checkpoint",
    "save_checkpoint": "fedsample.engine.checkpoint",
    "History": "fedsample.engine.history",
    "FallbackWarning": "fedsample.engine.settings",
    "Progress": "fedsample.engine.settings",
    "RunResult": "fedsample.engine.settings",
    "RunSpec": "fedsample.engine.settings",
    "TrainingConfig": "fedsample.engine.settings",
    "TrainingData": "fedsample.engine.settings",
    "initial_params": "fedsample.engine.settings",
    "simulate": "fedsample.engine.loop",
    "MODEL_KINDS": "fedsample.engine.models",
    "ModelSpec": "fedsample.engine.models",
    "SERVER_OPTIMIZERS": "fedsample.engine.server",
    "MomentumState": "fedsample.engine.server",
    "ServerMomentum": "fedsample.engine.server",
    "ServerOptimizer": "fedsample.engine.server",
    "ServerSGD": "fedsample.engine.server",
    "make_server_optimizer": "fedsample.engine.server",
    "AdaptiveState": "fedsample.engine.server",
    "FedAdagrad": "fedsample.engine.server",
    "FedAdam": "fedsample.engine.server",
    "FedYogi": "fedsample.engine.server",
    "Participation": "fedsample.participation.rounds",
}

__all__ = [
    "ALGORITHMS",
    "MODEL_KINDS",
    "SERVER_OPTIMIZERS",
    "AdaptiveState",
    "BatchPlan",
    "BatchedBackend",
    "FallbackWarning",
    "FedAdagrad",
    "FedAdam",
    "FedAvg",
    "FedProx",
    "FedYogi",
    "History",
    "LocalAlgorithm",
    "LocalResult",
    "MiniBatchSGD",
    "ModelSpec",
    "MomentumState",
    "Participation",
    "Progress",
    "RunResult",
    "RunSpec",
    "Scaffold",
    "ScaffoldState",
    "SequentialBackend",
    "ServerMomentum",
    "ServerOptimizer",
    "ServerSGD",
    "SimulationCheckpoint",
    "TrainingConfig",
    "TrainingData",
    "draw_client_batches",
    "initial_params",
    "load_checkpoint",
    "make_algorithm",
    "make_server_optimizer",
    "plan_batches",
    "save_checkpoint",
    "simulate",
    "simulate_centralized",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups (and monkeypatching) see a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
