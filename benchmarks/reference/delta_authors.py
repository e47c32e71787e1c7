"""L3030/DELTA_FL's practical DELTA update as released, replayed on given rounds (issue 28, item 1).

Runs in the side environment of ``make_env_selectors.sh delta`` (torch, numpy)::

    $REF/venv-delta/bin/python benchmarks/reference/delta_authors.py --input rounds.json --output out.json

The released ``Femnist and CIfar-10/local_update.py`` (commit ``bc8e3a7``) imports the authors'
whole training stack at module level (torchvision, their data splitter, a loss module absent from the
repository), so this driver reads the method ``FedTrain.reweight_prac`` out of the file's syntax tree,
unmodified, and calls it as the released ``run`` loop does after each round:
``P = self.reweight_prac(P, sample_index, client_grads, Ls, t, args)``, with ``P`` starting at
``1/N`` for every client (``run``'s ``P = [1.0/self.N ...]``).

The input (written by ``compare_delta.py``) holds ``num_clients``, ``beta`` and, per round, the
sampled clients in draw order, each one's gradient as a list of per-layer arrays (the released
``local_epoch`` returns the mean of its mini-batch gradients per parameter tensor) and two ``Ls``
entries: ``Ls``, the sample counts fedsample's score weighs with, and ``Ls_batches``, what the released
``run`` feeds (``L = len(data_loader)``, the number of full mini-batches of ``--bs 20`` with
``drop_last=True``). The output holds ``P`` after every round, fed each way, and for the cases with
``beta = 1`` also ``P`` from the FEMNIST script's ``reweight_prac`` (``LEAF/local_update_FEMNIST.py``,
the gradient diversity alone) fed the sample counts.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import pathlib
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

SOURCE_FILE = pathlib.Path("Femnist and CIfar-10") / "local_update.py"
FEMNIST_FILE = pathlib.Path("LEAF") / "local_update_FEMNIST.py"


def authors_reweight(source_dir: pathlib.Path, file: pathlib.Path = SOURCE_FILE) -> Any:
    """``FedTrain.reweight_prac``, compiled from the file's syntax tree (nothing else of it runs)."""
    path = source_dir / file
    tree = ast.parse(path.read_text(), filename=str(path))
    (trainer,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "FedTrain"]
    (method,) = [node for node in trainer.body if isinstance(node, ast.FunctionDef) and node.name == "reweight_prac"]
    namespace: dict[str, Any] = {"torch": torch, "math": math}
    exec(compile(ast.Module(body=[method], type_ignores=[]), str(path), "exec"), namespace)  # as written
    return namespace["reweight_prac"]


def replay(reweight: Any, data: dict[str, Any], counts: str = "Ls") -> list[list[float]]:
    """``P`` after each round of ``data`` fed the ``counts`` (float64 tensors throughout, as the inputs are)."""
    n = int(data["num_clients"])
    args = SimpleNamespace(beta=float(data["beta"]))
    p: list[Any] = [1.0 / n for _ in range(n)]
    history = []
    for t, round_ in enumerate(data["rounds"]):
        grads = [[torch.tensor(np.asarray(layer, dtype=np.float64)) for layer in client] for client in round_["grads"]]
        p = reweight(None, p, list(round_["sample_index"]), grads, list(round_[counts]), t, args)
        history.append([float(x) for x in p])
    return history


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=pathlib.Path, default=pathlib.Path("/tmp/fedsample-reference/delta-src"))
    parser.add_argument("--check-source", type=pathlib.Path, help="only check that the method compiles, then exit")
    parser.add_argument("--input", type=pathlib.Path)
    parser.add_argument("--output", type=pathlib.Path)
    options = parser.parse_args(argv)
    if options.check_source is not None:
        authors_reweight(options.check_source)
        authors_reweight(options.check_source, FEMNIST_FILE)
        source = (options.check_source / "SOURCE.txt").read_text().strip()
        print(f"delta_authors.py: both FedTrain.reweight_prac compile ({source}); torch {torch.__version__}")
        return 0
    if options.input is None or options.output is None:
        parser.error("--input and --output are needed (or --check-source)")
    reweight, femnist = authors_reweight(options.source), authors_reweight(options.source, FEMNIST_FILE)
    cases = json.loads(options.input.read_text())
    out = {
        "torch": torch.__version__,
        "cases": [replay(reweight, case) for case in cases],
        "cases_batches": [replay(reweight, case, "Ls_batches") for case in cases],
        "cases_femnist": [replay(femnist, case) if case["beta"] == 1.0 else None for case in cases],
    }
    options.output.write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
