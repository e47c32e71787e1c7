"""fedsample's ``mifa`` policy against MIFA's own released code, hmgxr128/MIFA_code (issue 35, item 1).

Run (after ``benchmarks/reference/make_env_mifa.sh``)::

    .venv/bin/python benchmarks/reference/mifa/compare_mifa.py            # 30 clients, 300 rounds, 3 processes
    .venv/bin/python benchmarks/reference/mifa/compare_mifa.py --quick    # 12 clients, 80 rounds

The population is ``compare_fedau.py``'s: ``n`` clients with availability rates from 0.05 to 0.9, updates
``updates[t, i]`` (a client's own direction plus noise drawn anew each round), fedsample's Bernoulli,
Markov (``off_to_on = 0.05``) and cyclic (period 20) processes saying who takes part, every client asked
every round (the ``full`` sampler), equal sizes. fedsample runs its round pipeline
(``select_participants``; the released variant's warm-up, ``MemoryWarmup`` and ``warmed_up``;
``settle_participants``; the engine's ``memory_step``) and moves a global vector by the direction; the
released trainers replay the same participation and updates in the side environment (``mifa_authors.py``),
their learning rate starting at ``eta_0 = 0.08`` (their CIFAR script's) and decaying as ``eta_0 / (t + 1)``
over the rounds that train, which fedsample's side is handed round by round.

Checked, against ``1e-9`` (the largest ``|w_ours - w_released|`` over every round and coordinate,
relative to ``max(1, |w_released|)``; both sides in float64):

* ``mifa_variant="released"`` against the released ``fdu`` trainer (``--algo fdu``, what the authors'
  run scripts run): the warm-up, the filling of the memory at the warm-up model, the updates stored
  over the learning rate and the ``1/N`` average.

Measured and printed, not checked (the departures of fedsample's default, docs/failures.md):

* the default ``mifa_variant="zeros"`` against the released ``fdu_no_wait`` trainer (the same memory from
  zero; they differ by the released rescaling of stale updates by the learning rate's decay), and against
  ``fdu`` (what the default changes in the authors' MIFA): the distance of the last round's models,
  ``||w - w_released|| / ||w_released||``;
* the round in which each process's warm-up ends. Exit status 1 when a check is outside tolerance.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np
import torch

from fedsample import Federation
from fedsample.engine.aggregation import memory_step, new_memory
from fedsample.participation import Availability, Participation, select_participants, settle_participants
from fedsample.participation.mifa import MemoryWarmup
from fedsample.participation.procedure import warmed_up
from fedsample.samplers import FullSampler

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from compare_fedau import processes  # type: ignore[import-not-found]  # noqa: E402  (the same processes, seeds)

REFERENCE_DIR = pathlib.Path(os.environ.get("FEDSAMPLE_REFERENCE_DIR", "/tmp/fedsample-reference"))
TOLERANCE = 1e-9
LR = 0.08


def ours(availability: Availability, variant: str, updates: np.ndarray, lr0: float) -> tuple[np.ndarray, int]:
    """fedsample's global vector after each round, and the round that filled the memory (-1: none)."""
    rounds, n, d = updates.shape
    sampler = FullSampler()
    state = sampler.init(Federation.from_sizes(np.full(n, 10)), n)
    setting = Participation(availability=availability, policy="mifa", mifa_variant=variant)  # type: ignore[arg-type]
    warmup = setting.new_estimator(n)
    memory = new_memory({"w": torch.zeros(1, d, dtype=torch.float64)}, n)
    p = np.full(n, 1.0 / n)
    w, trajectory, trained, filled = np.zeros(d), np.zeros((rounds, d)), 0, -1
    for t in range(rounds):
        selected = select_participants(sampler, state, setting, seed=0, round=t, num_clients=n)
        phase = "train"
        if isinstance(warmup, MemoryWarmup):
            phase = warmup.observe(selected.clients, selected.trains)
            selected = warmed_up(selected, phase, n)
            filled = t if phase == "fill" else filled
        finite = np.ones(selected.clients.size, dtype=bool)
        settled = settle_participants(
            selected, finite, setting, seed=0, round=t, num_kept=n, estimator=warmup, importances=p
        )
        ids = selected.clients[settled.kept]
        c = settled.weights[settled.kept]
        delta, memory = memory_step(
            memory,
            {"w": torch.as_tensor(updates[t, ids])},
            np.zeros(ids.size, dtype=np.int64),
            ids,
            c,
            c,
            still_without_kept=False,
            still_runs=[phase == "fill"],
            learning_rate=lr0 / (trained + 1) if variant == "released" else 1.0,
        )
        trained += phase == "train"
        w = w + delta["w"][0].numpy()
        trajectory[t] = w
    return trajectory, filled


def _difference(mine: np.ndarray, reference: np.ndarray) -> float:
    if mine.shape != reference.shape:
        return float("inf")
    return float(np.max(np.abs(mine - reference) / np.maximum(1.0, np.abs(reference))))


def _final_distance(mine: np.ndarray, reference: np.ndarray) -> float:
    """``||w - w_ref|| / ||w_ref||`` of the last round's models."""
    return float(np.linalg.norm(mine[-1] - reference[-1]) / np.linalg.norm(reference[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="12 clients, 80 rounds")
    parser.add_argument("--python", type=pathlib.Path, default=REFERENCE_DIR / "venv-mifa" / "bin" / "python")
    parser.add_argument("--source", type=pathlib.Path, default=REFERENCE_DIR / "mifa-src")
    options = parser.parse_args(argv)
    if not options.python.exists():
        raise SystemExit(f"compare_mifa.py: no side environment at {options.python}: run make_env_mifa.sh")
    n, rounds, d = (12, 80, 3) if options.quick else (30, 300, 4)
    rng = np.random.default_rng(2024)
    rates = np.linspace(0.05, 0.9, n)
    updates = rng.normal(size=(n, d))[None, :, :] + 0.5 * rng.normal(size=(rounds, n, d))
    begin = time.perf_counter()
    mine: dict[str, Any] = {}
    inputs: dict[str, Any] = {"updates": updates, "lr": np.array(LR)}
    for process, availability in processes(rates).items():
        for variant in ("released", "zeros"):
            mine[f"{process}|{variant}"] = ours(availability, variant, updates, LR)
        inputs[f"participation_{process}"] = np.array([availability.available(t, np.arange(n)) for t in range(rounds)])
    inputs["runs"] = np.array([f"{p}|{kind}" for p in processes(rates) for kind in ("fdu", "fdu_no_wait")])
    ours_seconds = time.perf_counter() - begin
    with tempfile.TemporaryDirectory() as folder:
        given, answer = pathlib.Path(folder) / "in.npz", pathlib.Path(folder) / "out.npz"
        np.savez(given, **inputs)
        begin = time.perf_counter()
        command = [str(options.python), str(HERE / "mifa_authors.py"), "--source", str(options.source)]
        subprocess.run([*command, "--input", str(given), "--output", str(answer)], check=True)
        released_seconds = time.perf_counter() - begin
        with np.load(answer) as archive:
            theirs = {key: archive[key] for key in archive.files}
    failures = 0
    print(f"MIFA: hmgxr128/MIFA_code c1099d9 (torch {theirs['versions'][0]}) vs fedsample's mifa policy")
    print(f"{n} clients, {rounds} rounds, d = {d}, eta_0 = {LR}; tolerance {TOLERANCE:g} (relative to max(1, |w|))\n")
    print(
        "| process | filling round | released vs `fdu`, max difference | zeros vs `fdu_no_wait`, final distance "
        "| zeros vs `fdu`, final distance |"
    )
    print("|---|---:|---:|---:|---:|")
    for process in processes(rates):
        released, filled = mine[f"{process}|released"]
        zeros, _ = mine[f"{process}|zeros"]
        fdu, no_wait = theirs[f"run:{process}|fdu"], theirs[f"run:{process}|fdu_no_wait"]
        checked = _difference(released, fdu)
        ok = checked <= TOLERANCE
        failures += not ok
        print(
            f"| {process} | {filled} | {checked:.2e} {'(ok)' if ok else '(OUTSIDE)'} | "
            f"{_final_distance(zeros, no_wait):.3g} | {_final_distance(zeros, fdu):.3g} |"
        )
    print(f"\nfedsample side {ours_seconds:.1f}s, released side {released_seconds:.1f}s")
    print("all within tolerance" if not failures else f"{failures} outside tolerance")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
