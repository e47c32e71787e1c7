"""The round of paper 000's MNIST experiment, timed for every way of running it, in one run.

Setting ("mnist-mlp"): 100 clients of 500 MNIST-shaped samples (784 features, 10 classes,
generated in memory), m = 10 clients per round, N = 50 local SGD steps of batch B = 50, MLP
784-50-10. A second setting ("digits-softmax", a softmax regression on the embedded digits with
clients of ~18 samples) shows where batching the runs of a comparison together pays.

Compared, each in a fresh process (so that peak memory is its own):

* ``papers-loop``: the per-client loop of the papers' released code: for each client a fresh
  model copy (``deepcopy``) and ``torch.optim.SGD``, and each step's batch taken with
  ``next(iter(DataLoader(client_data, batch_size=B, shuffle=True)))``;
* ``tight-loop``: the same loop without the DataLoader (batches sliced from in-memory tensors),
  the fastest plain per-client loop;
* ``sequential``: fedsample's reference backend (``simulate(..., backend="sequential")``);
* ``batched``: fedsample's batched backend (``simulate``);
* ``batched x15``: 5 samplers x 3 seeds trained together by one ``simulate`` call.

Reported: rounds per second (aggregate over runs for x15), the speed-up against the papers' loop
and the tight loop, effective GFLOP/s (3x the forward FLOPs of every sample processed: the usual
training estimate), their fraction of a fp32 matmul throughput probe on the same machine (the
physical floor), and peak memory (max RSS). Targets: batched >= 3x the papers' loop and >= 40% of
the probe; batched x15 >= 8x the papers' loop's aggregate rounds per second.

Run: ``python benchmarks/bench_engine.py`` (``--rounds`` to change the timed rounds).
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import multiprocessing as mp
import resource
import time
from typing import Any

import numpy as np
import torch

NUM_CLIENTS, SAMPLES, FEATURES, CLASSES = 100, 500, 784, 10
M, STEPS, BATCH, HIDDEN, LR = 10, 50, 50, 50, 0.01


def make_data() -> Any:
    from fedsample.data import FederatedDataset

    rng = np.random.default_rng(0)
    x = rng.random((NUM_CLIENTS * SAMPLES, FEATURES), dtype=np.float32)
    # One label per client, as in 000's MNIST split: clients 10j..10j+9 hold digit j.
    y = np.repeat(np.arange(NUM_CLIENTS) // (NUM_CLIENTS // CLASSES), SAMPLES)
    indptr = np.arange(0, NUM_CLIENTS * SAMPLES + 1, SAMPLES)
    return FederatedDataset(
        train_features=x,
        train_targets=y,
        train_indptr=indptr,
        test_features=x[:1000],
        test_targets=y[:1000],
        test_indptr=np.minimum(indptr, 1000),
        num_classes=CLASSES,
    )


def make_digits() -> Any:
    from fedsample.data.builders import FederationSpec, build_federation

    return build_federation(FederationSpec(dataset="digits", partition="iid", num_clients=100, test_fraction=0.0))


# The two settings: paper 000's MNIST round (the issue's target), and a small model on the
# embedded digits, where per-step overhead rather than arithmetic dominates.
SCENARIOS: dict[str, dict[str, Any]] = {
    "mnist-mlp": {
        "data": make_data,
        "features": FEATURES,
        "hidden": HIDDEN,
        "classes": CLASSES,
        "m": M,
        "steps": STEPS,
        "batch": BATCH,
        "title": f"paper 000's MNIST round: 100 clients x 500 samples, m={M}, N={STEPS}, B={BATCH}, MLP 784-50-10",
    },
    "digits-softmax": {
        "data": make_digits,
        "features": 64,
        "hidden": 0,
        "classes": 10,
        "m": 10,
        "steps": 10,
        "batch": 10,
        "title": "small model: 100 clients of the embedded digits (~18 samples), m=10, N=10, B=10, softmax 64-10",
    },
}


def matmul_probe() -> float:
    """fp32 GFLOP/s of a 1024x1024 matrix product (best of 5)."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    a @ b
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(10):
            a @ b
        best = min(best, time.perf_counter() - start)
    return 10 * 2 * 1024**3 / best / 1e9


def papers_loop(rounds: int, dataloader: bool, scenario: str) -> float:
    """Median seconds per round of the per-client loop (with or without a DataLoader per step)."""
    from torch.utils.data import DataLoader, TensorDataset

    sc = SCENARIOS[scenario]
    data = sc["data"]()
    num_clients, features, hidden, classes = data.num_clients, sc["features"], sc["hidden"], sc["classes"]
    steps, batch, m = sc["steps"], sc["batch"], sc["m"]
    sizes = np.diff(data.train_indptr)
    x = torch.from_numpy(np.array(data.train_features))
    y = torch.from_numpy(np.array(data.train_targets))
    bounds = data.train_indptr
    clients = [(x[bounds[i] : bounds[i + 1]], y[bounds[i] : bounds[i + 1]]) for i in range(num_clients)]
    loaders = [DataLoader(TensorDataset(cx, cy), batch_size=batch, shuffle=True) for cx, cy in clients]
    generator = torch.Generator().manual_seed(0)
    layers: list[torch.nn.Module] = (
        [torch.nn.Linear(features, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, classes)]
        if hidden
        else [torch.nn.Linear(features, classes)]
    )
    model = torch.nn.Sequential(*layers)
    rng = np.random.default_rng(0)

    def one_round() -> None:
        nonlocal model
        sampled = rng.choice(num_clients, size=m, replace=False)
        locals_ = []
        for k in sampled:
            local = copy.deepcopy(model)
            optimizer = torch.optim.SGD(local.parameters(), lr=LR)
            for _ in range(steps):
                if dataloader:
                    inputs, labels = next(iter(loaders[k]))
                else:
                    idx = torch.randperm(int(sizes[k]), generator=generator)[:batch]
                    inputs, labels = clients[k][0][idx], clients[k][1][idx]
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(local(inputs), labels).backward()
                optimizer.step()
            locals_.append([p.detach() for p in local.parameters()])
        new = copy.deepcopy(model)
        with torch.no_grad():
            for i, p in enumerate(new.parameters()):
                p.copy_(sum(lp[i] for lp in locals_) / m)
        model = new

    one_round()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        one_round()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def fedsample_round(rounds: int, backend: str, runs: int, scenario: str) -> float:
    """Median seconds per lockstep round of fedsample's engine for ``runs`` runs trained together."""
    import fedsample
    from fedsample.engine import ModelSpec, RunSpec, TrainingConfig, simulate

    sc = SCENARIOS[scenario]
    data = sc["data"]()
    kind = "mlp" if sc["hidden"] else "softmax"
    spec = ModelSpec(kind, (sc["features"],), sc["classes"], hidden=sc["hidden"] or 50)
    names = ["md", "uniform", "clustered-size", "poisson", "binomial"]
    specs = [RunSpec(fedsample.make_sampler(names[r % 5]), seed=r // 5) for r in range(runs)]
    config = TrainingConfig(
        rounds=rounds,
        num_sampled=sc["m"],
        local_steps=sc["steps"],
        batch_size=sc["batch"],
        local_lr=LR,
        eval_every=10**6,
        backend=backend,  # type: ignore[arg-type]
    )
    simulate(data, spec, specs, TrainingConfig(**{**config.__dict__, "rounds": 1}))  # warm-up
    results = simulate(data, spec, specs, config)
    return float(np.median(results[0].history.round_seconds))


def _measure(name: str, rounds: int, scenario: str, queue: Any) -> None:
    if name == "papers-loop":
        seconds = papers_loop(rounds, dataloader=True, scenario=scenario)
    elif name == "tight-loop":
        seconds = papers_loop(rounds, dataloader=False, scenario=scenario)
    elif name == "sequential":
        seconds = fedsample_round(rounds, "sequential", 1, scenario)
    elif name == "batched":
        seconds = fedsample_round(rounds, "batched", 1, scenario)
    else:
        seconds = fedsample_round(rounds, "batched", 15, scenario)
    queue.put((seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))


def measure(name: str, rounds: int, scenario: str) -> tuple[float, float]:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_measure, args=(name, rounds, scenario, queue))
    proc.start()
    out = queue.get()
    proc.join()
    return out  # type: ignore[no-any-return]


def report(scenario: str, rounds: int, probe: float) -> dict[str, Any]:
    sc = SCENARIOS[scenario]
    data = sc["data"]()
    sizes = np.diff(data.train_indptr)
    hidden = sc["hidden"]
    widths = [sc["features"], hidden, sc["classes"]] if hidden else [sc["features"], sc["classes"]]
    forward_flops = sum(2 * a * b for a, b in itertools.pairwise(widths))
    # Useful training work of one round: 3x the forward FLOPs of every sample processed, for m
    # clients of the scenario's mean size (a client with fewer than B samples uses them all).
    per_step = float(np.mean(np.minimum(sizes, sc["batch"])))
    round_flops = 3 * forward_flops * sc["m"] * sc["steps"] * per_step
    print(f"\n{sc['title']}")
    print(
        f"useful work per round: {round_flops / 1e9:.3f} GFLOP; medians over {rounds} rounds, each in its own process"
    )
    rows: dict[str, dict[str, float]] = {}
    for name, runs in [("papers-loop", 1), ("tight-loop", 1), ("sequential", 1), ("batched", 1), ("batched x15", 15)]:
        seconds, rss = measure(name, rounds, scenario)
        rows[name] = {"seconds": seconds, "runs": runs, "rss_mb": rss}
    base = rows["papers-loop"]["seconds"]
    tight = rows["tight-loop"]["seconds"]
    header = f"{'configuration':<14}{'s/round':>10}{'rounds/s':>10}{'vs papers':>11}{'vs tight':>10}"
    print(header + f"{'GFLOP/s':>9}{'of probe':>10}{'peak MB':>9}")
    for name, row in rows.items():
        per_run = row["seconds"] / row["runs"]  # seconds per run-round
        gflops = round_flops / per_run / 1e9
        row.update(speedup_papers=base / per_run, speedup_tight=tight / per_run, gflops=gflops)
        print(
            f"{name:<14}{row['seconds']:>10.4f}{1 / per_run:>10.2f}{base / per_run:>10.2f}x{tight / per_run:>9.2f}x"
            f"{gflops:>9.2f}{gflops / probe:>9.0%}{row['rss_mb']:>9.0f}"
        )
    return {"round_gflop": round_flops / 1e9, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds per configuration (default 15)")
    parser.add_argument("--scenario", choices=(*SCENARIOS, "all"), default="all")
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    args = parser.parse_args()
    probe = matmul_probe()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; matmul probe {probe:.1f} GFLOP/s (fp32)")
    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    out = {name: report(name, args.rounds, probe) for name in names}
    if args.json:
        print(json.dumps({"probe_gflops": probe, "scenarios": out}))


if __name__ == "__main__":
    main()
