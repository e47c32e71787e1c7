"""The simulation engine (PyTorch): one round loop, batched local training, paper models.

Requires the ``torch`` extra (``pip install 'fedsample[torch]'``).
"""

from fedsample.engine.algorithms import ALGORITHMS, FedAvg, FedProx, LocalAlgorithm, MiniBatchSGD, make_algorithm
from fedsample.engine.backends import BatchedBackend, LocalResult, SequentialBackend
from fedsample.engine.batching import BatchPlan, draw_client_batches, plan_batches
from fedsample.engine.history import History
from fedsample.engine.loop import (
    FallbackWarning,
    RunResult,
    RunSpec,
    TrainingConfig,
    TrainingData,
    initial_params,
    simulate,
)
from fedsample.engine.models import MODEL_KINDS, ModelSpec
from fedsample.engine.server import ServerOptimizer, ServerSGD

__all__ = [
    "ALGORITHMS",
    "MODEL_KINDS",
    "BatchPlan",
    "BatchedBackend",
    "FallbackWarning",
    "FedAvg",
    "FedProx",
    "History",
    "LocalAlgorithm",
    "LocalResult",
    "MiniBatchSGD",
    "ModelSpec",
    "RunResult",
    "RunSpec",
    "SequentialBackend",
    "ServerOptimizer",
    "ServerSGD",
    "TrainingConfig",
    "TrainingData",
    "draw_client_batches",
    "initial_params",
    "make_algorithm",
    "plan_batches",
    "simulate",
]
