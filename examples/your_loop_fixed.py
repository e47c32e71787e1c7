"""fedsample in your own PyTorch loop: a fixed sampler (md) chooses the clients, ServerUpdate moves the model.

Run it with ``python examples/your_loop_fixed.py``; docs/your-loop.md walks through it and
``tests/test_examples.py`` runs it. The data are a stand-in for yours: 20 clients of unequal sizes,
10 features, 3 classes.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from fedsample import Federation, make_sampler
from fedsample.integrations import ServerUpdate


def my_clients(num_clients: int = 20, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Stand-in for your clients' data: each a few dozen rows, its own mix of 3 classes."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=2.0, size=(3, 10))
    clients = []
    for size in rng.integers(10, 80, num_clients):
        labels = rng.choice(3, size=size, p=rng.dirichlet(np.full(3, 0.5)))
        features = centres[labels] + rng.normal(size=(size, 10))
        clients.append((torch.tensor(features, dtype=torch.float32), torch.tensor(labels)))
    return clients


def local_training(model: nn.Module, x: torch.Tensor, y: torch.Tensor, seed: int) -> dict[str, torch.Tensor]:
    """Your client code: a few steps of SGD on mini-batches; returns the trained model's state dict."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model.train()
    for _ in range(5):
        rows = torch.randperm(len(y), generator=generator)[:16]
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x[rows]), y[rows]).backward()
        optimizer.step()
    return model.state_dict()


def objective(model: nn.Module, clients: list[tuple[torch.Tensor, torch.Tensor]], importances: np.ndarray) -> float:
    """The federated objective sum_i p_i L_i at the model (evaluation mode)."""
    model.eval()
    with torch.no_grad():
        losses = [nn.functional.cross_entropy(model(x), y).item() for x, y in clients]
    return float(np.dot(importances, losses))


def main(rounds: int = 30) -> None:
    clients = my_clients()
    federation = Federation.from_sizes([len(y) for _, y in clients])  # p_i = n_i / M
    sampler = make_sampler("md")  # m draws with probabilities p_i, weight 1/m each
    state = sampler.init(federation, num_sampled=5)
    rng = np.random.default_rng(0)  # the sampler's only randomness

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))
    # FedAvg's server: theta + 1 * sum_i w_i (theta_i - theta); BatchNorm's statistics by their weighted mean.
    server = ServerUpdate(buffers=dict(model.named_buffers()))
    theta = copy.deepcopy(model.state_dict())
    print(f"round  0: objective {objective(model, clients, federation.importances):.4f}")
    for t in range(rounds):
        selection = sampler.sample(state, rng)
        ids, weights = selection.distinct()  # a client drawn twice trains once, with its weights summed
        trained = []
        for i in ids:
            local = copy.deepcopy(model)  # one module per client: state_dict() returns live tensors
            local.load_state_dict(theta)
            trained.append(local_training(local, *clients[i], seed=1000 * t + int(i)))
        theta = server.apply(theta, trained, weights)  # md learns nothing: no sampler.update to call
        if (t + 1) % 10 == 0:
            model.load_state_dict(theta)
            print(f"round {t + 1:2d}: objective {objective(model, clients, federation.importances):.4f}")


if __name__ == "__main__":
    main()
