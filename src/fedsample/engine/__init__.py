"""The simulation engine (PyTorch): one round loop, batched local training, paper models.

Requires the ``torch`` extra (``pip install 'fedsample[torch]'``). The package is lazy: a name is
imported on first use, so :mod:`fedsample.engine.registry` (the engine's names and parameter tables)
reads without PyTorch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fedsample._imports import lazy_attribute
from fedsample._threads import prefer_passive_waiting

# Before PyTorch loads OpenMP: its threads then sleep between kernels instead of spinning, which keeps a
# simulation fast on a shared machine (fedsample._threads). Nothing changes if torch is already imported
# or the user chose a wait policy (OMP_WAIT_POLICY=ACTIVE spins, for a machine of one's own).
prefer_passive_waiting()

if TYPE_CHECKING:  # the names below, for type checkers; ``X as X`` marks each one exported
    from fedsample.engine.algorithms import ALGORITHMS as ALGORITHMS
    from fedsample.engine.algorithms import FedAvg as FedAvg
    from fedsample.engine.algorithms import FedProx as FedProx
    from fedsample.engine.algorithms import LocalAlgorithm as LocalAlgorithm
    from fedsample.engine.algorithms import MiniBatchSGD as MiniBatchSGD
    from fedsample.engine.algorithms import Scaffold as Scaffold
    from fedsample.engine.algorithms import ScaffoldState as ScaffoldState
    from fedsample.engine.algorithms import make_algorithm as make_algorithm
    from fedsample.engine.batching import BatchPlan as BatchPlan
    from fedsample.engine.batching import draw_client_batches as draw_client_batches
    from fedsample.engine.batching import plan_batches as plan_batches
    from fedsample.engine.centralized import simulate_centralized as simulate_centralized
    from fedsample.engine.checkpoint import SimulationCheckpoint as SimulationCheckpoint
    from fedsample.engine.checkpoint import load_checkpoint as load_checkpoint
    from fedsample.engine.checkpoint import save_checkpoint as save_checkpoint
    from fedsample.engine.history import History as History
    from fedsample.engine.loop import simulate as simulate
    from fedsample.engine.paper_models import MODEL_KINDS as MODEL_KINDS
    from fedsample.engine.paper_models import ModelSpec as ModelSpec
    from fedsample.engine.server import SERVER_OPTIMIZERS as SERVER_OPTIMIZERS
    from fedsample.engine.server import AdaptiveState as AdaptiveState
    from fedsample.engine.server import FedAdagrad as FedAdagrad
    from fedsample.engine.server import FedAdam as FedAdam
    from fedsample.engine.server import FedYogi as FedYogi
    from fedsample.engine.server import MomentumState as MomentumState
    from fedsample.engine.server import ServerMomentum as ServerMomentum
    from fedsample.engine.server import ServerOptimizer as ServerOptimizer
    from fedsample.engine.server import ServerSGD as ServerSGD
    from fedsample.engine.server import make_server_optimizer as make_server_optimizer
    from fedsample.engine.simulation import fit_to_model as fit_to_model
    from fedsample.engine.specs import FallbackWarning as FallbackWarning
    from fedsample.engine.specs import Progress as Progress
    from fedsample.engine.specs import RoundReport as RoundReport
    from fedsample.engine.specs import RunResult as RunResult
    from fedsample.engine.specs import RunSpec as RunSpec
    from fedsample.engine.specs import TrainingConfig as TrainingConfig
    from fedsample.engine.specs import TrainingData as TrainingData
    from fedsample.engine.specs import initial_params as initial_params
    from fedsample.engine.trainers.base import BatchedBackend as BatchedBackend
    from fedsample.engine.trainers.base import LocalResult as LocalResult
    from fedsample.engine.trainers.base import SequentialBackend as SequentialBackend
    from fedsample.engine.user_model import Model as Model
    from fedsample.participation.setting import Participation as Participation

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
    "BatchedBackend": "fedsample.engine.trainers.base",
    "LocalResult": "fedsample.engine.trainers.base",
    "SequentialBackend": "fedsample.engine.trainers.base",
    "BatchPlan": "fedsample.engine.batching",
    "draw_client_batches": "fedsample.engine.batching",
    "plan_batches": "fedsample.engine.batching",
    "simulate_centralized": "fedsample.engine.centralized",
    "SimulationCheckpoint": "fedsample.engine.checkpoint",
    "load_checkpoint": "fedsample.engine.checkpoint",
    "save_checkpoint": "fedsample.engine.checkpoint",
    "History": "fedsample.engine.history",
    "FallbackWarning": "fedsample.engine.specs",
    "Progress": "fedsample.engine.specs",
    "RoundReport": "fedsample.engine.specs",
    "RunResult": "fedsample.engine.specs",
    "RunSpec": "fedsample.engine.specs",
    "TrainingConfig": "fedsample.engine.specs",
    "TrainingData": "fedsample.engine.specs",
    "initial_params": "fedsample.engine.specs",
    "simulate": "fedsample.engine.loop",
    "fit_to_model": "fedsample.engine.simulation",
    "Model": "fedsample.engine.user_model",
    "MODEL_KINDS": "fedsample.engine.paper_models",
    "ModelSpec": "fedsample.engine.paper_models",
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
    "Participation": "fedsample.participation.setting",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, _HOMES, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
