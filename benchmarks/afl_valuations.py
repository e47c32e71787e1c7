"""How far AFL's valuation from a first mini-batch is from the loss over all of a client's data (issue 35).

Run in fedsample's environment (no side environment)::

    .venv/bin/python benchmarks/afl_valuations.py            # 20 rounds of MD training first
    .venv/bin/python benchmarks/afl_valuations.py --rounds 5

After its initial evaluation (every client's mean loss over all its data), ``afl`` reads a client's
valuation from ``Feedback.losses``: its mean loss at the global model on its first mini-batch of the
round (``B`` samples), where FLSim's selector and FedCor's AFL port evaluate all of a client's data
(docs/selection-systems.md, "Which loss is the valuation"). On the ``active-and-balanced`` preset's
federation (the embedded digits, 60 clients with Dirichlet(0.1) labels, its MLP, ``B = 10``) this
prints, at a freshly built model and after ``--rounds`` rounds of the preset's MD training, the mean over
the clients of ``E|L_batch - L_all| / L_all`` (a batch of ``B`` of the client's samples drawn without
replacement, all of them for a client with fewer; 400 draws per client, seed 0), and how often the
ranking of two clients by valuation flips (the exclusion and the softmax read the ranking).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys

import numpy as np
import torch

from fedsample.engine import ModelSpec, RunSpec, simulate
from fedsample.experiments.build import build_experiment
from fedsample.experiments.presets import preset_configs
from fedsample.samplers import MDSampler

DRAWS = 400


def per_sample_losses(module: torch.nn.Module, features: np.ndarray, targets: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        logits = module(torch.as_tensor(features))
        losses = torch.nn.functional.cross_entropy(logits, torch.as_tensor(targets), reduction="none")
    return losses.double().numpy()


def report(label: str, losses: list[np.ndarray], batch: int, rng: np.random.Generator) -> None:
    full = np.array([x.mean() for x in losses])
    sampled = np.array(
        [[rng.choice(x, size=min(batch, x.size), replace=False).mean() for _ in range(DRAWS)] for x in losses]
    )
    relative = np.abs(sampled - full[:, None]) / full[:, None]
    # Pairs of clients whose order by valuation (sqrt(n_i) L_i; equal factors cancel per pair only when
    # sizes are equal, so compare the valuations themselves) flips between one draw and all the data.
    sizes = np.array([x.size for x in losses], dtype=np.float64)
    value_full, value_batch = np.sqrt(sizes) * full, np.sqrt(sizes)[:, None] * sampled
    i, j = np.triu_indices(full.size, 1)
    flips = np.mean((value_batch[i] > value_batch[j]) != (value_full[i] > value_full[j])[:, None])
    print(
        f"| {label} | {full.mean():.3f} | {relative.mean():.1%} | {np.median(relative.mean(axis=1)):.1%} | "
        f"{relative.mean(axis=1).max():.1%} | {flips:.1%} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    options = parser.parse_args(argv)
    ((_, config),) = preset_configs("active-and-balanced")
    experiment = build_experiment(config)
    data, spec = experiment.data, experiment.model
    if not isinstance(spec, ModelSpec):  # the preset's MLP
        raise SystemExit("afl_valuations.py: the preset's model is not a ModelSpec")
    training = dataclasses.replace(experiment.training, rounds=options.rounds, eval_every=options.rounds)
    (trained,) = simulate(data, spec, [RunSpec(MDSampler(), seed=0)], training, init_seed=0)
    module = spec.build()
    bounds = np.asarray(data.train_indptr)
    features, targets = np.array(data.train_features), np.array(data.train_targets)  # writable copies
    batch = experiment.training.batch_size
    print(f"active-and-balanced: {bounds.size - 1} clients, B = {batch}, {DRAWS} first batches per client\n")
    print("| model | mean loss | E|L_batch - L_all| / L_all, mean | median client | worst client | pairs flipped |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, params in (("freshly built", None), (f"after {options.rounds} rounds of MD", trained.params)):
        torch.manual_seed(0)
        if params is None:
            module = spec.build()
        else:
            module.load_state_dict({n: torch.as_tensor(v) for n, v in params.items()})
        module.eval()
        losses = [per_sample_losses(module, features[a:b], targets[a:b]) for a, b in itertools.pairwise(bounds)]
        report(label, losses, batch, np.random.default_rng(0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
