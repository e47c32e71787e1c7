"""What the server and the clients share: the federation (embedded digits) and the model."""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
import torch

from fedsample.data.builders import FederationSpec, build_federation
from fedsample.engine import ModelSpec

MODEL = ModelSpec("mlp", (64,), 10, hidden=32)


@cache
def federation(num_clients: int, seed: int) -> Any:
    """The digits split over ``num_clients`` clients of lognormal sizes (the same on every node)."""
    return build_federation(
        FederationSpec(dataset="digits", partition="lognormal", num_clients=num_clients, lognormal_sigma=1.0, seed=seed)
    )


def client_rows(num_clients: int, seed: int, client: int) -> tuple[np.ndarray, np.ndarray]:
    """Features and targets of one client's training rows."""
    data = federation(num_clients, seed)
    lo, hi = int(data.train_indptr[client]), int(data.train_indptr[client + 1])
    return data.train_features[lo:hi], data.train_targets[lo:hi]


def evaluate_model(params: dict[str, np.ndarray], num_clients: int, seed: int) -> tuple[float, float]:
    """Loss and accuracy of the model ``params`` on the federation's test rows."""
    data = federation(num_clients, seed)
    module = MODEL.build()
    module.load_state_dict({name: torch.as_tensor(value) for name, value in params.items()})
    with torch.no_grad():
        logits = module(torch.as_tensor(data.test_features))
        targets = torch.as_tensor(data.test_targets, dtype=torch.long)
        loss = torch.nn.functional.cross_entropy(logits, targets).item()
        accuracy = (logits.argmax(1) == targets).float().mean().item()
    return float(loss), float(accuracy)
