"""The workloads of ``bench_engine.py``: the scenarios' data and models, the per-client loops it compares
against, fedsample's round, the matmul probe and the FLOP count (imported as ``from _engine_workloads
import ...``; a script's own folder is first on ``sys.path`` when it runs as ``python benchmarks/NAME.py``).

Each workload is a *runner*: built once in its process (data, model, warm state), then called with a
number of rounds, it trains that many rounds and returns each round's wall seconds.
"""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

NUM_CLIENTS, SAMPLES, FEATURES, CLASSES = 100, 500, 784, 10
M, STEPS, BATCH, HIDDEN, LR = 10, 50, 50, 50, 0.01
IMAGE_CLIENTS, IMAGE_SAMPLES = 100, 64

Runner = Callable[[int], list[float]]


def _federation(x: np.ndarray, y: np.ndarray, indptr: np.ndarray, test_rows: int) -> Any:
    """A federation of the rows ``x``, ``y`` split at ``indptr``, tested on its first ``test_rows`` rows."""
    from fedsample.data import FederatedDataset

    return FederatedDataset(
        train_features=x,
        train_targets=y,
        train_indptr=indptr,
        test_features=x[:test_rows],
        test_targets=y[:test_rows],
        test_indptr=np.minimum(indptr, test_rows),
        num_classes=CLASSES,
    )


def make_data(shape: tuple[int, ...] = (FEATURES,)) -> Any:
    """Paper 000's MNIST shape: 100 clients of 500 samples of 784 features in [0, 1) (each sample of
    ``shape``), one digit per client."""
    rng = np.random.default_rng(0)
    x = rng.random((NUM_CLIENTS * SAMPLES, FEATURES), dtype=np.float32).reshape(-1, *shape)
    # One label per client, as in 000's MNIST split: clients 10j..10j+9 hold digit j.
    y = np.repeat(np.arange(NUM_CLIENTS) // (NUM_CLIENTS // CLASSES), SAMPLES)
    return _federation(x, y, np.arange(0, NUM_CLIENTS * SAMPLES + 1, SAMPLES), 1000)


def make_mnist_images() -> Any:
    """The same federation with each sample as a 1 x 28 x 28 image."""
    return make_data((1, 28, 28))


def make_digits() -> Any:
    from fedsample.data.builders import FederationSpec, build_federation

    return build_federation(FederationSpec(dataset="digits", partition="iid", num_clients=100, test_fraction=0.0))


def make_images() -> Any:
    """100 clients of 64 random 3 x 32 x 32 images, 10 classes, one label mix per client."""
    rng = np.random.default_rng(0)
    rows = IMAGE_CLIENTS * IMAGE_SAMPLES
    x = rng.standard_normal((rows, 3, 32, 32), dtype=np.float32)
    y = rng.integers(0, CLASSES, rows)
    return _federation(x, y, np.arange(0, rows + 1, IMAGE_SAMPLES), 500)


class SmallCNN(nn.Module):
    """A user's small CNN (issue 34): Conv2d(1, 8, 3), ReLU, 2x2 max pooling, a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(8 * 13 * 13, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(torch.relu(self.conv(x))).flatten(1))


class BatchNormCNN(nn.Module):
    """A user's CNN (issue 23): two conv-BatchNorm-ReLU blocks with 2x2 max pooling, dropout, a linear head."""

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


# The settings: paper 000's MNIST round (the issue's target), a small model on the embedded digits,
# where per-step overhead rather than arithmetic dominates, a user's small CNN (issue 34) and a user's
# CNN with BatchNorm and dropout (issue 23).
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
        "data": make_mnist_images,
        "module": SmallCNN,
        "classes": CLASSES,
        "m": 10,
        "steps": 20,
        "batch": 32,
        "title": "a user's small CNN (Conv2d(1,8,3), ReLU, MaxPool 2, Linear) on 1x28x28, 100 clients x 500, "
        "m=10, N=20, B=32",
    },
    "cnn-bn": {
        "data": make_images,
        "module": BatchNormCNN,
        "classes": CLASSES,
        "m": 10,
        "steps": 10,
        "batch": 32,
        "title": "a user's CNN (2 x conv-BN-ReLU-pool, dropout, linear head) on 3x32x32, 100 clients x 64, "
        "m=10, N=10, B=32",
    },
}


def dense(features: int, hidden: int, classes: int) -> nn.Module:
    if not hidden:
        return nn.Sequential(nn.Linear(features, classes))
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))


def module_of(scenario: str) -> nn.Module:
    sc = SCENARIOS[scenario]
    if "module" in sc:
        module: nn.Module = sc["module"]()
        return module
    return dense(sc["features"], sc["hidden"], sc["classes"])


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_probe(device: torch.device, repeats: int = 5) -> float:
    """fp32 GFLOP/s of a square matrix product on ``device`` (1024 on a CPU, 8192 on a GPU; best of ``repeats``)."""
    size = 8192 if device.type == "cuda" else 1024
    a, b = torch.randn(size, size, device=device), torch.randn(size, size, device=device)
    a @ b
    synchronize(device)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(10):
            a @ b
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 10 * 2 * size**3 / best / 1e9


def loop_runner(scenario: str, device: torch.device, *, dataloader: bool) -> Runner:
    """The per-client loop: the papers' (a fresh model copy and ``torch.optim.SGD`` per client, each step's
    batch from ``next(iter(DataLoader(..., shuffle=True)))``) or, without the DataLoader, the tight one
    (batches sliced from in-memory tensors)."""
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
    model = module_of(scenario).to(device)
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
        synchronize(device)

    def run(rounds: int) -> list[float]:
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            one_round()
            times.append(time.perf_counter() - start)
        return times

    return run


SAMPLER_NAMES = ("md", "uniform", "clustered-size", "poisson", "binomial")


def fedsample_runner(
    scenario: str,
    *,
    backend: str = "batched",
    runs: int = 1,
    device: str = "cpu",
    generic: bool = False,
    total_rounds: int = 10_000,
    threads: int | str = "auto",
) -> Runner:
    """fedsample's engine, ``runs`` runs (samplers x seeds) trained together by ONE ``simulate`` call of
    ``total_rounds`` rounds, run in a thread and paused between the runner's calls (in its ``on_round``
    callback, after the round's time was taken): a call of the runner trains the next rounds of that
    simulation. A round's time is the round loop's own (``History.round_seconds``: sampling, local
    training, aggregation, server step and sampler update); the evaluation of the initial model comes
    before the first round, and no other is made before the last round."""
    import queue
    import threading

    import fedsample
    from fedsample.engine import Model, ModelSpec, RunSpec, TrainingConfig, simulate

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
    specs = [RunSpec(fedsample.make_sampler(SAMPLER_NAMES[r % 5]), seed=r // 5) for r in range(runs)]
    config = TrainingConfig(
        rounds=total_rounds,
        num_sampled=sc["m"],
        local_steps=sc["steps"],
        batch_size=sc["batch"],
        local_lr=LR,
        eval_every=10**6,
        backend=backend,  # type: ignore[arg-type]
        device=device,
        threads=threads,
    )
    asked: queue.Queue[int] = queue.Queue()
    done: queue.Queue[list[float] | BaseException] = queue.Queue()
    pending: list[int] = [0]  # rounds still to train in the current call
    times: list[float] = []

    def on_round(report: Any) -> None:
        if report.round == 0:  # the initial model's evaluation: wait for the first call
            pending[0] = asked.get()
            return
        times.append(float(report.rows[0]["round_seconds"]))
        pending[0] -= 1
        if pending[0] == 0:
            done.put(times.copy())
            times.clear()
            if report.round < total_rounds:
                pending[0] = asked.get()

    def train() -> None:
        try:
            simulate(data, model, specs, config, on_round=on_round)
        except BaseException as exc:  # handed to the caller
            done.put(exc)

    threading.Thread(target=train, daemon=True).start()
    used = [0]

    def run(rounds: int) -> list[float]:
        used[0] += rounds
        if used[0] > total_rounds:
            raise ValueError(f"the simulation has {total_rounds} rounds; {used[0]} asked for")
        asked.put(rounds)
        out = done.get()
        if isinstance(out, BaseException):
            raise out
        return out

    return run


def fedsample_round(
    rounds: int, backend: str, runs: int, scenario: str, *, device: str = "cpu", generic: bool = False
) -> float:
    """Median seconds per lockstep round of ``runs`` runs trained together, after a one-round warm-up."""
    runner = fedsample_runner(
        scenario, backend=backend, runs=runs, device=device, generic=generic, total_rounds=rounds + 1
    )
    runner(1)
    return float(np.median(runner(rounds)))


def forward_flops(scenario: str) -> float:
    """Multiply-adds x 2 of one sample's forward pass through the scenario's convolutions and linear layers."""
    sc = SCENARIOS[scenario]
    if "module" not in sc:
        hidden = sc["hidden"]
        widths = [sc["features"], hidden, sc["classes"]] if hidden else [sc["features"], sc["classes"]]
        return float(sum(2 * a * b for a, b in itertools.pairwise(widths)))
    module = module_of(scenario).eval()
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


def round_gflop(scenario: str) -> float:
    """Useful training work of one round: 3x the forward FLOPs of every sample processed, for ``m`` clients
    of the scenario's mean size (a client with fewer than B samples uses them all)."""
    sc = SCENARIOS[scenario]
    sizes = np.diff(sc["data"]().train_indptr)
    per_step = float(np.mean(np.minimum(sizes, sc["batch"])))
    return 3 * forward_flops(scenario) * sc["m"] * sc["steps"] * per_step / 1e9
