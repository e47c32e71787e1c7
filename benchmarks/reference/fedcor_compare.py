"""fedsample's ``fedcor`` against Yoruko-Tang/FedCor's released Gaussian process (issue 28, item 3).

Two comparisons, on inputs made up here and handed to both sides:

1. **Selection alone**: ``S`` random embeddings ``X`` (``D x n``), importances and discounts; the
   released ``GPR.Select_Clients`` (rank-one downdates of the dense ``n x n`` covariance, float32)
   against :func:`fedsample.samplers.selectors.fedcor_gp.greedy_selection` (the ``D x D`` posterior, float64).
   Tolerance: the same clients in the same order in every case.
2. **Replay**: ``S`` runs of ``R`` rounds in which the clients' loss changes are drawn from a factor
   model (``K`` groups of correlated clients plus noise, rounded to float32 values so that the released
   code's cast of them to float32 loses nothing). The released process (``fedcor_authors.py``:
   ``Update_Training_Data``, ``Train``, ``Reset_Discount``, ``Update_Discount``, ``Select_Clients`` on
   ``federated_main.py``'s schedule) and fedsample's ``FedCorSampler`` driven through its contract
   (every client's loss reported in the rounds it asks for them) read the same changes and start
   from the same embedding. The released code runs twice: with torch's default dtype float64
   (tolerances: the fitted covariances agree to a relative Frobenius difference of at most 1e-9 after
   every fit, and every round chosen by the process picks the same clients in the same order), and as
   shipped, in float32: its 1000 Adam steps then drift from both float64 fits (Adam normalises the
   float32 rounding in the flat directions of the likelihood into full-size steps); the figures show
   ours against it next to the released code's own float64 run against it (tolerance: ours no
   further from it than 1.5 times the released float64 run is, plus 1e-6).

Run (after ``benchmarks/reference/fedcor_hicsfl_env.sh fedcor``)::

    .venv/bin/python benchmarks/reference/fedcor_compare.py           # 6 replays of 40 rounds, n = 40, m = 4
    .venv/bin/python benchmarks/reference/fedcor_compare.py --quick   # 2 replays

The released code's results are cached under ``$FEDSAMPLE_REFERENCE_DIR/results`` (keyed by the
inputs and the driver's code); a replay costs about 20 s there (torch, one thread), 1 s here.

Exit status 1 when a figure is outside its tolerance.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile
from typing import Any

import numpy as np

from fedsample import Federation, Feedback
from fedsample.samplers import FedCorSampler
from fedsample.samplers.selectors.fedcor_gp import greedy_selection

HERE = pathlib.Path(__file__).resolve().parent
REFERENCE_DIR = pathlib.Path(os.environ.get("FEDSAMPLE_REFERENCE_DIR", "/tmp/fedsample-reference"))
COVARIANCE_TOLERANCE = 1e-9


def selection_cases(count: int, n: int, m: int, dimension: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(1)
    cases = []
    for _ in range(count):
        sizes = rng.integers(10, 200, size=n)
        cases.append(
            {
                "kind": "select",
                "num_clients": n,
                "num_sampled": m,
                "dimension": dimension,
                "history": 10,
                "gamma": 1.0,
                "embedding": (rng.standard_normal((dimension, n)) / np.sqrt(dimension)).tolist(),
                "weights": (sizes / sizes.sum()).tolist(),
                "discount": rng.uniform(0.5, 1.0, size=n).tolist(),
            }
        )
    return cases


def loss_changes(rng: np.random.Generator, n: int, rounds: int, groups: int) -> np.ndarray:
    """``(rounds, n)`` loss changes: ``Delta_t = B z_t + noise`` with clients in ``groups`` groups."""
    membership = rng.integers(0, groups, size=n)
    loadings = np.zeros((n, groups))
    loadings[np.arange(n), membership] = rng.uniform(0.5, 1.5, size=n)
    factors = rng.normal(-0.3, 1.0, size=(rounds, groups))
    out: np.ndarray = (factors @ loadings.T + 0.05 * rng.standard_normal((rounds, n))).astype(np.float32)
    return out.astype(np.float64)


def replay_case(seed: int, n: int, m: int, rounds: int, sampler: FedCorSampler) -> dict[str, Any]:
    rng = np.random.default_rng([2, seed])
    sizes = rng.integers(10, 200, size=n)
    federation = Federation.from_sizes(sizes)
    state = sampler.init(federation, m)
    return {
        "seed": seed,
        "num_clients": n,
        "num_sampled": m,
        "dimension": sampler.dimension,
        "history": sampler.history,
        "gamma": sampler.decay,
        "discount": sampler.discount,
        "warmup": sampler.warmup_rounds,
        "interval": sampler.refit_interval,
        "warmup_iterations": sampler.warmup_iterations,
        "refit_iterations": sampler.refit_iterations,
        "rounds": rounds,
        "weights": federation.importances.tolist(),
        "sizes": sizes.tolist(),
        "embedding": state.embedding.tolist(),
        "changes": {str(t): row.tolist() for t, row in enumerate(loss_changes(rng, n, rounds, groups=4))},
    }


def ours(case: dict[str, Any], sampler: FedCorSampler) -> dict[str, Any]:
    """fedsample's side of a replay: the contract's two-phase loop, losses accumulating the changes."""
    n = int(case["num_clients"])
    federation = Federation.from_sizes(case["sizes"])
    state = sampler.init(federation, int(case["num_sampled"]))
    losses = np.ones(n)
    everyone = np.arange(n)
    rng = np.random.default_rng(case["seed"])
    selections: dict[str, list[int]] = {}
    covariances: dict[str, np.ndarray] = {}
    for t in range(int(case["rounds"])):
        candidates = sampler.draw_candidates(state, everyone, rng)
        ids = candidates.clients
        state = sampler.update(state, Feedback(round=t, selection=candidates, clients=ids, losses=losses[ids]))
        if t - 1 >= sampler.warmup_rounds and sampler.random_round(t - 1):
            x = state.embedding
            covariances[str(t - 1)] = x.T @ x + sampler.noise**2 * np.eye(n)
        sampler.sample(state, rng)
        if not sampler.random_round(t):
            selections[str(t)] = state.planned.tolist()
        else:
            losses = losses + np.asarray(case["changes"][str(t)])
    return {"selections": selections, "covariances": covariances}


def run_authors(cases: list[dict[str, Any]], *, double: bool) -> list[dict[str, Any]]:
    """The released code's results on ``cases`` (float64 or as shipped), cached by input and driver."""
    python = REFERENCE_DIR / "venv-fedcor" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"fedcor_compare.py: no side environment at {python}: run fedcor_hicsfl_env.sh fedcor")
    text = json.dumps(cases)
    key = hashlib.sha256(text.encode() + (HERE / "fedcor_authors.py").read_bytes() + bytes([double])).hexdigest()
    cached = REFERENCE_DIR / "results" / f"fedcor_{'f64' if double else 'f32'}_{key[:12]}.json"
    if not cached.exists():
        cached.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            source = pathlib.Path(tmp) / "in.json"
            source.write_text(text)
            subprocess.run(
                [str(python), str(HERE / "fedcor_authors.py"), "--source", str(REFERENCE_DIR / "fedcor-src")]
                + ["--input", str(source), "--output", str(cached)]
                + (["--double"] if double else []),
                check=True,
            )
    return list(json.loads(cached.read_text())["cases"])


def covariance_gap(first: dict[str, Any], second: dict[str, Any]) -> float:
    """The largest relative Frobenius difference between two runs' fitted covariances (the second's norm)."""
    gaps = [
        np.linalg.norm(np.asarray(first[t]) - np.asarray(sigma)) / np.linalg.norm(np.asarray(sigma))
        for t, sigma in second.items()
    ]
    return float(max(gaps, default=0.0))


def agreement(first: dict[str, Any], second: dict[str, Any], *, ordered: bool) -> tuple[int, int]:
    """Rounds where two runs chose the same clients (in the same order), and the rounds compared."""
    same = sum((a == second[t]) if ordered else (set(a) == set(second[t])) for t, a in first.items())
    return same, len(first)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 replays and 10 selection cases")
    parser.add_argument("--clients", type=int, default=40)
    parser.add_argument("--sampled", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=40)
    options = parser.parse_args(argv)
    runs, selects = (2, 10) if options.quick else (6, 30)
    n, m = options.clients, options.sampled
    sampler = FedCorSampler(warmup_rounds=10, refit_interval=5)
    select = selection_cases(selects, n, m, sampler.dimension)
    replays = [replay_case(seed, n, m, options.rounds, sampler) for seed in range(runs)]
    shipped = run_authors(select + replays, double=False)
    double = run_authors(replays, double=True)
    same_order = 0
    for case, result in zip(select, shipped[: len(select)], strict=True):
        mine = greedy_selection(
            np.asarray(case["embedding"]),
            sampler.noise,
            np.asarray(case["weights"]),
            np.asarray(case["discount"]),
            np.arange(n),
            m,
        )
        same_order += mine.tolist() == result["selections"]["0"]
    gap64 = gap32 = self32 = 0.0
    same64 = same32 = self_same32 = total = 0
    for case, f32, f64 in zip(replays, shipped[len(select) :], double, strict=True):
        mine = ours(case, sampler)
        gap64 = max(gap64, covariance_gap(mine["covariances"], f64["covariances"]))
        gap32 = max(gap32, covariance_gap(mine["covariances"], f32["covariances"]))
        self32 = max(self32, covariance_gap(f64["covariances"], f32["covariances"]))
        same64 += agreement(mine["selections"], f64["selections"], ordered=True)[0]
        same32 += agreement(mine["selections"], f32["selections"], ordered=False)[0]
        self_same32 += agreement(f64["selections"], f32["selections"], ordered=False)[0]
        total += len(f64["selections"])
    rows = [
        (
            "selection alone (as shipped): same clients, same order",
            f"{same_order} of {len(select)}",
            same_order == len(select),
        ),
        (
            "replay vs released in float64: largest relative difference of the fitted covariance",
            f"{gap64:.1e}",
            gap64 <= COVARIANCE_TOLERANCE,
        ),
        (
            "replay vs released in float64: process rounds with the same clients in the same order",
            f"{same64} of {total}",
            same64 == total,
        ),
        (
            "replay vs released as shipped (float32): covariance difference, ours / released float64",
            f"{gap32:.1e} / {self32:.1e}",
            gap32 <= 1.5 * self32 + 1e-6,
        ),
        (
            "replay vs released as shipped (float32): same clients, ours / released float64",
            f"{same32} / {self_same32} of {total}",
            True,
        ),
    ]
    print(
        f"FedCor (Yoruko-Tang/FedCor d941083) vs fedsample's fedcor: n = {n}, m = {m}, {runs} replays of "
        f"{options.rounds} rounds (warm-up {sampler.warmup_rounds}, refit every {sampler.refit_interval}), "
        f"{len(select)} selection cases\n"
    )
    print("| figure | value | within tolerance |")
    print("|---|---:|---|")
    for name, value, ok in rows:
        print(f"| {name} | {value} | {'yes' if ok else 'NO'} |")
    return 0 if all(ok for *_, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
