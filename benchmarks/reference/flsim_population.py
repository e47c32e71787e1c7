"""The made-up users of the FLSim comparison, plain Python and numpy (issue 25, item 5).

Imported by both sides: ``flsim_selectors.py`` (side environment) and ``compare_flsim.py``. A user's
base loss is lognormal (median 1, sigma 0.5), its size lognormal (median 100, at least 1); its loss
at the global model is ``base * DECAY^k`` after it trained in ``k`` rounds (a user's loss falls when
the model learns its data).
"""

from __future__ import annotations

import numpy as np

DECAY = 0.7
BETA = 2.0  # FLSim's softmax_temperature in the comparison (multiplies the loss)
DRAWS = 20_000  # NumberOfSamples draws


def losses(seed: int, n: int) -> list[float]:
    return [float(v) for v in np.random.default_rng([31, seed]).lognormal(0.0, 0.5, size=n)]


def sizes(seed: int, n: int) -> list[int]:
    return [int(v) for v in np.maximum(np.random.default_rng([32, seed]).lognormal(np.log(100), 1.0, size=n), 1)]


def current_loss(base: float, trained: int) -> float:
    return float(base * DECAY**trained)
