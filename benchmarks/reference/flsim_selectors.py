"""FLSim's HighLoss, NumberOfSamples and Sequential selectors as released, on made-up populations (issue 25).

Runs in the side environment of ``make_env_selectors.sh flsim`` (torch, omegaconf, hydra)::

    $REF/venv-flsim/bin/python benchmarks/reference/flsim_selectors.py --seeds 30 --output out.json

FLSim's selector module ``flsim/active_user_selectors/simple_user_selector.py`` (commit ``82b7fb3``,
the last one holding HighLoss and NumberOfSamples) is imported alone: the packages above it are
registered as empty packages pointing at the extracted files, so their ``__init__`` files, which
import the whole simulator, never run; the module's own imports (``flsim.data.data_provider``,
``flsim.interfaces.model``, ``flsim.utils.config_utils``) are the released files.

* **HighLoss** (``HighLossActiveUserSelector``, ``count_normalization_exponent = 1`` so that the
  utility is the mean loss: the default 0 sums the loss over the samples and its float32 softmax
  overflows past 88): per seed, ``flsim_population.losses`` gives each user a base loss; a user's
  loss at the global model is its base loss times ``DECAY`` per round it has trained. Each round
  FLSim's selector is asked for ``m`` users with the round as ``epoch`` (``epochs_before_active = 0``);
  its first call evaluates every user's loss, every call re-evaluates the selected users' losses at the
  round's model; the selected users then train. Records the picks per round.
* **NumberOfSamples** (``exponent = 1``): ``DRAWS`` draws of ``m`` users on one population of sizes,
  the per-user inclusion counts and the repeated users within a draw (there are none if it draws
  without replacement).
* **Sequential**: the users of each round for ``n = 23``, ``m = 5``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import sys
import time
import types
from typing import Any

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import flsim_population as population


def load_selector_module(source: pathlib.Path) -> types.ModuleType:
    """``flsim.active_user_selectors.simple_user_selector`` from ``source``, without the packages' ``__init__``s."""
    for package in ("flsim", "flsim.active_user_selectors", "flsim.data", "flsim.interfaces", "flsim.utils"):
        module = types.ModuleType(package)
        module.__path__ = [str(source / package.replace(".", "/"))]
        sys.modules[package] = module
    name = "flsim.active_user_selectors.simple_user_selector"
    spec = importlib.util.spec_from_file_location(name, source / "flsim/active_user_selectors/simple_user_selector.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class Metrics:
    def __init__(self, loss: float, num_examples: int) -> None:
        self.loss = torch.tensor(loss, dtype=torch.float)
        self.num_examples = num_examples


class UserData:
    """One user's data as FLSim's HighLoss reads it: a single batch of its ``size`` samples."""

    def __init__(self, user: int, size: int) -> None:
        self.user, self.size = user, size

    def num_train_examples(self) -> int:
        return self.size

    def train_data(self) -> list[int]:
        return [self.user]


class DataProvider:
    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes

    def train_user_ids(self) -> list[int]:
        return list(range(len(self.sizes)))

    def get_train_user(self, user: int) -> UserData:
        return UserData(user, self.sizes[user])


class Model:
    """The global model as HighLoss reads it: a user's mean loss at the current round (``get_eval_metrics``)."""

    def __init__(self, losses: list[float], sizes: list[int]) -> None:
        self.losses, self.sizes = losses, sizes

    def get_eval_metrics(self, batch: int) -> Metrics:
        return Metrics(self.losses[batch], self.sizes[batch])


def high_loss_run(module: types.ModuleType, seed: int, n: int, m: int, rounds: int, beta: float) -> list[list[int]]:
    base, sizes = population.losses(seed, n), population.sizes(seed, n)
    selector = module.HighLossActiveUserSelector(
        user_selector_seed=seed, count_normalization_exponent=1.0, softmax_temperature=beta
    )
    trained = [0] * n
    provider = DataProvider(sizes)
    picks = []
    for t in range(rounds):
        model = Model([population.current_loss(base[i], trained[i]) for i in range(n)], sizes)
        chosen = selector.get_user_indices(
            num_total_users=n, users_per_round=m, data_provider=provider, global_model=model, epoch=t
        )
        picks.append(sorted(int(i) for i in chosen))
        for i in chosen:
            trained[i] += 1
    return picks


def number_of_samples(module: types.ModuleType, seed: int, n: int, m: int, draws: int) -> dict[str, Any]:
    sizes = population.sizes(seed, n)
    selector = module.NumberOfSamplesActiveUserSelector(user_selector_seed=seed)
    provider = DataProvider(sizes)
    counts, repeats = [0] * n, 0
    for _ in range(draws):
        chosen = selector.get_user_indices(users_per_round=m, data_provider=provider)
        repeats += len(chosen) - len(set(chosen))
        for i in chosen:
            counts[i] += 1
    return {"sizes": sizes, "counts": counts, "repeats": repeats, "draws": draws}


def sequential(module: types.ModuleType, n: int, m: int, rounds: int) -> list[list[int]]:
    selector = module.SequentialActiveUserSelector()
    return [list(selector.get_user_indices(num_total_users=n, users_per_round=m)) for _ in range(rounds)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=pathlib.Path, default=pathlib.Path("/tmp/fedsample-reference/flsim-src"))
    parser.add_argument("--check-source", type=pathlib.Path, help="only check that the module loads, then exit")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--sampled", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--beta", type=float, default=population.BETA)
    parser.add_argument("--draws", type=int, default=population.DRAWS)
    parser.add_argument("--output", type=pathlib.Path)
    options = parser.parse_args(argv)
    if options.check_source is not None:
        load_selector_module(options.check_source)
        source = (options.check_source / "SOURCE.txt").read_text().strip()
        print("side environment ready: torch", torch.__version__, "|", source)
        return 0
    module = load_selector_module(options.source)
    start = time.perf_counter()
    n, m = options.clients, options.sampled
    payload = {
        "settings": {k: getattr(options, k) for k in ("clients", "sampled", "rounds", "seeds", "beta", "draws")},
        "torch": torch.__version__,
        "source": (options.source / "SOURCE.txt").read_text().strip(),
        "high_loss": [high_loss_run(module, s, n, m, options.rounds, options.beta) for s in range(options.seeds)],
        "number_of_samples": number_of_samples(module, 0, n, m, options.draws),
        "sequential": {"clients": 23, "sampled": 5, "rounds": 12, "picks": sequential(module, 23, 5, 12)},
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
