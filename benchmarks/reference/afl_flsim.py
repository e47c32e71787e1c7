"""FLSim's HighLoss selector with AFL's parameters, as released, on fixed users (issue 28, item 5).

Runs in the side environment of ``make_env_selectors.sh flsim`` (torch, omegaconf, hydra)::

    $REF/venv-flsim/bin/python benchmarks/reference/afl_flsim.py --draws 20000 --output out.json

FLSim's ``HighLossActiveUserSelector`` (commit ``82b7fb3``) carries Active Federated Learning's three
parameters (Goetz et al. 2019, from the same company): ``fraction_with_zero_prob`` (alpha_1),
``softmax_temperature`` (alpha_2, multiplying the utility), ``fraction_uniformly_random`` (alpha_3),
and ``count_normalization_exponent`` (``e``: the utility is the summed loss over ``n^e``). This driver
loads the selector module as ``flsim_selectors.py`` does and, for each setting, builds the selector
and asks it ``draws`` times for ``m`` users of ``flsim_population``'s users with their losses fixed
(the model never changes, so each call re-evaluates the same losses and the draws are independent
and identically distributed). It records every user's inclusion count and, from FLSim's own
``ActiveUserSelectorUtils.convert_to_probability``, the active draw's probabilities.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
from typing import Any

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import flsim_population as population
from flsim_selectors import DataProvider, Model, load_selector_module

# (alpha_1, alpha_2, alpha_3, e): the paper's values, then sharper ones (FLSim's float32 softmax
# overflows past alpha_2 * utility = 88, which these populations stay below).
SETTINGS = ((0.75, 0.01, 0.1, 0.5), (0.5, 0.2, 0.2, 0.5), (0.0, 2.0, 0.3, 1.0))


def afl_run(module: Any, setting: tuple[float, ...], seed: int, n: int, m: int, draws: int) -> dict[str, Any]:
    zero, temperature, uniform, exponent = setting
    losses, sizes = population.losses(seed, n), population.sizes(seed, n)
    selector = module.HighLossActiveUserSelector(
        user_selector_seed=seed,
        count_normalization_exponent=exponent,
        fraction_with_zero_prob=zero,
        softmax_temperature=temperature,
        fraction_uniformly_random=uniform,
    )
    provider, model = DataProvider(sizes), Model(losses, sizes)
    counts = [0] * n
    for t in range(draws):
        chosen = selector.get_user_indices(
            num_total_users=n, users_per_round=m, data_provider=provider, global_model=model, epoch=t
        )
        for i in chosen:
            counts[int(i)] += 1
    utils = module.ActiveUserSelectorUtils
    utility = utils.normalize_by_sample_count(selector.user_losses, selector.user_sample_counts, exponent)
    probs = utils.convert_to_probability(utility, fraction_with_zero_prob=zero, softmax_temperature=temperature)
    return {"setting": list(setting), "counts": counts, "probabilities": [float(p) for p in probs]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=pathlib.Path, default=pathlib.Path("/tmp/fedsample-reference/flsim-src"))
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--sampled", type=int, default=10)
    parser.add_argument("--draws", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=pathlib.Path)
    options = parser.parse_args(argv)
    module = load_selector_module(options.source)
    start = time.perf_counter()
    n, m = options.clients, options.sampled
    payload = {
        "torch": torch.__version__,
        "source": (options.source / "SOURCE.txt").read_text().strip(),
        "settings": {"clients": n, "sampled": m, "draws": options.draws, "seed": options.seed},
        "runs": [afl_run(module, s, options.seed, n, m, options.draws) for s in SETTINGS],
    }
    payload["seconds"] = time.perf_counter() - start
    text = json.dumps(payload)
    if options.output is None:
        print(text)
    else:
        options.output.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
