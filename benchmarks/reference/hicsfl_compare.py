"""fedsample's ``hics-fl`` against CityChan/HiCS-FL's released selection (issue 28, item 6).

Made-up rounds after the warm-up, handed to both sides: ``n = 50`` clients (the authors' CIFAR-10
configs), each with a label distribution drawn from a Dirichlet whose concentration is one of the
configs' ``alphas`` ``[0.001, 0.01, 0.1, 0.5, 1]`` (ten clients each), and an output-layer update made
from it (a ``Linear(16, 10)``: the bias moves by ``s (q_i - 1/C)`` and each weight row by the same times
positive activations, plus noise; float32 values). The scale ``s`` puts some cases in each of the two
branches of the released ``cluster_sampling`` (cluster-level sampling while the estimated entropies'
variance is below 0.1, clustered sampling otherwise). The released side is ``hicsfl_authors.py`` (the
authors' methods, unmodified); ours is ``HiCSFLSampler`` at the configs' hyperparameters (``T = 0.001``,
``lambda = 10``, ``gamma = 4``, ``M = 10``, ``m = 10``, 200 rounds, round 20) after reading the same
updates through ``update``.

Figures and tolerances:

* estimated entropies: largest absolute difference at most 1e-5 (float32 row sums over ``T = 0.001``);
* dissimilarities: largest absolute difference at most 1e-3 (float32 cosines through ``arccos``, whose
  slope is unbounded near 1);
* the branch taken: the same in every case;
* the clusters of the cluster-level branch: the same partition (adjusted Rand index 1) in every case;
* how often each client is chosen over ``D`` rounds (``D = 4000``; numpy's global generator there, a
  ``Generator`` here): every client within 4.5 standard errors of the difference (a false alarm below
  7e-6 per client under normality). In the clustered-sampling branch the released allocation of the
  rows shuffles the clients of each group and ours lays them in the tree's leaf order: the rows differ,
  the expected counts ``m p_i`` (Proposition 1 of paper 000) do not, and those are what is compared.

Run (after ``benchmarks/reference/fedcor_hicsfl_env.sh hicsfl``)::

    .venv/bin/python benchmarks/reference/hicsfl_compare.py           # 12 cases
    .venv/bin/python benchmarks/reference/hicsfl_compare.py --quick   # 4 cases, 1000 draws

Exit status 1 when a figure is outside its tolerance.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
from dataclasses import replace
from typing import Any

import numpy as np

from fedsample import Federation, Feedback, Selection
from fedsample.samplers import HiCSFLSampler, adjusted_rand_index

HERE = pathlib.Path(__file__).resolve().parent
REFERENCE_DIR = pathlib.Path(os.environ.get("FEDSAMPLE_REFERENCE_DIR", "/tmp/fedsample-reference"))
ALPHAS = (0.001, 0.01, 0.1, 0.5, 1.0)
N, C, H, M, SAMPLED, EPOCHS, EPOCH = 50, 10, 16, 10, 10, 200, 20
ARGS = {"temp": 0.001, "lambda": 10.0, "gamma": 4.0, "M": M, "frac": SAMPLED / N, "n_clients": N, "epochs": EPOCHS}
PREFIX = 7  # entries of other parameters before the output layer in our update vectors


def make_case(seed: int, scale: float, draws: int) -> dict[str, Any]:
    rng = np.random.default_rng([3, seed])
    alphas = np.repeat(ALPHAS, N // len(ALPHAS))
    labels = np.array([rng.dirichlet(np.full(C, a)) for a in alphas])
    labels = np.nan_to_num(labels, nan=1.0 / C)
    activations = np.abs(rng.normal(0.5, 0.2, size=(N, H)))
    shift = scale * (labels - 1.0 / C)
    weights = shift[:, :, None] * activations[:, None, :] + 0.1 * scale * rng.standard_normal((N, C, H))
    biases = shift + 0.1 * scale * rng.standard_normal((N, C))
    return {
        "seed": seed,
        "scale": scale,
        "num_clients": N,
        "sizes": rng.integers(100, 2000, size=N).tolist(),
        "args": ARGS,
        "epoch": EPOCH,
        "draws": draws,
        "weights": weights.astype(np.float32).tolist(),
        "biases": biases.astype(np.float32).tolist(),
    }


def sampler() -> HiCSFLSampler:
    return HiCSFLSampler(
        num_classes=C,
        output_inputs=H,
        temperature=ARGS["temp"],
        entropy_weight=ARGS["lambda"],
        annealing=ARGS["gamma"],
        horizon=EPOCHS,
        num_clusters=M,
    )


def ours(case: dict[str, Any]) -> dict[str, Any]:
    hics = sampler()
    federation = Federation.from_sizes(case["sizes"])
    state = hics.init(federation, SAMPLED)
    layers = np.concatenate(
        [np.asarray(case["weights"]).reshape(N, C * H), np.asarray(case["biases"]).reshape(N, C)], axis=1
    )
    updates = np.concatenate([np.ones((N, PREFIX)), layers], axis=1)
    everyone = np.arange(N)
    selection = Selection(clients=everyone, weights=np.full(N, 1.0 / N))
    state = hics.update(state, Feedback(round=0, selection=selection, clients=everyone, updates=updates))
    state = replace(state, round=int(case["epoch"]))
    rho = state.angles + hics.entropy_weight * np.abs(state.entropies[:, None] - state.entropies[None, :])
    rng = np.random.default_rng(case["seed"])
    counts = np.zeros(N)
    for _ in range(int(case["draws"])):
        np.add.at(counts, hics.sample(state, rng).clients, 1.0)
    return {
        "entropies": state.entropies,
        "similarity": rho,
        "cluster_branch": bool(np.var(state.entropies) < hics.variance_threshold),
        "labels": state.clusters,
        "counts": counts,
    }


def run_authors(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    python = REFERENCE_DIR / "venv-hicsfl" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"hicsfl_compare.py: no side environment at {python}: run fedcor_hicsfl_env.sh hicsfl")
    with tempfile.TemporaryDirectory() as tmp:
        source, target = pathlib.Path(tmp) / "in.json", pathlib.Path(tmp) / "out.json"
        source.write_text(json.dumps(cases))
        subprocess.run(
            [
                *(str(python), str(HERE / "hicsfl_authors.py"), "--source", str(REFERENCE_DIR / "hicsfl-src")),
                *("--input", str(source), "--output", str(target)),
            ],
            check=True,
        )
        return list(json.loads(target.read_text())["cases"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 cases, 1000 draws each")
    options = parser.parse_args(argv)
    scales = (0.001, 0.002, 0.02, 0.05)
    count, draws = (4, 1000) if options.quick else (12, 4000)
    cases = [make_case(seed, scales[seed % len(scales)], draws) for seed in range(count)]
    theirs = run_authors(cases)
    entropy_gap = similarity_gap = worst_z = 0.0
    same_branch = same_partition = cluster_cases = 0
    branches = []
    for case, released in zip(cases, theirs, strict=True):
        mine = ours(case)
        entropy_gap = max(entropy_gap, float(np.abs(mine["entropies"] - np.asarray(released["entropies"])).max()))
        similarity_gap = max(
            similarity_gap, float(np.abs(mine["similarity"] - np.asarray(released["similarity"])).max())
        )
        same_branch += mine["cluster_branch"] == released["cluster_branch"]
        branches.append("clusters" if released["cluster_branch"] else "rows")
        if released["cluster_branch"]:
            cluster_cases += 1
            same_partition += adjusted_rand_index(mine["labels"], np.asarray(released["labels"])) == 1.0
        d = int(case["draws"])
        f_mine, f_theirs = mine["counts"] / d, np.asarray(released["counts"]) / d
        spread = np.sqrt((f_mine * np.maximum(1 - f_mine, 0) + f_theirs * np.maximum(1 - f_theirs, 0)) / d)
        z = np.abs(f_mine - f_theirs) / np.maximum(spread, 1.0 / d)
        worst_z = max(worst_z, float(z.max()))
    rows = [
        ("estimated entropies: largest absolute difference", f"{entropy_gap:.1e}", entropy_gap <= 1e-5),
        ("dissimilarities: largest absolute difference", f"{similarity_gap:.1e}", similarity_gap <= 1e-3),
        ("branch taken (cluster-level / clustered rows): the same", f"{same_branch} of {count}", same_branch == count),
        (
            "cluster-level branch: the same clusters (ARI = 1)",
            f"{same_partition} of {cluster_cases}",
            same_partition == cluster_cases,
        ),
        ("selection frequencies: largest difference in standard errors", f"{worst_z:.2f}", worst_z <= 4.5),
    ]
    print(
        f"HiCS-FL (CityChan/HiCS-FL 25f309d) vs fedsample's hics-fl: n = {N}, m = {SAMPLED}, M = {M}, "
        f"{count} cases (branches: {', '.join(branches)}), {draws} draws each\n"
    )
    print("| figure | value | within tolerance |")
    print("|---|---:|---|")
    for name, value, ok in rows:
        print(f"| {name} | {value} | {'yes' if ok else 'NO'} |")
    return 0 if all(ok for *_, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
