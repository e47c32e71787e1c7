"""fedsample's FedAU, MIFA, FedVARP and availability processes against IBM/fedau's released code (issue 28).

Run (after ``benchmarks/reference/make_env_fedau.sh``)::

    .venv/bin/python benchmarks/reference/compare_fedau.py            # 30 clients, 300 rounds, 3 processes
    .venv/bin/python benchmarks/reference/compare_fedau.py --quick    # 12 clients, 60 rounds

**Aggregation.** A made-up population of ``n`` clients with availability rates from 0.05 to 0.9 and
updates ``updates[t, i]`` (a client's own direction plus noise drawn anew each round). fedsample's
availability processes (Bernoulli, Markov with ``off_to_on = 0.05``, cyclic with period 20) give who
takes part in each round; every client is asked every round (the ``full`` sampler, equal sizes, so
``p_i = 1/n``). fedsample runs each policy through its round pipeline (``select_participants``,
``settle_participants``; MIFA and FedVARP through the engine's ``memory_step``) and moves a global
vector by the aggregate; the released ``main.py`` replays the same participation and updates in the side
environment (``fedau_authors.py``) under the matching ``-weighting``. The statistic: the largest
``|w_ours - w_released|`` over every round and coordinate, relative to ``max(1, |w_released|)``,
against ``1e-9`` (both sides in float64; MIFA's average is kept incrementally here and recomputed as a
mean each round there).

| fedsample policy | released ``-weighting`` |
| --- | --- |
| ``fedau`` (``fedau_cutoff`` K) | ``adaptive`` (``-k-adaptive`` K) |
| ``renormalise`` | ``average_participating`` |
| ``ignore`` | ``average_all`` |
| ``inverse-probability``, known rates | ``known_prob`` |
| ``mifa`` | ``mifa`` |
| ``fedvarp`` | ``fedvarp`` |

**Availability.** The released ``WorkerSampler``: its Markov transition probabilities for given
``(p, q)`` against :meth:`MarkovAvailability.stationary` (to 1e-15); its Markov paths (4000 chains,
30 rounds, numpy's global stream) against fedsample's chains (hashed) in law: the fraction available
in the last round and the one-step transition frequencies, two-sample z-tests at 4.5 standard errors
(a false alarm below 7e-6 per check); its cyclic windows and paths, started from fedsample's hashed
offset, against :class:`CyclicAvailability` exactly. Exit status 1 when anything is outside tolerance.
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
from fedsample.participation import (
    Availability,
    BernoulliAvailability,
    CyclicAvailability,
    MarkovAvailability,
    Participation,
    select_participants,
    settle_participants,
)
from fedsample.samplers import FullSampler

HERE = pathlib.Path(__file__).resolve().parent
REFERENCE_DIR = pathlib.Path(os.environ.get("FEDSAMPLE_REFERENCE_DIR", "/tmp/fedsample-reference"))
TOLERANCE = 1e-9
Z_LIMIT = 4.5
# (fedsample policy, fedau_cutoff) -> the released -weighting and -k-adaptive.
POLICIES: tuple[tuple[str, int, str], ...] = (
    ("fedau", 100_000, "adaptive:100000"),
    ("fedau", 5, "adaptive:5"),
    ("renormalise", 100_000, "average_participating"),
    ("ignore", 100_000, "average_all"),
    ("inverse-probability", 100_000, "known_prob"),
    ("mifa", 100_000, "mifa"),
    ("fedvarp", 100_000, "fedvarp"),
)


def processes(rates: np.ndarray) -> dict[str, Availability]:
    return {
        "bernoulli": BernoulliAvailability(rates, seed=1),
        "markov": MarkovAvailability.stationary(rates, off_to_on=0.05, seed=2),
        "cyclic": CyclicAvailability(rates, period=20, seed=3),
    }


def ours(availability: Availability, policy: str, cutoff: int, updates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """fedsample's global vector after each round, and who took part (rounds x clients)."""
    rounds, n, d = updates.shape
    sampler = FullSampler()
    federation = Federation.from_sizes(np.full(n, 10))
    state = sampler.init(federation, n)
    p = np.asarray(federation.importances)
    setting = Participation(availability=availability, policy=policy, fedau_cutoff=cutoff)  # type: ignore[arg-type]
    estimator = setting.new_estimator(n)
    memory = new_memory({"w": torch.zeros(1, d, dtype=torch.float64)}, n) if policy in ("mifa", "fedvarp") else None
    w = np.zeros(d)
    trajectory, present = np.zeros((rounds, d)), np.zeros((rounds, n), dtype=bool)
    for t in range(rounds):
        selected = select_participants(sampler, state, setting, seed=0, round=t, num_clients=n)
        present[t, selected.clients] = selected.available
        finite = np.ones(selected.clients.size, dtype=bool)
        settled = settle_participants(
            selected, finite, setting, seed=0, round=t, num_kept=n, estimator=estimator, importances=p
        )
        ids = selected.clients[settled.kept]
        fresh = updates[t, ids]
        if memory is not None:
            delta, memory = memory_step(
                memory,
                {"w": torch.as_tensor(fresh)},
                np.zeros(ids.size, dtype=np.int64),
                ids,
                settled.weights[settled.kept],
                p[ids],
                still_without_kept=policy == "fedvarp",
            )
            w = w + delta["w"][0].numpy()
        else:
            w = w + settled.weights[settled.kept] @ fresh
        trajectory[t] = w
    return trajectory, present


def _two_sample_z(a: np.ndarray, b: np.ndarray) -> float:
    """|mean(a) - mean(b)| in standard errors of the difference (two Bernoulli samples)."""
    pa, pb = a.mean(), b.mean()
    se = np.sqrt(pa * (1 - pa) / a.size + pb * (1 - pb) / b.size)
    return float(abs(pa - pb) / se) if se > 0 else (0.0 if pa == pb else float("inf"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="12 clients, 60 rounds")
    parser.add_argument("--python", type=pathlib.Path, default=REFERENCE_DIR / "venv-fedau" / "bin" / "python")
    parser.add_argument("--source", type=pathlib.Path, default=REFERENCE_DIR / "fedau-src")
    options = parser.parse_args(argv)
    n, rounds, d = (12, 60, 3) if options.quick else (30, 300, 4)
    rng = np.random.default_rng(2024)
    rates = np.linspace(0.05, 0.9, n)
    updates = rng.normal(size=(n, d))[None, :, :] + 0.5 * rng.normal(size=(rounds, n, d))
    models = processes(rates)
    begin = time.perf_counter()
    mine: dict[str, np.ndarray] = {}
    inputs: dict[str, Any] = {"updates": updates}
    for process, availability in models.items():
        for policy, cutoff, released in POLICIES:
            mine[f"{process}|{released}"], present = ours(availability, policy, cutoff, updates)
        inputs[f"participation_{process}"] = present
        inputs[f"rates_{process}"] = availability.probabilities(n)
    inputs["runs"] = np.array(list(mine))
    # Availability checks for the released WorkerSampler.
    cyclic = CyclicAvailability(np.array([0.05, 0.1, 0.125, 0.375, 0.5, 0.9, 0.999]), period=20, seed=4)
    cyclic_rows = [[cyclic.probability[i], 20, cyclic.offsets([i])[0], 120] for i in range(7)]  # type: ignore[index]
    inputs["cyclic"] = np.array(cyclic_rows, dtype=np.float64)
    markov_cases = [(0.1, 0.05), (0.5, 0.05), (0.02, 0.05), (0.3, 0.5)]
    chains, markov_rounds = (1000, 20) if options.quick else (4000, 30)
    inputs["markov"] = np.array([[p, q, chains, markov_rounds, 7 + k] for k, (p, q) in enumerate(markov_cases)])
    ours_seconds = time.perf_counter() - begin
    with tempfile.TemporaryDirectory() as folder:
        given, answer = pathlib.Path(folder) / "in.npz", pathlib.Path(folder) / "out.npz"
        np.savez(given, **inputs)
        begin = time.perf_counter()
        command = [str(options.python), str(HERE / "fedau_authors.py"), "--source", str(options.source)]
        subprocess.run([*command, "--input", str(given), "--output", str(answer)], check=True)
        released_seconds = time.perf_counter() - begin
        with np.load(answer) as archive:
            theirs = {key: archive[key] for key in archive.files}
    failures = 0
    print(f"aggregation: {n} clients, {rounds} rounds, d = {d}; tolerance {TOLERANCE:g} (relative to max(1, |w|))")
    print(f"{'process':<10} {'fedsample policy':<26} {'released -weighting':<24} {'max diff':>10}  ok")
    for key, trajectory in mine.items():
        process, released = key.split("|")
        reference = theirs[f"run:{key}"]
        difference = float(np.max(np.abs(trajectory - reference) / np.maximum(1.0, np.abs(reference))))
        policy = next(f"{p} (K={k})" if p == "fedau" else p for p, k, r in POLICIES if r == released)
        ok = reference.shape == trajectory.shape and difference <= TOLERANCE
        failures += not ok
        print(f"{process:<10} {policy:<26} {released:<24} {difference:>10.2e}  {'yes' if ok else 'NO'}")
    print("\nMarkov transition probabilities (released WorkerSampler vs MarkovAvailability.stationary):")
    for k, (p, q) in enumerate(markov_cases):
        chain = MarkovAvailability.stationary(p, off_to_on=q)
        a, b = theirs["markov_parameters"][k]
        difference = max(abs(a - float(chain.off_to_on)), abs(b - float(chain.on_to_off)))
        path = theirs[f"markov_path_{k}"]
        mine_path = np.array([chain.available(t, np.arange(chains)) for t in range(path.shape[0])])
        z_last = _two_sample_z(path[-1], mine_path[-1])
        z_stay = _two_sample_z(path[1:][path[:-1]], mine_path[1:][mine_path[:-1]])
        z_move = _two_sample_z(path[1:][~path[:-1]], mine_path[1:][~mine_path[:-1]])
        ok = difference <= 1e-15 and max(z_last, z_stay, z_move) < Z_LIMIT
        failures += not ok
        print(
            f"  p={p:<5} q={q:<5} a={a:.6g} b={b:.6g} |diff| {difference:.1e}; z available {z_last:.2f}, "
            f"z on->on {z_stay:.2f}, z off->on {z_move:.2f}  {'yes' if ok else 'NO'}"
        )
    print("\nCyclic windows and paths (released WorkerSampler from fedsample's offset vs CyclicAvailability):")
    on, off = cyclic.windows(np.arange(7))
    for i, (p, cycle, offset, length) in enumerate(cyclic_rows):
        windows_equal = list(theirs["cyclic_windows"][i]) == [on[i], off[i]]
        path = np.array([cyclic.available(t, [i])[0] for t in range(int(length))])
        paths_equal = bool(np.array_equal(path, theirs["cyclic_paths"][i]))
        drawn, inactive = theirs["cyclic_drawn_offsets"][i]
        ok = windows_equal and paths_equal and 0 <= drawn < inactive
        failures += not ok
        print(
            f"  p={p:<6g} C={int(cycle)} windows ({on[i]}, {off[i]}) offset {int(offset)}: "
            f"windows equal {windows_equal}, {int(length)}-round paths equal {paths_equal}  {'yes' if ok else 'NO'}"
        )
    versions = " ".join(str(v) for v in theirs["versions"])
    print(f"\nfedsample side {ours_seconds:.1f}s, released side {released_seconds:.1f}s (torch, numpy {versions})")
    print("all within tolerance" if not failures else f"{failures} outside tolerance")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
