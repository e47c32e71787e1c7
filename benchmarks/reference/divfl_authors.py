"""melodi-lab/divfl's client selection as released, on the made-up federation of ``divfl_population.py``.

Runs in the side environment of ``make_env_selectors.sh divfl`` (numpy 1.x)::

    $REF/venv-divfl/bin/python benchmarks/reference/divfl_authors.py --clients 50 --sampled 10 \
        --rounds 30 --seeds 30 --output out.json

The authors' server (``flearn/trainers/fedbase.py``) imports TensorFlow 1.x at module level. Its
selection methods use numpy alone, so this driver reads ``BaseFedarated.select_cl_submod`` and
``BaseFedarated.lazy_greedy`` out of the file's syntax tree, unmodified, and binds them to a small
server object. The round loop is ``flearn/trainers/fedavg.py``'s ``clientsel_algo == 'submodular'``
branch (lines 56-66, 104-121 at commit 4a5b80d) with the TensorFlow model replaced by
``divfl_population``'s numpy one:

* round 0 (``i == 0``): every client's gradient at the global model (``show_grads``, over all its
  data), ``norm_diff`` their pairwise Euclidean distances with a zero diagonal;
* every round: ``select_cl_submod(i, num_clients=m, stochastic_greedy=False)``, i.e. ``lazy_greedy``
  over every client;
* each selected client's ``solve_inner`` returns its gradient at the global model it received (full
  batch, computed before training) and its model after one epoch; the gradient replaces its row of
  ``all_grads`` and its rows of ``norm_diff`` are recomputed;
* the models are averaged weighted by sample count (``aggregate``).

``pairwise_distances`` (scikit-learn) is replaced by the exact norm of the differences. Per round it
records the selected clients (sorted), DivFL's objective ``G(S_t) / n`` at the round's model with every
client's current gradient, and the training loss.
"""

from __future__ import annotations

import argparse
import ast
import json
import pathlib
import sys
import time
from types import MethodType
from typing import Any

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import divfl_population as pop_model

METHODS = ("select_cl_submod", "lazy_greedy")


def authors_methods(source_dir: pathlib.Path) -> dict[str, Any]:
    """``BaseFedarated``'s selection methods, compiled from fedbase.py's syntax tree (nothing else of it runs)."""
    path = source_dir / "flearn" / "trainers" / "fedbase.py"
    tree = ast.parse(path.read_text(), filename=str(path))
    (server,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "BaseFedarated"]
    functions = {node.name: node for node in server.body if isinstance(node, ast.FunctionDef) and node.name in METHODS}
    if set(functions) != set(METHODS):
        raise SystemExit(f"divfl_authors.py: {path} lacks {sorted(set(METHODS) - set(functions))}")
    namespace: dict[str, Any] = {"np": np}
    module = ast.Module(body=[functions[name] for name in METHODS], type_ignores=[])
    exec(compile(module, str(path), "exec"), namespace)  # the authors' code, as written
    return {name: namespace[name] for name in METHODS}


class Server:
    """What the two methods read from ``self``: ``clients``, ``norm_diff`` and ``all_grads``."""

    def __init__(self, methods: dict[str, Any], num_clients: int) -> None:
        self.clients = list(range(num_clients))
        self.norm_diff = np.zeros((num_clients, num_clients))
        self.all_grads = np.zeros((num_clients, 0))
        for name, function in methods.items():
            setattr(self, name, MethodType(function, self))


def pairwise(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.linalg.norm(a[:, None, :] - b[None, :, :], axis=2)


def run(methods: dict[str, Any], seed: int, num_clients: int, m: int, rounds: int) -> dict[str, Any]:
    pop = pop_model.population(seed, num_clients)
    server = Server(methods, num_clients)
    latest = pop_model.initial_model(seed)
    selected_rounds, objectives, losses = [], [], []
    for i in range(rounds):
        if i == 0 or m == 1:  # fedavg.py line 58: every client's gradient at the first iteration
            server.all_grads = pop_model.gradients(latest, pop, np.arange(num_clients))
            server.norm_diff = pairwise(server.all_grads, server.all_grads)
            np.fill_diagonal(server.norm_diff, 0)
        indices, _, _ = server.select_cl_submod(i, num_clients=m, stochastic_greedy=False)
        indices = np.asarray(indices, dtype=np.int64)
        models = []
        for c in indices:  # solve_inner: the gradient at the received model, then one epoch
            server.all_grads[c] = pop_model.full_gradient(latest, pop, int(c))
            models.append(pop_model.train(latest, pop, int(c), seed, i))
        server.norm_diff[indices] = pairwise(server.all_grads[indices], server.all_grads)
        server.norm_diff[:, indices] = server.norm_diff[indices].T
        objectives.append(pop_model.objective(latest, pop, indices))
        losses.append(pop_model.training_loss(latest, pop))
        selected_rounds.append(sorted(int(c) for c in indices))
        latest = pop_model.aggregate(models, pop.sizes[indices])
    return {"seed": seed, "selected": selected_rounds, "objective": objectives, "loss": losses}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=pathlib.Path, default=pathlib.Path("/tmp/fedsample-reference/divfl-src"))
    parser.add_argument("--check-source", type=pathlib.Path, help="only check that the methods load, then exit")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--sampled", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--output", type=pathlib.Path)
    options = parser.parse_args(argv)
    if options.check_source is not None:
        authors_methods(options.check_source)
        print(
            "side environment ready: numpy",
            np.__version__,
            "| divfl",
            (options.check_source / "SOURCE.txt").read_text().strip(),
        )
        return 0
    methods = authors_methods(options.source)
    start = time.perf_counter()
    runs = [
        run(methods, seed, options.clients, options.sampled, options.rounds)
        for seed in range(options.first_seed, options.first_seed + options.seeds)
    ]
    payload = {
        "settings": {
            k: v for k, v in vars(options).items() if k in ("clients", "sampled", "rounds", "seeds", "first_seed")
        },
        "numpy": np.__version__,
        "source": (options.source / "SOURCE.txt").read_text().strip(),
        "seconds": time.perf_counter() - start,
        "runs": runs,
    }
    text = json.dumps(payload)
    if options.output is None:
        print(text)
    else:
        options.output.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
