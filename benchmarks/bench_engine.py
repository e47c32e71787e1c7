"""The engine's round timed for every way of running it, in one run: the papers' models and a user's CNN.

Settings:

* ``mnist-mlp``: paper 000's MNIST round, 100 clients of 500 MNIST-shaped samples (784 features,
  10 classes, generated in memory), m = 10 clients per round, N = 50 local SGD steps of batch B = 50,
  MLP 784-50-10;
* ``digits-softmax``: a softmax regression on the embedded digits with clients of ~18 samples, where
  batching the runs of a comparison together pays;
* ``user-cnn``: a user's own ``nn.Module`` (issue 23): two conv-BatchNorm-ReLU blocks (16 and 32
  channels, 3x3, each followed by 2x2 max pooling), dropout 0.25 and a linear head, on 3 x 32 x 32
  inputs, 100 clients of 64 samples, m = 10, N = 10, B = 32.

Compared, each in a fresh process (so that peak memory is its own):

* ``papers-loop``: the per-client loop of the papers' released code: for each client a fresh
  model copy (``deepcopy``) and ``torch.optim.SGD``, and each step's batch taken with
  ``next(iter(DataLoader(client_data, batch_size=B, shuffle=True)))``;
* ``tight-loop``: the same loop without the DataLoader (batches sliced from in-memory tensors),
  the fastest plain per-client loop;
* ``sequential``: fedsample's reference backend (``simulate(..., backend="sequential")``);
* ``batched``: fedsample's batched backend (``simulate``); for the dense models the fused kernels,
  which the engine chooses for them;
* ``batched, generic`` (dense models): the same model through the generic ``torch.func`` path
  (``Model(..., fused=False)``), which serves any module;
* ``batched x15``: 5 samplers x 3 seeds trained together by one ``simulate`` call.

Reported: rounds per second (aggregate over runs for x15), the speed-up against the papers' loop
and the tight loop, effective GFLOP/s (3x the forward FLOPs of every sample processed: the usual
training estimate), their fraction of a fp32 matmul throughput probe on the same device (the
physical floor), and peak host memory (max RSS). Targets: ``mnist-mlp`` batched >= 3x the papers'
loop and >= 40% of the probe, batched x15 >= 8x the papers' loop's aggregate rounds per second, the
generic path within 1.3x of the fused kernels (issue 23 item 5; the engine picks the fused kernels
for a dense model itself); ``user-cnn`` batched >= 1.5x the tight loop on the CPU (item 5); on a GPU,
``mnist-mlp`` batched >= 10x the per-client loop (item 4).

Run: ``python benchmarks/bench_engine.py`` (``--rounds``, ``--scenario``, ``--device cuda``, ``--wait spin``).
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import multiprocessing as mp
import os
import resource
import time
from typing import Any

import numpy as np
import torch
from torch import nn

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


IMAGE_CLIENTS, IMAGE_SAMPLES = 100, 64


def make_images() -> Any:
    """100 clients of 64 random 3 x 32 x 32 images, 10 classes, one label mix per client."""
    from fedsample.data import FederatedDataset

    rng = np.random.default_rng(0)
    rows = IMAGE_CLIENTS * IMAGE_SAMPLES
    x = rng.standard_normal((rows, 3, 32, 32), dtype=np.float32)
    y = rng.integers(0, CLASSES, rows)
    indptr = np.arange(0, rows + 1, IMAGE_SAMPLES)
    return FederatedDataset(
        train_features=x,
        train_targets=y,
        train_indptr=indptr,
        test_features=x[:500],
        test_targets=y[:500],
        test_indptr=np.minimum(indptr, 500),
        num_classes=CLASSES,
    )


class UserCNN(nn.Module):
    """A user's CNN: two conv-BatchNorm-ReLU blocks with 2x2 max pooling, dropout, a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.dropout = nn.Dropout(0.25)
        self.head = nn.Linear(32 * 8 * 8, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.dropout(self.features(x).flatten(1)))


def _dense(features: int, hidden: int, classes: int) -> nn.Module:
    if not hidden:
        return nn.Sequential(nn.Linear(features, classes))
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))


# The settings: paper 000's MNIST round (the issue's target), a small model on the embedded digits,
# where per-step overhead rather than arithmetic dominates, and a user's CNN with BatchNorm and dropout.
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
    "user-cnn": {
        "data": make_images,
        "module": UserCNN,
        "classes": CLASSES,
        "m": 10,
        "steps": 10,
        "batch": 32,
        "title": "a user's CNN (2 x conv-BN-ReLU-pool, dropout, linear head) on 3x32x32, 100 clients x 64, "
        "m=10, N=10, B=32",
    },
}


def _module(scenario: str) -> nn.Module:
    sc = SCENARIOS[scenario]
    if "module" in sc:
        module: nn.Module = sc["module"]()
        return module
    return _dense(sc["features"], sc["hidden"], sc["classes"])


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_probe(device: torch.device) -> float:
    """fp32 GFLOP/s of a square matrix product on ``device`` (1024 on a CPU, 8192 on a GPU; best of 5)."""
    size = 8192 if device.type == "cuda" else 1024
    a, b = torch.randn(size, size, device=device), torch.randn(size, size, device=device)
    a @ b
    _synchronize(device)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(10):
            a @ b
        _synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 10 * 2 * size**3 / best / 1e9


def papers_loop(rounds: int, dataloader: bool, scenario: str, device: torch.device) -> float:
    """Median seconds per round of the per-client loop (with or without a DataLoader per step)."""
    from torch.utils.data import DataLoader, TensorDataset

    sc = SCENARIOS[scenario]
    data = sc["data"]()
    num_clients = data.num_clients
    steps, batch, m = sc["steps"], sc["batch"], sc["m"]
    sizes = np.diff(data.train_indptr)
    x = torch.from_numpy(np.array(data.train_features)).to(device)
    y = torch.from_numpy(np.array(data.train_targets)).to(device)
    bounds = data.train_indptr
    clients = [(x[bounds[i] : bounds[i + 1]], y[bounds[i] : bounds[i + 1]]) for i in range(num_clients)]
    loaders = [DataLoader(TensorDataset(cx, cy), batch_size=batch, shuffle=True) for cx, cy in clients]
    generator = torch.Generator().manual_seed(0)
    model = _module(scenario).to(device)
    rng = np.random.default_rng(0)

    def one_round() -> None:
        nonlocal model
        sampled = rng.choice(num_clients, size=m, replace=False)
        locals_ = []
        for k in sampled:
            local = copy.deepcopy(model)
            local.train()
            optimizer = torch.optim.SGD(local.parameters(), lr=LR)
            for _ in range(steps):
                if dataloader:
                    inputs, labels = next(iter(loaders[k]))
                else:
                    idx = torch.randperm(int(sizes[k]), generator=generator)[:batch].to(device)
                    inputs, labels = clients[k][0][idx], clients[k][1][idx]
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(local(inputs), labels).backward()
                optimizer.step()
            locals_.append(local.state_dict())
        new = copy.deepcopy(model)
        with torch.no_grad():  # FedAvg of the parameters and of the floating-point buffers (BatchNorm)
            merged = {
                name: sum(state[name] for state in locals_) / m if value.is_floating_point() else value
                for name, value in new.state_dict().items()
            }
            new.load_state_dict(merged)
        model = new
        _synchronize(device)

    one_round()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        one_round()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def fedsample_round(
    rounds: int, backend: str, runs: int, scenario: str, *, device: str = "cpu", generic: bool = False
) -> float:
    """Median seconds per lockstep round of fedsample's engine for ``runs`` runs trained together."""
    import fedsample
    from fedsample.engine import ModelSpec, RunSpec, TrainingConfig, simulate
    from fedsample.engine.user_model import Model

    sc = SCENARIOS[scenario]
    data = sc["data"]()
    model: Any
    if "module" in sc:
        model = sc["module"]
    else:
        kind = "mlp" if sc["hidden"] else "softmax"
        model = ModelSpec(kind, (sc["features"],), sc["classes"], hidden=sc["hidden"] or 50)
        if generic:  # the same module and initialisation, through torch.func instead of the fused kernels
            model = Model(model.build, name=f"{kind}-generic", initializer=model.init_params, fused=False)
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
        device=device,
    )
    simulate(data, model, specs, TrainingConfig(**{**config.__dict__, "rounds": 1}))  # warm-up
    results = simulate(data, model, specs, config)
    return float(np.median(results[0].history.round_seconds))


def _measure(name: str, rounds: int, scenario: str, device: str, queue: Any) -> None:
    target = torch.device(device)
    if name == "papers-loop":
        seconds = papers_loop(rounds, dataloader=True, scenario=scenario, device=target)
    elif name == "tight-loop":
        seconds = papers_loop(rounds, dataloader=False, scenario=scenario, device=target)
    elif name == "sequential":
        seconds = fedsample_round(rounds, "sequential", 1, scenario, device=device)
    elif name == "batched":
        seconds = fedsample_round(rounds, "batched", 1, scenario, device=device)
    elif name == "batched, generic":
        seconds = fedsample_round(rounds, "batched", 1, scenario, device=device, generic=True)
    else:
        seconds = fedsample_round(rounds, "batched", 15, scenario, device=device)
    queue.put((seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))


def measure(name: str, rounds: int, scenario: str, device: str, wait: str = "shipped") -> tuple[float, float]:
    """Seconds per round and peak MB of one configuration, in a fresh process. The per-client loops run
    with OpenMP's own waiting (its threads spin a while between kernels, then sleep); fedsample runs with
    its thread policy, passive waiting (``wait="shipped"``), or, with ``wait="spin"``, with OpenMP's own
    waiting as the loops do (``GOMP_SPINCOUNT=300000``, libgomp's default spin, set explicitly so that
    fedsample keeps it): the figure of a machine one has to oneself (``OMP_WAIT_POLICY=ACTIVE`` there)."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    saved = {key: os.environ.get(key) for key in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    if not name.endswith("loop") and all(value is None for value in saved.values()):
        if wait == "spin":
            os.environ["GOMP_SPINCOUNT"] = "300000"
        else:
            os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    try:
        proc = ctx.Process(target=_measure, args=(name, rounds, scenario, device, queue))
        proc.start()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
    out = queue.get()
    proc.join()
    return out  # type: ignore[no-any-return]


def forward_flops(scenario: str) -> float:
    """Multiply-adds x 2 of one sample's forward pass through the scenario's convolutions and linear layers."""
    sc = SCENARIOS[scenario]
    if "module" not in sc:
        hidden = sc["hidden"]
        widths = [sc["features"], hidden, sc["classes"]] if hidden else [sc["features"], sc["classes"]]
        return float(sum(2 * a * b for a, b in itertools.pairwise(widths)))
    module = _module(scenario).eval()
    total = 0.0

    def count(layer: nn.Module, _inputs: Any, output: torch.Tensor) -> None:
        nonlocal total
        if isinstance(layer, nn.Conv2d):
            kernel = layer.in_channels // layer.groups * layer.kernel_size[0] * layer.kernel_size[1]
            total += 2.0 * kernel * output[0].numel()
        elif isinstance(layer, nn.Linear):
            total += 2.0 * layer.in_features * layer.out_features

    hooks = [m.register_forward_hook(count) for m in module.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    sample = torch.as_tensor(np.array(sc["data"]().train_features[:1]))
    with torch.no_grad():
        module(sample)
    for hook in hooks:
        hook.remove()
    return total


def report(scenario: str, rounds: int, probe: float, device: str, wait: str = "shipped") -> dict[str, Any]:
    sc = SCENARIOS[scenario]
    data = sc["data"]()
    sizes = np.diff(data.train_indptr)
    # Useful training work of one round: 3x the forward FLOPs of every sample processed, for m
    # clients of the scenario's mean size (a client with fewer than B samples uses them all).
    per_step = float(np.mean(np.minimum(sizes, sc["batch"])))
    round_flops = 3 * forward_flops(scenario) * sc["m"] * sc["steps"] * per_step
    print(f"\n{sc['title']}")
    print(
        f"useful work per round: {round_flops / 1e9:.3f} GFLOP; medians over {rounds} rounds, each in its own process"
    )
    configurations = [("papers-loop", 1), ("tight-loop", 1), ("sequential", 1), ("batched", 1)]
    if "module" not in sc:
        configurations.append(("batched, generic", 1))
    if scenario != "user-cnn":
        configurations.append(("batched x15", 15))
    rows: dict[str, dict[str, float]] = {}
    for name, runs in configurations:
        seconds, rss = measure(name, rounds, scenario, device, wait)
        rows[name] = {"seconds": seconds, "runs": runs, "rss_mb": rss}
    base = rows["papers-loop"]["seconds"]
    tight = rows["tight-loop"]["seconds"]
    header = f"{'configuration':<18}{'s/round':>10}{'rounds/s':>10}{'vs papers':>11}{'vs tight':>10}"
    print(header + f"{'GFLOP/s':>9}{'of probe':>10}{'peak MB':>9}")
    for name, row in rows.items():
        per_run = row["seconds"] / row["runs"]  # seconds per run-round
        gflops = round_flops / per_run / 1e9
        row.update(speedup_papers=base / per_run, speedup_tight=tight / per_run, gflops=gflops)
        print(
            f"{name:<18}{row['seconds']:>10.4f}{1 / per_run:>10.2f}{base / per_run:>10.2f}x{tight / per_run:>9.2f}x"
            f"{gflops:>9.2f}{gflops / probe:>9.0%}{row['rss_mb']:>9.0f}"
        )
    if "batched, generic" in rows:
        ratio = rows["batched, generic"]["seconds"] / rows["batched"]["seconds"]
        print(f"generic torch.func path / fused kernels (which the engine picks for this model): {ratio:.2f}x")
    return {"round_gflop": round_flops / 1e9, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds per configuration (default 15)")
    parser.add_argument("--scenario", choices=(*SCENARIOS, "all"), default="all")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda[:index]")
    parser.add_argument(
        "--wait",
        choices=("shipped", "spin"),
        default="shipped",
        help="fedsample's OpenMP waiting: as shipped (passive) or OpenMP's own spinning, as the loops",
    )
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench_engine.py: --device cuda, but PyTorch sees no CUDA device")
    probe = matmul_probe(device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} threads"
    load = os.getloadavg()
    print(f"torch {torch.__version__}, {args.device} ({where}); matmul probe {probe:.1f} GFLOP/s (fp32)")
    print(f"load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    print(f"fedsample's OpenMP threads: {'passive waiting (as shipped)' if args.wait == 'shipped' else 'spinning'}")
    out = {name: report(name, args.rounds, probe, args.device, args.wait) for name in names}
    if args.json:
        print(json.dumps({"probe_gflops": probe, "device": args.device, "scenarios": out}))


if __name__ == "__main__":
    main()
