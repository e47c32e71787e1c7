"""IBM/fedau's released ``main.py`` (FedAU, MIFA, FedVARP and the baselines), run on given rounds (issue 28, item 2).

Runs in the side environment of ``make_env_fedau.sh`` (torch, numpy)::

    $REF/venv-fedau/bin/python benchmarks/reference/fedau_authors.py --input rounds.npz --output out.npz

``main.py`` (commit ``6e9cce9``) is run as its README runs it (``python3 main.py -weighting NAME ...``, via
``runpy``), unmodified: its loop over the clients, its interval bookkeeping, its weighting and its
aggregation are the released lines. What it trains on is replaced: ``dataset.dataset.load_data``,
``model.model.Model``, ``statistic.collect_stat.CollectStatistics``, ``util.util.data_participation_each_node``
and ``util.util.WorkerSampler`` are stand-ins, and ``torchvision`` (imported by ``config.py`` for transforms
a ``-data fashion`` run never uses) is an empty module. The stand-in model's "training" of client ``n``
in round ``t`` makes its weights the global model's plus the given ``updates[t, n]``; the stand-in
sampler answers ``participation[t, n]``; the statistics writer records ``w_global`` after every round
(``-iters-per-round 1 -iters-per-eval 1``). torch's default dtype is set to float64, so the released
arithmetic runs in double precision (it allocates its memory with ``torch.zeros``).

The input (written by ``compare_fedau.py``) holds, per availability process ``P``, ``participation_P``
(rounds x clients) and ``rates_P`` (the ``known_prob`` probabilities), the ``updates`` (rounds x clients
x d) and the ``runs`` (``P|weighting:K``).
The output holds each run's ``w_global`` after every round, and the released ``WorkerSampler``'s
Markov parameters, cyclic windows and Markov paths for the availability checks (``cyclic`` and
``markov`` entries of the input).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import pathlib
import runpy
import sys
import types
from typing import Any

import numpy as np
import torch

RELEASED_MODULES = ("config", "util", "util.util", "dataset", "dataset.dataset", "statistic")
RELEASED_MODULES += ("statistic.collect_stat", "model", "model.model", "torchvision", "torchvision.transforms")


class _Round:
    """Where main.py's loop is: the round, the client being asked, whether it just trained."""

    round = -1
    node = -1
    trained = False


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(()))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.scale * images.sum()


class _Optimizer:
    def zero_grad(self) -> None:
        pass

    def step(self) -> None:
        _Round.trained = True


def _stand_ins(participation: np.ndarray, updates: np.ndarray, rates: np.ndarray, trajectory: list[Any]) -> dict:
    _, clients, dimension = updates.shape

    class Model:
        def __init__(self, seed: int, step_size: float, **_: Any) -> None:
            self.model = _Net()
            self.loss_fn = lambda output, labels: output
            self.optimizer = _Optimizer()
            self.weight = torch.zeros(dimension)

        def get_weight(self) -> torch.Tensor:
            if _Round.trained:
                _Round.trained = False
                return self.weight + torch.as_tensor(updates[_Round.round, _Round.node])
            return self.weight.clone()

        def assign_weight(self, weight: torch.Tensor) -> None:
            self.weight = weight.clone()

        def update_learning_rate(self, step_size: float) -> None:
            pass

    class SequenceSampler:
        """Stands in for util.util.WorkerSampler: client n takes part in round t iff participation[t, n]."""

        made = 0

        def __init__(self, method: str, participation_prob: float) -> None:
            self.participation_prob = participation_prob
            self.node = SequenceSampler.made
            SequenceSampler.made += 1

        def sample(self) -> bool:
            if self.node == 0:
                _Round.round += 1
            _Round.node = self.node
            return bool(participation[_Round.round, self.node])

    class CollectStatistics:
        def __init__(self, results_eval_file_prefix: str) -> None:
            pass

        def collect_stat_eval(self, seed: int, num_iter: int, model: Any, *loaders_and_weight: Any) -> None:
            trajectory.append(loaders_and_weight[-1].detach().clone().numpy())

    def load_data(dataset: str, path: str, device: str) -> tuple[Any, Any]:
        rows = torch.utils.data.TensorDataset(torch.zeros(16 * clients, 1), torch.zeros(16 * clients, dtype=torch.long))
        return rows, rows

    def data_participation_each_node(data_train: Any, n_nodes: int) -> tuple[dict, np.ndarray]:
        return {n: np.arange(16 * n, 16 * (n + 1)) for n in range(n_nodes)}, rates

    return {
        "Model": Model,
        "SequenceSampler": SequenceSampler,
        "CollectStatistics": CollectStatistics,
        "load_data": load_data,
        "data_participation_each_node": data_participation_each_node,
    }


def _module(name: str, **attributes: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    return module


def _fresh_released(source: pathlib.Path, argv: list[str]) -> Any:
    """Import the released config.py and util/util.py afresh (config.py parses ``argv`` when imported)."""
    for name in RELEASED_MODULES:
        sys.modules.pop(name, None)
    torchvision = _module("torchvision")
    torchvision.transforms = _module("torchvision.transforms")  # type: ignore[attr-defined]
    sys.modules["torchvision"] = torchvision
    sys.modules["torchvision.transforms"] = torchvision.transforms  # type: ignore[attr-defined]
    if str(source) not in sys.path:
        sys.path.insert(0, str(source))
    sys.argv = ["main.py", *argv]
    with contextlib.redirect_stdout(io.StringIO()):
        import util.util as released_util  # the released module, imported here on purpose
    return released_util


def run_main(source: pathlib.Path, data: dict[str, np.ndarray], weighting: str, cutoff: int) -> np.ndarray:
    """``w_global`` after each round of main.py with ``-weighting weighting -k-adaptive cutoff``."""
    participation, updates, rates = data["participation"], data["updates"], data["rates"]
    rounds, clients, _ = updates.shape
    argv = ["-data", "fashion", "-weighting", weighting, "-k-adaptive", str(cutoff), "-iters-total", str(rounds)]
    argv += ["-iters-per-round", "1", "-iters-per-eval", "1", "-total-workers", str(clients), "-gpu", "0"]
    argv += ["-save-checkpoint", "0", "-save-final-model", "0", "-seeds", "1", "-lr-global", "1.0"]
    released_util = _fresh_released(source, argv)
    trajectory: list[Any] = []
    stand_ins = _stand_ins(participation, updates, rates, trajectory)
    released_util.WorkerSampler = stand_ins["SequenceSampler"]
    released_util.data_participation_each_node = stand_ins["data_participation_each_node"]
    sys.modules["dataset"] = _module("dataset")
    sys.modules["dataset.dataset"] = _module("dataset.dataset", load_data=stand_ins["load_data"])
    sys.modules["statistic"] = _module("statistic")
    sys.modules["statistic.collect_stat"] = _module(
        "statistic.collect_stat", CollectStatistics=stand_ins["CollectStatistics"]
    )
    sys.modules["model"] = _module("model")
    sys.modules["model.model"] = _module("model.model", Model=stand_ins["Model"])
    _Round.round, _Round.node, _Round.trained = -1, -1, False
    with contextlib.redirect_stdout(io.StringIO()):
        runpy.run_path(str(source / "main.py"), run_name="__main__")
    return np.stack(trajectory)


def released_processes(source: pathlib.Path, data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The released WorkerSampler's Markov parameters and paths, and its cyclic paths from given offsets."""
    released_util = _fresh_released(source, ["-data", "fashion", "-gpu", "0"])
    sampler = released_util.WorkerSampler
    out: dict[str, np.ndarray] = {}
    # cyclic rows: (p, cycle, offset, rounds); the released sampler draws its offset from numpy's global
    # state at construction; the driver sets it to the given one, so the two paths can be compared.
    paths, windows, drawn = [], [], []
    for p, cycle, offset, rounds in data["cyclic"]:
        np.random.seed(int(offset) + 1)  # noqa: NPY002  (the released sampler draws from numpy's global state)
        worker = sampler(f"cyclic-{int(cycle)}", float(p))
        drawn.append([worker.rounds_to_switch, worker.inactive_rounds])
        worker.rounds_to_switch = int(offset)
        windows.append([worker.active_rounds, worker.inactive_rounds])
        paths.append([worker.sample() for _ in range(int(rounds))])
    out["cyclic_windows"], out["cyclic_paths"] = np.array(windows), np.array(paths, dtype=bool)
    out["cyclic_drawn_offsets"] = np.array(drawn)
    # markov rows: (p, q, chains, rounds, seed): the transition probabilities, and `chains` samplers' paths.
    parameters, markov_paths = [], []
    for p, q, chains, rounds, seed in data["markov"]:
        np.random.seed(int(seed))  # noqa: NPY002  (the released sampler draws from numpy's global state)
        workers = [sampler(f"markov-{q!r}", float(p)) for _ in range(int(chains))]
        parameters.append([workers[0].transition_to_active_prob, workers[0].transition_to_inactive_prob])
        markov_paths.append(np.array([[w.sample() for w in workers] for _ in range(int(rounds))], dtype=bool))
    out["markov_parameters"] = np.array(parameters)
    for k, path in enumerate(markov_paths):
        out[f"markov_path_{k}"] = path
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--source", type=pathlib.Path, default=pathlib.Path("/tmp/fedsample-reference/fedau-src"))
    parser.add_argument("--check-source", type=pathlib.Path, help="only check that main.py runs, then exit")
    parser.add_argument("--input", type=pathlib.Path)
    parser.add_argument("--output", type=pathlib.Path)
    options = parser.parse_args(argv)
    torch.set_default_dtype(torch.float64)
    if options.check_source is not None:
        rng = np.random.default_rng(0)
        tiny = {"participation": rng.random((3, 2)) < 0.5, "updates": rng.normal(size=(3, 2, 2)), "rates": np.ones(2)}
        run_main(options.check_source.resolve(), tiny, "mifa", 100000)
        source = (options.check_source / "SOURCE.txt").read_text().strip()
        print(f"fedau_authors.py: main.py runs ({source}); torch {torch.__version__}, numpy {np.__version__}")
        return 0
    if options.input is None or options.output is None:
        parser.error("--input and --output are needed (or --check-source)")
    source = options.source.resolve()
    with np.load(options.input) as archive:
        data = {key: archive[key] for key in archive.files}
    out: dict[str, np.ndarray] = {}
    for run in data["runs"]:
        process, _, spec = str(run).partition("|")
        weighting, _, cutoff = spec.partition(":")
        case = {
            "participation": data[f"participation_{process}"],
            "updates": data["updates"],
            "rates": data[f"rates_{process}"],
        }
        out[f"run:{run}"] = run_main(source, case, weighting, int(cutoff or 100000))
    out.update(released_processes(source, data))
    out["versions"] = np.array([torch.__version__, np.__version__])
    np.savez(options.output, **out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
