"""The simulation engine (PyTorch): one round loop, batched local training, paper models.

Requires the ``torch`` extra (``pip install 'fedsample[torch]'``).
"""

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
from fedsample.engine.backends import BatchedBackend, LocalResult, SequentialBackend
from fedsample.engine.batching import BatchPlan, draw_client_batches, plan_batches
from fedsample.engine.centralized import simulate_centralized
from fedsample.engine.checkpoint import SimulationCheckpoint, load_checkpoint, save_checkpoint
from fedsample.engine.history import History
from fedsample.engine.loop import (
    FallbackWarning,
    Progress,
    RunResult,
    RunSpec,
    TrainingConfig,
    TrainingData,
    initial_params,
    simulate,
)
from fedsample.engine.models import MODEL_KINDS, ModelSpec
from fedsample.engine.server import (
    SERVER_OPTIMIZERS,
    MomentumState,
    ServerMomentum,
    ServerOptimizer,
    ServerSGD,
    make_server_optimizer,
)
from fedsample.engine.server_adaptive import AdaptiveState, FedAdagrad, FedAdam, FedYogi
from fedsample.participation.rounds import Participation

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
