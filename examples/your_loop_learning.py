"""fedsample in your own PyTorch loop: a learning sampler (OSMD) and the feedback it learns from.

Run it with ``python examples/your_loop_learning.py``; docs/your-loop.md walks through it and
``tests/test_examples.py`` runs it. OSMD (paper 001) learns to draw more often the clients whose
updates are large; it reads, per returned client, the norm of its update ``||theta_i - theta||``
and the round's local learning rate and number of local steps. Its weights ``p_i / (K q_i)`` are
unbiased but do not sum to one: the script prints their sum, which is why the server update is
``theta + sum_i w_i (theta_i - theta)`` and not ``sum_i w_i theta_i``.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from fedsample import Federation, Feedback, make_sampler
from fedsample.integrations import ServerUpdate

LOCAL_LR, LOCAL_STEPS = 0.05, 5


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


def local_training(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, seed: int
) -> tuple[dict[str, torch.Tensor], float]:
    """Your client code: LOCAL_STEPS steps of SGD at LOCAL_LR; the trained state dict and the mean loss."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=LOCAL_LR)
    losses = []
    for _ in range(LOCAL_STEPS):
        rows = torch.randperm(len(y), generator=generator)[:16]
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x[rows]), y[rows])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return model.state_dict(), float(np.mean(losses))


def update_norm(theta: dict[str, torch.Tensor], trained: dict[str, torch.Tensor], names: list[str]) -> float:
    """``||theta_i - theta||`` over the parameters (not the buffers), what OSMD's feedback="update" reads."""
    return float(torch.sqrt(sum(((trained[n] - theta[n]) ** 2).sum() for n in names)))


def objective(model: nn.Module, clients: list[tuple[torch.Tensor, torch.Tensor]], importances: np.ndarray) -> float:
    """The federated objective sum_i p_i L_i at the model."""
    with torch.no_grad():
        losses = [nn.functional.cross_entropy(model(x), y).item() for x, y in clients]
    return float(np.dot(importances, losses))


def main(rounds: int = 30) -> None:
    clients = my_clients()
    federation = Federation.from_sizes([len(y) for _, y in clients])
    sampler = make_sampler("osmd", eta=0.01, replace=True)
    state = sampler.init(federation, num_sampled=5)
    rng = np.random.default_rng(0)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 3))
    names = [n for n, _ in model.named_parameters()]
    server = ServerUpdate()  # theta + sum_i w_i (theta_i - theta)
    theta = copy.deepcopy(model.state_dict())
    weight_sums = []
    for t in range(rounds):
        selection = sampler.sample(state, rng)
        ids, weights = selection.distinct()
        weight_sums.append(weights.sum())
        trained, norms, losses = [], [], []
        for i in ids:
            local = copy.deepcopy(model)
            local.load_state_dict(theta)
            result, loss = local_training(local, *clients[i], seed=1000 * t + int(i))
            trained.append(result)
            norms.append(update_norm(theta, result, names))
            losses.append(loss)
        feedback = Feedback(
            round=t,
            selection=selection,  # the draw, as sampled: OSMD reads each client's draws from it
            clients=ids,  # the distinct clients that returned, increasing (leave out those that failed)
            update_norms=np.array(norms),  # aligned with clients
            local_lr=LOCAL_LR,  # norms / (lr sqrt(steps)) are OSMD's gradient scales
            local_steps=LOCAL_STEPS,
            losses=np.array(losses),  # not read by OSMD; loss-driven samplers do
        )
        theta = server.apply(theta, trained, weights)
        state = sampler.update(state, feedback)  # a new state; the old one is left as it was
    p = sampler.probabilities(state)
    print(f"weights summed to {min(weight_sums):.3f} .. {max(weight_sums):.3f} over {rounds} rounds")
    print(f"learned probabilities: {p.min():.3f} .. {p.max():.3f} (uniform: {1 / p.size:.3f})")
    model.load_state_dict(theta)
    print(f"round {rounds}: objective {objective(model, clients, federation.importances):.4f}")


if __name__ == "__main__":
    main()
