"""Reproduce paper 004's claim: data-level sampling (FedSampling) under log-normal client sizes.

Setting (paper 004, Section 4.1, scaled to embedded data): MNIST-1D (generated, no download) split
over clients whose sizes follow the paper's log-normal law, average size 2 and sigma 4, so most
clients hold one or two samples and a few hold most of the data. The model is an MLP; every
method runs mini-batch SGD (one gradient step per round on the round's samples, the update of 004's
Algorithm 1) with the same step size, the same number of rounds and about the same number ``K``
of sample gradients per round:

* FedSampling at the paper's privacy setting (``M = 300``, ``epsilon = 3``), with the paper's
  per-round estimate of the total size and with our cumulative estimate (the running mean of all
  rounds' unbiased estimates), and a sweep of ``epsilon`` (1, 3, 10, 30 and no privacy);
* two controls for the step length (ours, one change each): no privacy with ``M`` above every
  client (``N~ = N``; with ``M = 300`` clipping makes ``N~`` about 0.63 ``N`` and the weights sum
  to about 1.6), and ``epsilon = 3`` with the weights normalised to sum to one;
* paper 004's naive data-level variants at the fixed rate ``K / N`` (weighted and plain averaging);
* client-level sampling of ``m = K / mean size`` clients: FedAvg with uniform client sampling and
  the sampled clients' weights normalised to one (McMahan et al.'s practice, 004's "FedAvg"),
  uniform sampling with unbiased weights, and MD sampling (004's "weighted client sampling");
* the centralized baseline: SGD on the pooled data with ``K`` samples per round.

Run: ``python experiments/fedsampling_lognormal.py`` (about an hour on 2 cores; ``--quick`` for a
one-minute smoke run). Every method runs at the step sizes ``--lrs`` and keeps the one of its lowest
median final training objective (the paper tuned on a validation set). It writes
``docs/figures/fedsampling_lognormal.png`` and ``docs/figures/fedsampling_lognormal.json`` and
prints Markdown tables.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import mannwhitneyu

import fedsample
from fedsample.data.builders import FederationSpec, build_federation
from fedsample.engine import MiniBatchSGD, ModelSpec, RunSpec, TrainingConfig, simulate, simulate_centralized
from fedsample.privacy import epsilon_of
from fedsample.samplers.schemes.fedsampling import FedSamplingSampler, estimate_moments, estimate_total

CENTRALIZED = "centralized"


def methods(target: int, num_sampled: int, total: int) -> dict[str, tuple[str, dict[str, Any]]]:
    """label -> (registry name, hyperparameters) of every federated method of the comparison."""
    fedsampling = {"target_samples": target, "size_threshold": 300}
    rate = min(1.0, target / total)
    return {
        "FedSampling eps=3 (paper)": ("fedsampling", fedsampling | {"epsilon": 3.0}),
        "FedSampling eps=3, cumulative estimate": (
            "fedsampling",
            fedsampling | {"epsilon": 3.0, "estimate": "cumulative"},
        ),
        "FedSampling eps=1": ("fedsampling", fedsampling | {"epsilon": 1.0}),
        "FedSampling eps=10": ("fedsampling", fedsampling | {"epsilon": 10.0}),
        "FedSampling eps=30": ("fedsampling", fedsampling | {"epsilon": 30.0}),
        "FedSampling no privacy": ("fedsampling", fedsampling | {"probability": 1.0}),
        "FedSampling no privacy, no clipping": (
            "fedsampling",
            fedsampling | {"probability": 1.0, "size_threshold": 1_000_000},
        ),
        "FedSampling eps=3, normalized": ("fedsampling", fedsampling | {"epsilon": 3.0, "normalize": True}),
        "naive fixed rate, weighted": ("fixed-rate", {"rate": rate, "aggregation": "weighted"}),
        "naive fixed rate, averaged": ("fixed-rate", {"rate": rate, "aggregation": "average"}),
        "FedAvg, uniform clients": ("fedavg-uniform", {"normalize": True}),
        "uniform clients, unbiased weights": ("uniform", {}),
        "MD (weighted clients)": ("md", {}),
    }


def run(args: argparse.Namespace, lr: float) -> dict[str, Any]:
    data = build_federation(
        FederationSpec(
            dataset="mnist1d",
            partition="lognormal",
            num_clients=args.clients,
            num_samples=args.samples,
            lognormal_sigma=4.0,
            seed=0,
        )
    )
    sizes = data.train_sizes()
    total = int(sizes.sum())
    num_sampled = max(1, round(args.target * data.num_clients / total))
    model = ModelSpec("mlp", data.sample_shape, int(data.num_classes or 1), hidden=args.hidden)
    config = TrainingConfig(
        rounds=args.rounds,
        num_sampled=num_sampled,
        local_steps=1,
        batch_size=args.batch_size,
        local_lr=lr,
        algorithm=MiniBatchSGD(),
        eval_every=max(1, args.rounds // 40),
    )
    table = methods(args.target, num_sampled, total)
    runs = [
        RunSpec(fedsample.make_sampler(name, **params), seed=seed, label=label)
        for label, (name, params) in table.items()
        for seed in range(args.seeds)
    ]
    results = simulate(data, model, runs, config, init_seed=0)
    curves: dict[str, dict[str, list[list[float]]]] = {}
    privacy: dict[str, Any] = {}
    rounds_axis: list[int] = []
    for result in results:
        history = result.history
        rounds_axis = [int(r) for r in history.eval_rounds]
        entry = curves.setdefault(str(history.label), {"train_loss": [], "test_accuracy": [], "weight_sum": []})
        entry["train_loss"].append([float(v) for v in history.train_loss])
        entry["test_accuracy"].append([float(v) for v in history.test_accuracy])
        entry["weight_sum"].append([float(v) for v in history.weight_sum])
        sampler = next(r.sampler for r in runs if r.label == history.label)
        if isinstance(sampler, FedSamplingSampler) and history.label not in privacy:
            privacy[str(history.label)] = sampler.privacy(result.sampler_state).to_dict()
    for seed in range(args.seeds):
        result = simulate_centralized(data, model, config, samples_per_round=args.target, seed=seed, init_seed=0)
        entry = curves.setdefault(CENTRALIZED, {"train_loss": [], "test_accuracy": [], "weight_sum": []})
        entry["train_loss"].append([float(v) for v in result.history.train_loss])
        entry["test_accuracy"].append([float(v) for v in result.history.test_accuracy])
        entry["weight_sum"].append([1.0] * args.rounds)
    fed = data.federation()
    return {
        "federation": {
            "clients": data.num_clients,
            "train_samples": total,
            "mean_size": total / data.num_clients,
            "max_size": int(sizes.max()),
            "median_size": float(np.median(sizes)),
            "share_of_largest_1pct": float(np.sort(fed.sizes)[::-1][: max(1, data.num_clients // 100)].sum() / total),
            "test_samples": int(data.test_sizes().sum()),
        },
        "num_sampled": num_sampled,
        "rounds": rounds_axis,
        "curves": curves,
        "privacy": privacy,
        "estimate_noise": estimate_noise(fed.sizes, args.target),
    }


def estimate_noise(sizes: np.ndarray, target: int) -> dict[str, dict[str, float | None]]:
    """Relative standard deviation of the one-round estimate ``N~`` and of the keep rate, per epsilon."""
    out: dict[str, dict[str, float | None]] = {}
    rng = np.random.default_rng(0)
    for eps in (1.0, 3.0, 10.0, 30.0, math.inf):
        sampler = fedsample.make_sampler(
            "fedsampling", target_samples=target, **({"probability": 1.0} if math.isinf(eps) else {"epsilon": eps})
        )
        state = sampler.init(fedsample.Federation.from_sizes(sizes), 1)
        draws = np.array(
            [estimate_total(sampler.answers(state, rng), state.response_probability, 300) for _ in range(400)]
        )
        rates = np.array([sampler.rate(d, state)[0] for d in draws])
        _, variance = estimate_moments(sizes, state.response_probability, 300)
        out["inf" if math.isinf(eps) else f"{eps:g}"] = {
            "alpha": state.response_probability,
            "epsilon": None if math.isinf(eps) else epsilon_of(state.response_probability, 300),
            "estimate_mean_over_N": float(draws.mean() / sizes.sum()),
            "estimate_sd_over_N": float(draws.std(ddof=1) / sizes.sum()),
            "estimate_exact_sd_over_N": math.sqrt(variance) / float(sizes.sum()),
            "share_clamped": float(np.mean((draws < sizes.size) | (draws > 299 * sizes.size))),
            "rate_mean_over_K_N": float(rates.mean() / (target / sizes.sum())),
        }
    return out


def summarize(curves: dict[str, dict[str, list[list[float]]]], tail: int) -> dict[str, dict[str, Any]]:
    """Final numbers per method: test accuracy averaged over the last ``tail`` evaluations, final loss."""
    out: dict[str, dict[str, Any]] = {}
    for label, entry in curves.items():
        acc = np.asarray(entry["test_accuracy"])[:, -tail:].mean(axis=1)
        loss = np.asarray(entry["train_loss"])[:, -1]
        out[label] = {
            "test_accuracy": [float(v) for v in acc],
            "train_loss": [float(v) for v in loss],
            "accuracy_mean": float(acc.mean()),
            "accuracy_std": float(acc.std(ddof=1)) if acc.size > 1 else 0.0,
            "loss_median": float(np.median(loss)),
            "mean_weight_sum": float(np.mean(entry["weight_sum"])),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=16000, help="MNIST-1D samples generated (train and test)")
    parser.add_argument("--clients", type=int, default=5000, help="clients (mean train size about 2.7)")
    parser.add_argument("--target", type=int, default=256, help="K, sample gradients per round")
    parser.add_argument("--batch-size", type=int, default=64, help="cap on one client's mini-batch (client-level)")
    parser.add_argument("--rounds", type=int, default=600)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--lrs", default="0.3,1,1.6,2.5", help="step sizes tried; each method keeps its best")
    parser.add_argument("--hidden", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="a small smoke run (few rounds and seeds, one lr)")
    parser.add_argument("--out", default="docs/figures", help="directory of the figure and the JSON numbers")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.seeds, args.samples, args.clients, args.lrs = 60, 2, 4000, 1200, "0.3"
    lrs = [float(v) for v in args.lrs.split(",")]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    start = time.perf_counter()
    tail = 5
    outcomes = {lr: run(args, lr) for lr in lrs}
    seconds = time.perf_counter() - start
    summaries = {lr: summarize(outcome["curves"], tail) for lr, outcome in outcomes.items()}
    labels = list(summaries[lrs[0]])
    # Each method keeps the step size of its lowest median final *training* objective (no test-set selection).
    best_lr = {label: min(lrs, key=lambda lr, label=label: summaries[lr][label]["loss_median"]) for label in labels}
    summary = {label: summaries[best_lr[label]][label] | {"lr": best_lr[label]} for label in labels}
    curves = {label: outcomes[best_lr[label]]["curves"][label] for label in labels}
    outcome = outcomes[lrs[0]]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rounds = np.asarray(outcome["rounds"])
    figure, axes = plt.subplots(1, 3, figsize=(17, 4.6))
    groups = (
        ("FedSampling vs client sampling", lambda k: "eps=" not in k or "(paper)" in k or "cumulative" in k),
        ("privacy budget sweep (FedSampling)", lambda k: k.startswith("FedSampling") or k == CENTRALIZED),
    )
    for ax, (title, keep) in zip(axes[:2], groups, strict=True):
        for label, entry in curves.items():
            if not keep(label):
                continue
            acc = np.asarray(entry["test_accuracy"])
            style = {"color": "black", "linestyle": "--"} if label == CENTRALIZED else {}
            ax.plot(rounds, acc.mean(axis=0), label=f"{label} (lr {best_lr[label]:g})", **style)
        ax.set_title(title)
        ax.set_xlabel("round")
        ax.set_ylabel(f"test accuracy (mean of {args.seeds} seeds)")
        ax.set_ylim(0.3, None)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    noise = outcome["estimate_noise"]
    keys = list(noise)
    axes[2].bar(keys, [noise[k]["estimate_sd_over_N"] for k in keys], color="tab:gray")
    axes[2].set_yscale("symlog", linthresh=1e-3)
    axes[2].set_xlabel("epsilon of one size answer")
    axes[2].set_ylabel("sd of the one-round estimate N~, in units of N")
    axes[2].set_title(f"size-estimate noise ({outcome['federation']['clients']} clients, M = 300)")
    axes[2].grid(alpha=0.3, axis="y")
    fed = outcome["federation"]
    figure.suptitle(
        f"Paper 004 on MNIST-1D: {fed['clients']} clients, log-normal sizes (mean {fed['mean_size']:.2f}, "
        f"sigma 4, largest {fed['max_size']}), K = {args.target}, m = {outcome['num_sampled']}, "
        f"mini-batch SGD, best lr of {lrs} per method"
    )
    figure.tight_layout()
    figure.savefig(out / "fedsampling_lognormal.png", dpi=110)
    payload = {
        "settings": vars(args),
        "seconds": seconds,
        "summary": summary,
        "by_lr": {f"{lr:g}": rows for lr, rows in summaries.items()},
    } | {k: v for k, v in outcome.items() if k != "curves"}
    (out / "fedsampling_lognormal.json").write_text(json.dumps(payload, indent=1, allow_nan=False))
    print(f"done in {seconds:.0f} s; wrote {out / 'fedsampling_lognormal.png'}\n")
    print(f"Federation: {json.dumps(fed)}; m = {outcome['num_sampled']} clients per round at client level.\n")
    print(
        f"Test accuracy, mean of the last {tail} evaluations, mean ± sd over {args.seeds} seeds, at each method's "
        "best step size (lowest median final training objective); final training objective (median).\n"
        "vs FedAvg: two-sided Mann-Whitney U test on the seeds' accuracies against FedAvg's at the 5% level.\n"
    )
    print("| method | lr | test accuracy | vs FedAvg (uniform) | final objective | mean weight sum |")
    print("|---|---|---|---|---|---|")
    fedavg = summary["FedAvg, uniform clients"]["test_accuracy"]
    for label, row in summary.items():
        verdict = ""
        if label != "FedAvg, uniform clients" and args.seeds > 1:
            p = mannwhitneyu(row["test_accuracy"], fedavg, alternative="two-sided").pvalue
            better = row["accuracy_mean"] > float(np.mean(fedavg))
            verdict = "tied" if p >= 0.05 else ("better" if better else "worse")
            verdict += f" (p = {p:.2g})"
        print(
            f"| {label} | {row['lr']:g} | {row['accuracy_mean']:.3f} ± {row['accuracy_std']:.3f} | {verdict} | "
            f"{row['loss_median']:.3f} | {row['mean_weight_sum']:.3f} |"
        )
    if len(lrs) > 1:
        print("\nTest accuracy (mean over seeds) at every step size:\n")
        print("| method | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " |")
        print("|---|" + "---|" * len(lrs))
        for label in labels:
            print(f"| {label} | " + " | ".join(f"{summaries[lr][label]['accuracy_mean']:.3f}" for lr in lrs) + " |")
    print("\nOne-round size estimate (400 draws):\n")
    print("| epsilon | alpha | mean N~/N | sd N~/N | exact sd N~/N | share clamped | mean rate / (K/N) |")
    print("|---|---|---|---|---|---|---|")
    for key, row in noise.items():
        print(
            f"| {key} | {row['alpha']:.4f} | {row['estimate_mean_over_N']:.3f} | {row['estimate_sd_over_N']:.3f} | "
            f"{row['estimate_exact_sd_over_N']:.3f} | {row['share_clamped']:.2f} | {row['rate_mean_over_K_N']:.2f} |"
        )


if __name__ == "__main__":
    main()
