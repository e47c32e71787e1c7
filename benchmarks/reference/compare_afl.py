"""fedsample's ``afl`` against FLSim's HighLoss selector with AFL's parameters, as released (issue 28).

Runs in fedsample's environment (after ``make_env_selectors.sh flsim``)::

    .venv/bin/python benchmarks/reference/compare_afl.py            # n = 100, m = 10, 20000 draws per setting
    .venv/bin/python benchmarks/reference/compare_afl.py --quick    # 4000 draws

The reference side is ``afl_flsim.py`` in FLSim's side environment (commit ``82b7fb3``), run once per
code and settings and cached under ``$FEDSAMPLE_REFERENCE_DIR/results``. fedsample's side builds
``AFLSampler(zero_fraction=alpha_1, inverse_temperature=alpha_2, uniform_fraction=alpha_3,
size_exponent=e)`` on the same users (``flsim_population``: lognormal losses and sizes, seed 0), hands
it every user's loss once (the initial evaluation FLSim also makes) and draws as many rounds. Per
setting:

* **the active draw's probabilities**: FLSim's ``convert_to_probability`` (float32) against
  ``AFLSampler.probabilities``: the largest absolute difference, tolerance ``1e-6``;
* **each user's inclusion frequency** over all the draws (active and uniform parts together): two
  independent samples, ``|z| <= 4.5`` for every user (a false alarm below ``7e-4`` over the 100 users
  of a setting when the two selectors are equal in distribution).

The exit status is 1 when a statistic is outside its tolerance.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import numpy as np

from fedsample import Federation, Feedback, Selection
from fedsample.samplers import AFLSampler

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import flsim_population as population  # noqa: E402

REFERENCE_DIR = pathlib.Path(os.environ.get("FEDSAMPLE_REFERENCE_DIR", "/tmp/fedsample-reference"))
PROBABILITY_TOLERANCE, Z_INCLUSION = 1e-6, 4.5


def reference(n: int, m: int, draws: int, seed: int) -> dict[str, Any]:
    """FLSim's side, cached by settings and by the code of the driver and the population."""
    code = hashlib.sha256(b"".join((HERE / f).read_bytes() for f in ("afl_flsim.py", "flsim_population.py")))
    cached = REFERENCE_DIR / "results" / f"afl_n{n}_m{m}_D{draws}_s{seed}_{code.hexdigest()[:10]}.json"
    if not cached.exists():
        python = REFERENCE_DIR / "venv-flsim" / "bin" / "python"
        if not python.exists():
            raise SystemExit(f"compare_afl.py: no side environment at {python}: run make_env_selectors.sh flsim")
        cached.parent.mkdir(parents=True, exist_ok=True)
        settings = ("--clients", n, "--sampled", m, "--draws", draws, "--seed", seed, "--output", cached)
        command = [str(python), str(HERE / "afl_flsim.py"), "--source", str(REFERENCE_DIR / "flsim-src")]
        subprocess.run([*command, *(str(a) for a in settings)], check=True)
    return dict(json.loads(cached.read_text()))


def ours(setting: list[float], n: int, m: int, draws: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """fedsample's active-draw probabilities and inclusion counts on the same users."""
    zero, temperature, uniform, exponent = setting
    losses, sizes = np.array(population.losses(seed, n)), np.array(population.sizes(seed, n))
    sampler = AFLSampler(
        zero_fraction=zero, inverse_temperature=temperature, uniform_fraction=uniform, size_exponent=exponent
    )
    state = sampler.init(Federation.from_sizes(sizes), m)
    everyone = np.arange(n, dtype=np.int64)
    report = Feedback(round=0, selection=Selection(clients=everyone, weights=np.full(n, 1 / n)), clients=everyone)
    state = sampler.update(state, Feedback(**{**report.__dict__, "losses": losses}))
    rng = np.random.default_rng([28, 5, seed])
    counts = np.zeros(n, dtype=np.int64)
    for _ in range(draws):
        counts += np.bincount(sampler.sample(state, rng).clients, minlength=n)
    return sampler.probabilities(state), counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4000 draws per setting")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--sampled", type=int, default=10)
    options = parser.parse_args(argv)
    n, m, seed = options.clients, options.sampled, 0
    draws = 4000 if options.quick else 20_000
    released = reference(n, m, draws, seed)
    print(f"AFL: FLSim HighLossActiveUserSelector ({released['source'].split(',')[0]}, torch {released['torch']})")
    print(f"vs fedsample's afl; n = {n}, m = {m}, {draws} draws per setting\n")
    print(
        "| alpha_1 | alpha_2 | alpha_3 | e | max abs diff of p (tol 1e-6) | max abs z of inclusion (tol 4.5) | within |"
    )
    print("|---:|---:|---:|---:|---:|---:|---|")
    ok = True
    for run in released["runs"]:
        p, counts = ours(run["setting"], n, m, draws, seed)
        diff = float(np.max(np.abs(p - np.array(run["probabilities"]))))
        theirs = np.array(run["counts"]) / draws
        mine = counts / draws
        se = np.sqrt((theirs * (1 - theirs) + mine * (1 - mine)) / draws)
        z = np.abs(mine - theirs) / np.maximum(se, 1e-12)
        z[(se == 0) & (mine == theirs)] = 0.0
        within = diff <= PROBABILITY_TOLERANCE and float(z.max()) <= Z_INCLUSION
        ok &= within
        a1, a2, a3, e = run["setting"]
        print(f"| {a1} | {a2} | {a3} | {e} | {diff:.2g} | {float(z.max()):.2f} | {'yes' if within else 'NO'} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
