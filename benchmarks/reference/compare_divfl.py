"""fedsample's DivFL against melodi-lab/divfl's selection on the same made-up federations (issue 25, item 5).

Runs in fedsample's environment::

    .venv/bin/python benchmarks/reference/compare_divfl.py            # 50 clients, m = 10, 30 rounds, 30 seeds
    .venv/bin/python benchmarks/reference/compare_divfl.py --quick    # 10 seeds x 10 rounds

The reference side is ``divfl_authors.py`` in the side environment of ``make_env_selectors.sh divfl``
(run here, its output cached under ``$FEDSAMPLE_REFERENCE_DIR/results``, or read from ``--reference``).
fedsample's side replays each seed's federation (``divfl_population.py``, the same code on both
sides) through the contract: when :func:`fedsample.samplers.two_phase.phase_due` says a first phase
is due, every client reports (its full-batch gradient, or its update after the round's local
training); the round is ``sample`` with the stream ``(seed, SAMPLING, t)``; the selected clients
train and their feedback carries their updates or full-batch gradients at the round's model; the
models are averaged with the selection's weights (``aggregation="size"``: by sample count, as the
authors' ``aggregate``).

Statistics per seed, for each DivFL setting in ``SETTINGS``: DivFL's objective ``G(S_t) / n`` (the
mean distance from each client's current gradient to the nearest selected client's) averaged over
the first 5 and over all rounds, the training loss after the last round, and whether round 0 (the
same model and every client's gradient on both sides: equal inputs) reaches the authors' objective
(the same set, or another at an exact tie: pairs of mutually nearest clients tie in facility
location, and fedsample breaks ties at random where the authors' lazy greedy takes an index order;
the runs then train different clients and part). A statistic passes when the paired mean difference over the
seeds is within ``4 SE + 5% of the authors' mean + 0.01`` (``P(|t_29| > 4) = 4e-4`` per statistic
for two selectors equal in distribution). The exit status is 1 when the authors' configuration
(``representative="gradient"``, with the initial report) is outside its tolerance, 2 on a bad argument.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
from typing import Any

import numpy as np

from fedsample import Federation, Feedback, Selection
from fedsample.rng import Stream, stream_rng
from fedsample.samplers import DivFLSampler
from fedsample.samplers.two_phase import phase_due

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import cached_reference  # noqa: E402
import divfl_population as pop_model  # noqa: E402

# label -> DivFLSampler parameters; the first is the authors' configuration.
SETTINGS: dict[str, dict[str, Any]] = {
    "default: gradient, initial report": {},
    "update, initial report": {"representative": "update"},
    "update, no initial report (before issue 25)": {"representative": "update", "initial_report": False},
    "gradient, no initial report": {"initial_report": False},
}
Z, RELATIVE, FLOOR = 4.0, 0.05, 0.01


def reference_run(options: argparse.Namespace) -> dict[str, Any]:
    """The released side: ``--reference``, a cached run with the same settings and code, or a new run."""
    return cached_reference.reference_run(
        "divfl", "divfl_authors.py", "divfl_population.py", options, "compare_divfl.py"
    )


def fedsample_run(params: dict[str, Any], seed: int, num_clients: int, m: int, rounds: int) -> dict[str, Any]:
    """One seed of fedsample's DivFL with ``params`` through the contract (see the module documentation)."""
    pop = pop_model.population(seed, num_clients)
    sampler = DivFLSampler(**params)
    federation = Federation.from_sizes(pop.sizes)
    state = sampler.init(federation, m)
    latest = pop_model.initial_model(seed)
    everyone = np.arange(num_clients, dtype=np.int64)
    selected_rounds, objectives, losses = [], [], []
    for t in range(rounds):
        phase = phase_due(sampler, state)
        if phase is not None:  # every client reports before the draw
            candidates = Selection(clients=everyone, weights=federation.importances)
            if phase.report == "gradients":
                report = Feedback(
                    round=t,
                    selection=candidates,
                    clients=everyone,
                    gradients=pop_model.gradients(latest, pop, everyone),
                )
            else:
                trained = np.stack([pop_model.train(latest, pop, int(c), seed, t) for c in everyone])
                report = Feedback(round=t, selection=candidates, clients=everyone, updates=trained - latest)
            state = sampler.update(state, report)
        selection = sampler.sample(state, stream_rng(seed, Stream.SAMPLING, t))
        clients, weights = selection.distinct()
        models = np.stack([pop_model.train(latest, pop, int(c), seed, t) for c in clients])
        feedback = Feedback(
            round=t,
            selection=selection,
            clients=clients,
            updates=models - latest if "updates" in sampler.reads else None,
            gradients=pop_model.gradients(latest, pop, clients) if "gradients" in sampler.reads else None,
        )
        objectives.append(pop_model.objective(latest, pop, clients))
        losses.append(pop_model.training_loss(latest, pop))
        selected_rounds.append(clients.tolist())
        latest = weights @ models / weights.sum()
        state = sampler.update(state, feedback)
    return {"seed": seed, "selected": selected_rounds, "objective": objectives, "loss": losses}


SAME_FIRST = "round 0: authors' objective"


def statistics(run: dict[str, Any], authors: dict[str, Any]) -> dict[str, float]:
    """One seed's statistics; the last is 1 when round 0 (every client's gradient known on both sides,
    the same model) reached the authors' objective, a different set at a tie included."""
    objective = np.asarray(run["objective"])
    return {
        "objective, first 5 rounds": float(objective[:5].mean()),
        "objective, all rounds": float(objective.mean()),
        "training loss, last round": float(run["loss"][-1]),
        SAME_FIRST: float(abs(objective[0] - authors["objective"][0]) <= 1e-9 * abs(authors["objective"][0])),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--sampled", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="10 seeds x 10 rounds")
    parser.add_argument("--reference", type=pathlib.Path, help="the output of divfl_authors.py to compare with")
    parser.add_argument("--json", type=pathlib.Path, help="also write the table as JSON")
    options = parser.parse_args(argv)
    if options.quick:
        options.seeds, options.rounds = 10, 10
    start = time.perf_counter()
    reference = reference_run(options)
    authors = reference["runs"]
    settings = reference["settings"]
    n, m, rounds = settings["clients"], settings["sampled"], settings["rounds"]
    print(
        f"DivFL: fedsample vs melodi-lab/divfl ({reference['source'].split(',')[0]}), n = {n}, m = {m}, "
        f"{rounds} rounds, {len(authors)} seeds; tolerance {Z:g} SE + {RELATIVE:.0%} + {FLOOR:g}"
    )
    reference_stats = [statistics(run, run) for run in authors]
    names = list(reference_stats[0])
    print(f"{'':46}" + "".join(f"{name:>34}" for name in names))
    print(
        f"{'authors (selection of fedavg.py, submodular)':46}"
        + "".join(f"{np.mean([s[k] for s in reference_stats]):>34.4f}" for k in names)
    )
    table: dict[str, Any] = {
        "settings": settings,
        "authors": {k: float(np.mean([s[k] for s in reference_stats])) for k in names},
    }
    status = 0
    for index, (label, params) in enumerate(SETTINGS.items()):
        ours = [statistics(fedsample_run(params, run["seed"], n, m, rounds), run) for run in authors]
        cells, verdicts = [], {}
        for k in names:
            diff = np.array([o[k] - r[k] for o, r in zip(ours, reference_stats, strict=True)])
            mean, se = float(diff.mean()), float(diff.std(ddof=1) / np.sqrt(diff.size)) if diff.size > 1 else 0.0
            ref = float(np.mean([r[k] for r in reference_stats]))
            within = abs(mean) <= Z * se + RELATIVE * abs(ref) + FLOOR
            verdicts[k] = {
                "fedsample": float(np.mean([o[k] for o in ours])),
                "difference": mean,
                "se": se,
                "within": within,
            }
            cells.append(f"{verdicts[k]['fedsample']:.4f} ({mean:+.4f}{'' if within else ' !'})")
        print(f"{label:46}" + "".join(f"{c:>34}" for c in cells))
        table[label] = {"params": params, "statistics": verdicts}
        if index == 0 and not all(v["within"] for v in verdicts.values()):
            status = 1
    print(f"('!': outside the tolerance; {time.perf_counter() - start:.1f} s)")
    if options.json is not None:
        options.json.write_text(json.dumps(table, indent=1))
    return status


if __name__ == "__main__":
    raise SystemExit(main())
