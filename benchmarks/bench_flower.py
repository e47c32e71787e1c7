"""Seconds per round of paper 000's MNIST round: fedsample's engine against Flower's simulation engine.

Setting (the ``mnist-mlp`` scenario of ``bench_engine.py``): 100 clients of 500 synthetic
MNIST-shaped samples (784 uniform features, one label per client, generated in memory from seed 0:
no download), m = 10 clients per round, N = 50 local SGD steps of batch B = 50 at lr 0.01, MLP
784-50-10.

* ``fedsample``: ``simulate`` with MD sampling on the batched backend (median over the timed
  rounds, after a warm-up round), in this process.
* ``flower FedAvg``: ``flwr.simulation.run_simulation`` with 100 virtual SuperNodes, Flower's own
  ``FedAvg`` (``fraction_train=0.1``), and a ClientApp doing the per-client PyTorch training of
  the papers' code (``nn.Sequential`` MLP, ``torch.optim.SGD``, a random batch of 50 per step)
  on the same data; two Ray actors (one per core) with one torch thread each. A round is timed
  from ``configure_train`` to the end of ``aggregate_train`` (median over the rounds after the
  first, which starts the actors).
* ``flower FedsampleStrategy``: the same simulation and ClientApp with
  :class:`fedsample.integrations.flower.FedsampleStrategy` (MD sampling, sizes given).

Printed: seconds per round of each and the ratio Flower / fedsample (target: at least 20).

Run: ``python benchmarks/bench_flower.py`` (``--rounds`` for the timed rounds).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np

import _engine_workloads as workloads
from _engine_workloads import BATCH, CLASSES, FEATURES, HIDDEN, LR, NUM_CLIENTS, SAMPLES, STEPS, M


def fedsample_seconds(rounds: int) -> float:
    """Median seconds per round of fedsample's engine (batched backend, one run)."""
    return workloads.fedsample_round(rounds, "batched", 1, "mnist-mlp")


def _mlp() -> Any:
    """The papers' MLP 784-50-10 as a plain PyTorch module."""
    import torch

    return torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, CLASSES))


def _client_app() -> Any:
    import torch
    from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp

    app = ClientApp()
    cache: dict[str, Any] = {}

    def client_data(partition: int) -> tuple[torch.Tensor, torch.Tensor]:
        if "data" not in cache:  # once per Ray actor: the same arrays as the engine's
            torch.set_num_threads(1)
            data = workloads.make_data()
            x, y = np.array(data.train_features), np.array(data.train_targets)
            cache["data"] = (torch.from_numpy(x), torch.from_numpy(y))
        x, y = cache["data"]
        rows = slice(partition * SAMPLES, (partition + 1) * SAMPLES)
        return x[rows], y[rows]

    @app.query()
    def query(message: Message, context: Context) -> Message:
        metrics = MetricRecord({"num-examples": SAMPLES, "client-id": int(context.node_config["partition-id"])})
        return Message(RecordDict({"metrics": metrics}), reply_to=message)

    @app.train()
    def train(message: Message, context: Context) -> Message:
        x, y = client_data(int(context.node_config["partition-id"]))
        model = _mlp()
        arrays = message.content.array_records["arrays"]
        model.load_state_dict(arrays.to_torch_state_dict())
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        for _ in range(STEPS):
            index = torch.randperm(SAMPLES)[:BATCH]
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x[index]), y[index]).backward()
            optimizer.step()
        reply = RecordDict(
            {"arrays": ArrayRecord(model.state_dict()), "metrics": MetricRecord({"num-examples": SAMPLES})}
        )
        return Message(reply, reply_to=message)

    return app


def flower_seconds(rounds: int) -> dict[str, float]:
    """Median seconds per round in Flower's simulation engine, for FedAvg and FedsampleStrategy."""
    import ray.cloudpickle
    from flwr.app import ArrayRecord, Context
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg

    import fedsample
    from fedsample.integrations.flower import FedsampleStrategy

    # Ray's workers get the ClientApp by value, including what it uses from _engine_workloads.
    ray.cloudpickle.register_pickle_by_value(workloads)

    def timed(base: type) -> type:
        class Timed(base):  # type: ignore[misc, valid-type]
            def configure_train(self, server_round: int, *args: Any) -> Any:
                self.begin = time.perf_counter()
                return super().configure_train(server_round, *args)

            def aggregate_train(self, server_round: int, replies: Any) -> Any:
                out = super().aggregate_train(server_round, replies)
                self.times.append(time.perf_counter() - self.begin)
                return out

        return Timed

    initial = ArrayRecord(_mlp().state_dict())
    fedavg = timed(FedAvg)(fraction_train=M / NUM_CLIENTS, fraction_evaluate=0.0, min_available_nodes=NUM_CLIENTS)
    ours = timed(FedsampleStrategy)(fedsample.MDSampler(), num_sampled=M, sizes=[SAMPLES] * NUM_CLIENTS)
    for strategy in (fedavg, ours):
        strategy.times = []
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        for strategy in (fedavg, ours):
            strategy.start(grid, initial, num_rounds=rounds + 1)

    from flwr.simulation import run_simulation

    run_simulation(
        server,
        _client_app(),
        num_supernodes=NUM_CLIENTS,
        backend_config={"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": os.cpu_count() or 1}},
    )
    # The first round of each strategy starts the actors (and loads the data): not timed.
    return {
        "flower FedAvg": float(np.median(fedavg.times[1:])),
        "flower FedsampleStrategy": float(np.median(ours.times[1:])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per system (default 5)")
    args = parser.parse_args()
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    engine = fedsample_seconds(args.rounds)
    flower = flower_seconds(args.rounds)
    print()
    print(f"paper 000's MNIST round: {NUM_CLIENTS} clients x {SAMPLES} synthetic samples x {FEATURES} features,")
    print(f"m={M}, N={STEPS}, B={BATCH}, MLP {FEATURES}-{HIDDEN}-{CLASSES}; {os.cpu_count()} CPU cores")
    print(f"{'system':<28}{'s/round':>10}{'flower / fedsample':>22}")
    print(f"{'fedsample (batched)':<28}{engine:>10.4f}{'':>22}")
    for name, seconds in flower.items():
        print(f"{name:<28}{seconds:>10.4f}{seconds / engine:>21.1f}x")
    verdict = "met" if flower["flower FedAvg"] / engine >= 20 else "NOT met"
    print(f"target: Flower's FedAvg takes at least 20x fedsample's seconds per round: {verdict}")


if __name__ == "__main__":
    main()
