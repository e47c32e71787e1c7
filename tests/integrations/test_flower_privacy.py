"""DP-FedAvg in the Flower strategy (issue 36 item 1): the server clips each update, sums with the
design's weights and adds the noise once; the round's metrics carry the spent epsilon; the budget stops
the rounds; what the strategy refuses under privacy."""

from __future__ import annotations

import numpy as np
import pytest

flwr = pytest.importorskip("flwr")
pytest.importorskip("dp_accounting")

from flower_grid import FakeGrid, client_of  # noqa: E402

import fedsample  # noqa: E402
from fedsample.errors import FedsampleError  # noqa: E402
from fedsample.integrations.flower import FedsampleStrategy, to_array_record, train_reply  # noqa: E402
from fedsample.privacy import DPFedAvg  # noqa: E402

pytestmark = pytest.mark.usefixtures("task_identity")

NODES = [901, 17, 4400, 250]
SIZES = [30, 10, 60, 100]
THETA = {"w": np.zeros((2, 2), dtype=np.float32), "b": np.zeros(2, dtype=np.float32)}
SHIFTS = [1000.0, 0.1, 0.2, 0.3]  # client 0's update is huge: the clip bounds it


def _round(privacy: DPFedAvg, server_round: int = 1):  # type: ignore[no-untyped-def]
    strategy = FedsampleStrategy(fedsample.make_sampler("full"), sizes=SIZES, num_sampled=4, seed=0, privacy=privacy)
    grid = FakeGrid(NODES)
    messages = grid.configure(strategy, to_array_record(THETA))
    replies = [
        train_reply(m, {n: v + np.float32(SHIFTS[client_of(m)]) for n, v in THETA.items()}, num_examples=10)
        for m in messages
    ]
    arrays, metrics = strategy.aggregate_train(server_round, replies)
    return strategy, arrays, metrics


def test_the_server_clips_and_the_noise_is_negligible_at_tiny_z() -> None:
    """At z = 1e-2, C = 0.1 and s = 0.5 the noise's std is 5e-4 (a tenth of the tolerance): the model moves by
    sum_i w_i clip_C(Delta_i), client 0's huge update clipped."""
    _, arrays, metrics = _round(DPFedAvg(clip_norm=0.1, noise_multiplier=1e-2, accountant="rdp"))
    weights = np.asarray(SIZES, dtype=np.float64) / sum(SIZES)
    expected = sum(w * min(1.0, 0.1 / (s * np.sqrt(6))) * s for w, s in zip(weights, SHIFTS, strict=True))
    for name in THETA:
        np.testing.assert_allclose(arrays[name].numpy(), expected, atol=5e-3)
    assert metrics["epsilon"] > 0
    assert metrics["clip-norm"] == pytest.approx(0.1)


def test_the_strategy_refuses_a_norm_bound_and_fedsampling_under_privacy() -> None:
    with pytest.raises(FedsampleError, match="'norm_bound'"):
        FedsampleStrategy(
            fedsample.make_sampler("full"), sizes=SIZES, num_sampled=4, norm_bound=3.0, privacy=DPFedAvg()
        )
    with pytest.raises(FedsampleError, match="'privacy'"):
        FedsampleStrategy(fedsample.make_sampler("full"), sizes=SIZES, num_sampled=4, privacy=1.0)
    strategy = FedsampleStrategy(fedsample.make_sampler("osmd"), sizes=SIZES, num_sampled=2, privacy=DPFedAvg())
    with pytest.raises(FedsampleError, match="update norms"):  # refused when the federation is known
        strategy.setup(FakeGrid(NODES))
