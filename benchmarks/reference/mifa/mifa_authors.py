"""hmgxr128/MIFA_code's MIFA trainers as released, run on given rounds (issue 35, item 1).

Runs in the side environment of ``make_env_mifa.sh`` (torch, numpy)::

    $REF/venv-mifa/bin/python benchmarks/reference/mifa/mifa_authors.py --input rounds.npz --output out.npz

The released ``FDUTrainer`` (``src/trainers/fdu.py``, commit ``c1099d9``: MIFA as its run scripts run it,
``--algo fdu``) and ``FDU_nowait_Trainer`` (``src/trainers/fdu_no_wait.py``: MIFA from an empty memory)
are built and their ``train()`` runs unmodified, with the released ``BaseTrainer``, ``Client``, ``Worker``
and ``GD`` optimizer (whose ``inverse_prop_decay_learning_rate`` makes the learning rate ``eta_0 / (t + 1)``).
What they train on is replaced: the model is a stand-in holding one vector of ``d`` float64 weights
(``choose_model``), ``Worker.local_train`` makes client ``n``'s local solution in round ``t`` the model
it was sent plus the given ``updates[t, n]``, the trainer's ``get_avail_clients`` (the Bernoulli coins
of ``BaseTrainer``) answers the given ``participation[t]``, and the evaluation returns zeros. The model
after every round is recorded (``latest_model`` when the next round asks who is available, and at the end).

The input (written by ``compare_mifa.py``) holds, per availability process ``P``, ``participation_P``
(rounds x clients), the ``updates`` (rounds x clients x d), the initial learning rate ``lr`` and the
``runs`` (``P|fdu`` or ``P|fdu_no_wait``). The output holds each run's model after every round.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import pathlib
import sys
import tempfile
from typing import Any

import numpy as np
import torch

TRAINERS = {
    "fdu": ("src.trainers.fdu", "FDUTrainer"),
    "fdu_no_wait": ("src.trainers.fdu_no_wait", "FDU_nowait_Trainer"),
}


class _Data(torch.utils.data.TensorDataset):
    """A client's stand-in data: one row, and the client's id for the stand-in training."""

    def __init__(self, cid: int) -> None:
        super().__init__(torch.zeros(1, 1), torch.zeros(1, dtype=torch.long))
        self.cid = cid


def run_trainer(
    source: pathlib.Path, kind: str, participation: np.ndarray, updates: np.ndarray, lr: float
) -> np.ndarray:
    """The model after each round of the released ``kind`` trainer on the given rounds."""
    if str(source) not in sys.path:
        sys.path.insert(0, str(source))
    module_name, class_name = TRAINERS[kind]
    module = importlib.import_module(module_name)  # the released trainer module, unmodified
    worker = importlib.import_module("src.models.worker")
    rounds, clients, dimension = updates.shape
    now = {"round": -1}
    trajectory: list[np.ndarray] = []

    class StandIn(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(dimension, dtype=torch.float64))

    def local_train(self: Any, train_dataloader: Any, **_: Any) -> tuple[torch.Tensor, dict[str, float]]:
        given = torch.as_tensor(updates[now["round"], train_dataloader.dataset.cid])
        return self.get_flat_model_params() + given, {"loss": 0.0, "acc": 0.0}

    module.choose_model = lambda options: StandIn()  # type: ignore[attr-defined]  # the name it calls
    worker.Worker.local_train = local_train
    options = {
        "gpu": False, "batch_size": 1, "num_round": rounds, "clients_per_round": clients, "noprint": True,
        "lr": lr, "wd": 0.0, "local_step": 1, "seed": 0,
    }  # fmt: skip
    users = list(range(clients))
    data = {u: _Data(u) for u in users}
    dataset: tuple[Any, ...] = (users, [], data, data, dict.fromkeys(users, 1.0))
    with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stdout(io.StringIO()):
        trainer = getattr(module, class_name)(options, dataset, result_dir=folder)

        def get_avail_clients(seed: int = 1) -> list[Any]:  # the given participation, for the coins
            if seed > 0:
                trajectory.append(trainer.latest_model.detach().clone().numpy())
            now["round"] = seed
            return [c for c in trainer.clients if participation[seed, c.cid]]

        trainer.get_avail_clients = get_avail_clients
        trainer.evaluate_train = trainer.evaluate_test = lambda **_: (0.0, 0.0)
        trainer.train()
        trajectory.append(trainer.latest_model.detach().clone().numpy())
    return np.stack(trajectory)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--source", type=pathlib.Path, default=pathlib.Path("/tmp/fedsample-reference/mifa-src"))
    parser.add_argument("--check-source", type=pathlib.Path, help="only check that the trainers run, then exit")
    parser.add_argument("--input", type=pathlib.Path)
    parser.add_argument("--output", type=pathlib.Path)
    options = parser.parse_args(argv)
    if options.check_source is not None:
        rng = np.random.default_rng(0)
        present, updates = rng.random((6, 2)) < 0.6, rng.normal(size=(6, 2, 2))
        present[0] = True
        for kind in TRAINERS:
            run_trainer(options.check_source.resolve(), kind, present, updates, 0.1)
        source = (options.check_source / "SOURCE.txt").read_text().strip()
        print(f"mifa_authors.py: fdu and fdu_no_wait run ({source}); torch {torch.__version__}, numpy {np.__version__}")
        return 0
    if options.input is None or options.output is None:
        parser.error("--input and --output are needed (or --check-source)")
    with np.load(options.input) as archive:
        data = {key: archive[key] for key in archive.files}
    out: dict[str, np.ndarray] = {}
    for run in data["runs"]:
        process, _, kind = str(run).partition("|")
        out[f"run:{run}"] = run_trainer(
            options.source.resolve(), kind, data[f"participation_{process}"], data["updates"], float(data["lr"])
        )
    out["versions"] = np.array([torch.__version__, np.__version__])
    np.savez(options.output, **out)  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
