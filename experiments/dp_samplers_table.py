"""The table of the ``dp-samplers`` preset (issue 36): accuracy and each sampler's privacy at equal budget.

Run the preset, then read its run directory here::

    fedsample run dp-samplers --full --dataset fashion-mnist -o runs/dp
    python experiments/dp_samplers_table.py runs/dp

For each budget and sampler: the noise multiplier the budget needs (solved again with the accountant
from the run's resolved config, as the run did) and the noise's standard deviation over ``C``
(``z s``), the final and best test accuracy (mean and standard deviation over the seeds), the test
accuracy at the first evaluation where the most exposed client has spent half the budget, and the
worst and median client's epsilon after the last round.
"""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path

import numpy as np

from fedsample.data.builders import FederationSpec, build_federation
from fedsample.experiments.results.metrics import read_metrics
from fedsample.privacy import DPFedAvg, plan_privacy
from fedsample.samplers import make_sampler


def _cell(values: np.ndarray) -> str:
    if values.size > 1:
        return f"{values.mean():.3f} ± {values.std(ddof=1):.3f}"
    return f"{values.mean():.3f}"


def table(directory: Path) -> list[str]:
    """The Markdown rows of one budget's run directory."""
    config = tomllib.loads((directory / "config.toml").read_text())
    metrics = read_metrics(directory)
    federation_spec = FederationSpec(**{k: v for k, v in config["federation"].items()})
    data = build_federation(federation_spec)
    federation = data.federation(importance=config["training"]["importance"])
    entries = config["samplers"]
    samplers = [make_sampler(e["name"], **{k: v for k, v in e.items() if k not in ("name", "label")}) for e in entries]
    settings = DPFedAvg(**config["privacy"])
    plan = plan_privacy(
        settings, federation, samplers, config["training"]["num_sampled"], config["training"]["rounds"],
        [e["label"] for e in entries],
    )  # fmt: skip
    rows = []
    budget = settings.target_epsilon
    for r, entry in enumerate(entries):
        mine = metrics["label"] == entry["label"]
        seeds = np.unique(metrics["seed"][mine])
        final, best, half = [], [], []
        for seed in seeds:
            rows_of = mine & (metrics["seed"] == seed)
            accuracy = metrics["test_accuracy"][rows_of]
            spent = metrics["epsilon_spent"][rows_of]
            evaluated = ~np.isnan(accuracy)
            final.append(accuracy[evaluated][-1])
            best.append(np.nanmax(accuracy))
            reached = evaluated & (spent >= (budget or 0) / 2)
            half.append(accuracy[reached][0] if reached.any() else np.nan)
        cost = plan.costs[r]
        rows.append(
            f"| {budget:g} | {entry['label']} | {plan.noise_multipliers[r]:.3g} | "
            f"{plan.noise_multipliers[r] * plan.scales[r]:.3g} | {_cell(np.array(final))} | "
            f"{_cell(np.array(best))} | {_cell(np.array(half))} | {cost.epsilon_max:.3g} | {cost.epsilon_median:.3g} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path, help="the run directory of the dp-samplers preset")
    arguments = parser.parse_args()
    print(
        "| epsilon | sampler | noise multiplier z | noise std / C (z s) | final test accuracy | best test accuracy | "
        "accuracy at half the budget | worst client epsilon | median client epsilon |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for directory in sorted(arguments.run.glob("eps-*"), key=lambda p: float(p.name.removeprefix("eps-"))):
        print("\n".join(table(directory)))


if __name__ == "__main__":
    main()
