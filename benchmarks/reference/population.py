"""The made-up federation of the reference harness and the round mechanics both sides share.

Imported by the FedScale driver (``oort_fedscale.py``, in the side environment with numpy 1.x) and
by ``compare_oort.py`` (in fedsample's environment), so it needs only the standard library and numpy
(1.17 or later) and never imports fedsample. Everything random is drawn from the seed: the
population by a numpy ``Generator`` on the driver's side (the driver writes it out, and the other
side reads it back, so both see the same floats), the per-round loss noise by a counter-based hash
that gives the same value in any environment.

A client ``i`` has

* ``sizes[i]``: its samples (lognormal, median 200, at least 32: FedScale's ``filter_less`` drops
  smaller clients);
* ``compute_ms[i]`` and ``bandwidth_kbps[i]``: the device profile FedScale's ``ClientMetadata``
  turns into a round time (milliseconds of inference per sample, kbit/s of link);
* ``base_loss[i]``: how hard its data is for the initial model.

Its training loss in round ``r`` (1-based), after it trained ``c`` times before, is
``base_loss * (0.2 + 0.8 * 0.8**c) * (0.5 + 0.5 * 0.99**r) * exp(0.1 z)``, with ``z`` a standard
normal keyed by ``(seed, client, round)``: a client's loss falls each time it trains, every loss
falls slowly as the global model improves, and a little noise keeps ties away. The statistical
utility therefore moves round by round and the pacer has something to react to.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "UPDATE_KBITS",
    "keep_fastest",
    "make_population",
    "statistical_utility",
    "training_loss",
]

UPDATE_KBITS = 16000.0
"""The model update's size (kbit) for both directions of a round (FedScale measures its model's)."""

_MASK = (1 << 64) - 1


def make_population(seed: int, num_clients: int) -> dict[str, list[float]]:
    """The clients of ``seed``: sizes, device profile and base loss, as plain lists (JSON-ready)."""
    rng = np.random.default_rng([int(seed), 2505])  # issue 25, item 5
    sizes = np.clip(np.rint(rng.lognormal(math.log(200.0), 1.0, num_clients)), 32, 20000)
    return {
        "sizes": [int(s) for s in sizes],
        "compute_ms": rng.lognormal(math.log(30.0), 0.6, num_clients).tolist(),
        "bandwidth_kbps": rng.lognormal(math.log(2000.0), 0.8, num_clients).tolist(),
        "base_loss": rng.lognormal(math.log(2.0), 0.5, num_clients).tolist(),
    }


def training_loss(base_loss: float, seed: int, client: int, round_: int, times_trained: int) -> float:
    """The mean training loss of ``client`` (0-based) in round ``round_`` (1-based), see the module doc."""
    trained = 0.2 + 0.8 * 0.8**times_trained
    global_model = 0.5 + 0.5 * 0.99**round_
    return base_loss * trained * global_model * math.exp(0.1 * _keyed_normal(seed, client, round_))


def statistical_utility(size: int, loss: float, samples_per_round: int) -> float:
    """What FedScale's client reports as ``utility``: the samples it trained on, capped at
    ``local_steps * batch_size``, times the root mean squared loss (one loss for every sample here)."""
    return float(min(size, samples_per_round)) * math.sqrt(loss * loss)


def keep_fastest(sampled: list[int], durations: list[float], num_kept: int) -> tuple[list[int], list[int], float]:
    """FedScale's over-commitment (``Aggregator.tictak_client_tasks`` in simulation): of the sampled
    entries (in the order given), the ``num_kept`` with the shortest round times run, the others are
    stragglers; the round lasts as long as the slowest kept. Ties keep the given order."""
    order = sorted(range(len(sampled)), key=lambda k: durations[sampled[k]])
    kept = min(num_kept, len(sampled))
    ran = [sampled[k] for k in order[:kept]]
    stragglers = [sampled[k] for k in order[kept:]]
    return ran, stragglers, (durations[ran[-1]] if ran else 0.0)


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _keyed_normal(*keys: int) -> float:
    """A standard normal that depends only on ``keys`` (Box-Muller on two hashed uniforms)."""
    h = 0
    for key in keys:
        h = _splitmix64(h ^ (int(key) & _MASK))
    first, second = _splitmix64(h ^ 1), _splitmix64(h ^ 2)
    u1 = ((first >> 11) + 0.5) / 2.0**53
    u2 = ((second >> 11) + 0.5) / 2.0**53
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
