"""fedsample's ``delta`` against L3030/DELTA_FL's released ``reweight_prac``, on made-up rounds (issue 28).

Run (after ``benchmarks/reference/make_env_selectors.sh delta``)::

    .venv/bin/python benchmarks/reference/compare_delta.py            # 4 betas x 10 seeds x 30 rounds
    .venv/bin/python benchmarks/reference/compare_delta.py --quick    # 2 seeds x 10 rounds

Each case is a made-up population of ``n = 50`` clients with sizes from 1 to 199; a client's gradient
(two layers, a 3x4 matrix and a bias of 3, as the released ``local_epoch`` returns them per parameter
tensor) is its own fixed direction times a size-dependent scale plus noise drawn anew each round.
fedsample's ``DeltaSampler(replace=False, beta=beta)`` draws the round's ``m = 10`` clients from its
``p`` (successive sampling, the released ``torch.multinomial(P, S, False)``), reads their gradients
as update vectors (``local_lr = local_steps = 1``, so the update is the gradient) and updates ``p``.
The same rounds (clients in draw order, gradients, ``Ls`` = sizes) are replayed by the released
method in the side environment (``delta_authors.py``), whose ``P`` starts at ``1/N`` as in its
``run``. The statistic: the largest absolute difference between the two probability vectors after
any round of any case, against a tolerance of ``1e-12`` (both compute in float64; the released code
sums per-layer squared norms in another order). Exit status 1 when it is exceeded.

Two more comparisons on the same rounds: the FEMNIST script's ``reweight_prac``
(``LEAF/local_update_FEMNIST.py``, the gradient diversity alone) against ``beta = 1`` (checked, ``1e-12``),
and the released method fed what its ``run`` loop feeds, ``Ls`` = the number of full mini-batches
``floor(n_i / 20)`` (``--bs 20``, ``drop_last=True``), against fedsample's ``p`` (measured, not checked:
the relative difference after the last round, and the clients the released ``P`` sets to zero).

A further table measures the **released aggregation weight** at each case's final ``p``: the
released ``IS_communicate`` (``comm_helpers.py``) gives a sampled client ``n_i / (N P_i sum_S n_j)``
while ``sample_clients`` draws without replacement. That weight, written here from the released
formula (the function itself moves models to CUDA and does not run on a CPU), is compared by Monte
Carlo with fedsample's Des Raj weights for the same draw: the largest ``|E[w_i] - lambda_i|`` in
standard errors (4 SE is the 6.3e-5 two-sided false-alarm level per client).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
from typing import Any

import numpy as np

from fedsample import Federation, Feedback, Selection
from fedsample.designs import SuccessiveDesign
from fedsample.samplers import DeltaSampler
from fedsample.samplers.adaptive.osmd import DistributionState

HERE = pathlib.Path(__file__).resolve().parent
REFERENCE_DIR = pathlib.Path(os.environ.get("FEDSAMPLE_REFERENCE_DIR", "/tmp/fedsample-reference"))
SHAPES = ((3, 4), (3,))
TOLERANCE = 1e-12
BETAS = (0.5, 0.0, 1.0, 0.3)
RELEASED_BATCH = 20  # the released --bs


def run_case(seed: int, beta: float, n: int, m: int, rounds: int) -> tuple[dict[str, Any], list[np.ndarray], Any]:
    """fedsample's run of one case: the rounds for the released side, ``p`` after each round, the last state."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 200, size=n)
    dimension = sum(int(np.prod(s)) for s in SHAPES)
    directions = rng.normal(size=(n, dimension)) * (1.0 + np.sqrt(sizes))[:, None] / 10.0
    sampler = DeltaSampler(replace=False, beta=beta)
    federation = Federation.from_sizes(sizes)
    state = sampler.init(federation, m)
    rounds_out, history = [], []
    for t in range(rounds):
        design = sampler.design(state)
        assert isinstance(design, SuccessiveDesign)
        order = design.draw_order(rng)  # the round's clients in draw order
        selection = Selection(clients=order, weights=design.ordered_weights(order))
        vectors = directions[order] + 0.3 * rng.normal(size=(m, dimension))
        sorted_ids = np.argsort(order)
        feedback = Feedback(
            round=t,
            selection=selection,
            clients=order[sorted_ids],
            updates=vectors[sorted_ids],
            local_lr=1.0,
            local_steps=1,
        )
        state = sampler.update(state, feedback)
        history.append(np.array(sampler.probabilities(state)))
        layers = [np.split(v, np.cumsum([int(np.prod(s)) for s in SHAPES])[:-1]) for v in vectors]
        grads = [
            [layer.reshape(shape).tolist() for layer, shape in zip(client, SHAPES, strict=True)] for client in layers
        ]
        batches = sizes[order] // RELEASED_BATCH  # the released run's L: full mini-batches (drop_last)
        rounds_out.append(
            {
                "sample_index": order.tolist(),
                "grads": grads,
                "Ls": sizes[order].tolist(),
                "Ls_batches": batches.tolist(),
            }
        )
    return {"num_clients": n, "beta": beta, "rounds": rounds_out}, history, (federation, state)


def released_bias(federation: Federation, state: DistributionState, draws: int, seed: int) -> tuple[float, float]:
    """Largest ``|E[w_i] - lambda_i|`` in standard errors: the released weight, and fedsample's Des Raj."""
    rng = np.random.default_rng(seed)
    n, p, sizes = federation.num_clients, state.probabilities, federation.sizes.astype(np.float64)
    lam = federation.importances
    sampler = DeltaSampler(replace=False)
    released, ours = np.zeros((draws, n)), np.zeros((draws, n))
    design = sampler.design(state)
    assert isinstance(design, SuccessiveDesign)
    for r in range(draws):
        order = design.draw_order(rng)
        released[r, order] = sizes[order] / (n * p[order] * sizes[order].sum())
        ours[r, order] = design.ordered_weights(order)
    out = []
    for weights in (released, ours):
        mean, se = weights.mean(axis=0), weights.std(axis=0, ddof=1) / np.sqrt(draws)
        out.append(float(np.max(np.abs(mean - lam) / np.maximum(se, 1e-300))))
    return out[0], out[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 seeds x 10 rounds per beta")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--sampled", type=int, default=10)
    options = parser.parse_args(argv)
    seeds, rounds = (2, 10) if options.quick else (10, 30)
    python = REFERENCE_DIR / "venv-delta" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"compare_delta.py: no side environment at {python}: run make_env_selectors.sh delta")
    cases, ours, finals = [], [], []
    for beta in BETAS:
        for seed in range(seeds):
            case, history, final = run_case(seed, beta, options.clients, options.sampled, rounds)
            cases.append(case)
            ours.append(history)
            finals.append(final)
    with tempfile.TemporaryDirectory() as tmp:
        given, got = pathlib.Path(tmp) / "in.json", pathlib.Path(tmp) / "out.json"
        given.write_text(json.dumps(cases))
        subprocess.run(
            [
                *(str(python), str(HERE / "delta_authors.py"), "--source", str(REFERENCE_DIR / "delta-src")),
                *("--input", str(given), "--output", str(got)),
            ],
            check=True,
        )
        released = json.loads(got.read_text())
    print(f"DELTA reweight_prac (L3030/DELTA_FL bc8e3a7, torch {released['torch']}) vs fedsample's delta")
    print(f"n = {options.clients}, m = {options.sampled}, {rounds} rounds, {seeds} seeds per beta\n")
    print("| beta | max abs difference of p over all rounds | tolerance | within |")
    print("|---:|---:|---:|---|")
    worst = 0.0
    for b, beta in enumerate(BETAS):
        diff = 0.0
        for s in range(seeds):
            i = b * seeds + s
            theirs = np.array(released["cases"][i])
            diff = max(diff, float(np.max(np.abs(theirs - np.array(ours[i])))))
        worst = max(worst, diff)
        print(f"| {beta} | {diff:.3g} | {TOLERANCE:g} | {'yes' if diff <= TOLERANCE else 'NO'} |")
    print("\nFEMNIST's reweight_prac (LEAF/local_update_FEMNIST.py: the gradient diversity alone) vs beta = 1:")
    femnist = [np.array(c) for c in released["cases_femnist"] if c is not None]
    beta_one = [np.array(ours[i]) for i, c in enumerate(released["cases_femnist"]) if c is not None]
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(femnist, beta_one, strict=True))
    worst = max(worst, diff)
    print(f"  max abs difference of p over all rounds {diff:.3g} (tolerance {TOLERANCE:g})")
    print(f"\nThe released run's Ls (floor(n_i / {RELEASED_BATCH}), mini-batches) against fedsample's sample counts,")
    print("same rounds: |P_released - p| / p after the last round, over the clients (not checked):")
    print("| beta | mean over clients, mean over seeds | mean, worst seed | max over clients | clients at P = 0 |")
    print("|---:|---:|---:|---:|---:|")
    for b, beta in enumerate(BETAS):
        means, maxima, zeros = [], [], []
        for s in range(seeds):
            i = b * seeds + s
            theirs, mine = np.array(released["cases_batches"][i][-1]), np.array(ours[i][-1])
            relative = np.abs(theirs - mine) / mine
            means.append(float(relative.mean()))
            maxima.append(float(relative.max()))
            zeros.append(int((theirs == 0).sum()))
        print(
            f"| {beta} | {np.mean(means):.0%} | {max(means):.0%} | {max(maxima):.0%} | "
            f"{np.mean(zeros):.1f} of {options.clients} |"
        )
    federation, state = finals[0]
    bias_released, bias_ours = released_bias(federation, state, 20_000, seed=99)
    print("\nAggregation weights at the final p of beta = 0.5, seed 0 (20000 draws without replacement):")
    print(f"  released n_i / (N P_i sum_S n_j): largest |E[w_i] - lambda_i| = {bias_released:.1f} standard errors")
    print(f"  fedsample's Des Raj weights:      largest |E[w_i] - lambda_i| = {bias_ours:.1f} standard errors")
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
