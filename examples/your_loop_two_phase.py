"""fedsample in your own PyTorch loop: a two-phase sampler (Power-of-Choice, pow-d).

Run it with ``python examples/your_loop_two_phase.py``; docs/your-loop.md walks through it and
``tests/test_examples.py`` runs it. Each round has two phases, as fedsample's engine runs them:

1. ``draw_candidates``: ``d`` candidates among the available clients;
2. the candidates report their loss at the global model (a forward pass over their data, no
   training), and that report goes to ``update`` *before* the draw;
3. ``sample`` keeps the ``m`` candidates with the highest loss; they train, the server updates.

No ``update`` follows the round: the next round's report replaces it.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from fedsample import Federation, Feedback, make_sampler
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
    for _ in range(5):
        rows = torch.randperm(len(y), generator=generator)[:16]
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x[rows]), y[rows]).backward()
        optimizer.step()
    return model.state_dict()


def local_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """A candidate's report: its loss at the global model over all its data (pow-d; cpow-d takes a batch)."""
    with torch.no_grad():
        return nn.functional.cross_entropy(model(x), y).item()


def main(rounds: int = 30) -> None:
    clients = my_clients()
    federation = Federation.from_sizes([len(y) for _, y in clients])
    sampler = make_sampler("power-of-choice", variant="pow-d", num_candidates=10)
    state = sampler.init(federation, num_sampled=5)
    rng = np.random.default_rng(0)
    available = np.arange(federation.num_clients)  # the clients that can take part this round

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 3))
    server = ServerUpdate()
    theta = copy.deepcopy(model.state_dict())
    for t in range(rounds):
        # Phase 1: the candidates and their report, read by the sampler before it draws.
        candidates = sampler.draw_candidates(state, available, rng)
        model.load_state_dict(theta)
        losses = np.array([local_loss(model, *clients[i]) for i in candidates.clients])
        report = Feedback(round=t, selection=candidates, clients=candidates.clients, losses=losses)
        state = sampler.update(state, report)
        # Phase 2: the draw among the candidates, local training, the server update.
        ids, weights = sampler.sample(state, rng).distinct()
        trained = []
        for i in ids:
            local = copy.deepcopy(model)
            local.load_state_dict(theta)
            trained.append(local_training(local, *clients[i], seed=1000 * t + int(i)))
        theta = server.apply(theta, trained, weights)
        if (t + 1) % 10 == 0:
            model.load_state_dict(theta)
            objective = sum(p * local_loss(model, *c) for p, c in zip(federation.importances, clients, strict=True))
            print(f"round {t + 1:2d}: kept the candidates of highest loss {ids.tolist()}, objective {objective:.4f}")


if __name__ == "__main__":
    main()
