"""The Flower strategy fits its sampler to the model before round 1, as the engine does
(:func:`fedsample.samplers.fit_to_parameters`, :func:`fedsample.engine.fit_to_model`): HiCS-FL reads
its output layer from the global arrays."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr")

from flower_grid import FakeGrid

from fedsample.errors import FedsampleError
from fedsample.integrations.flower import FedsampleStrategy, to_array_record
from fedsample.samplers import HiCSFLSampler, MDSampler

pytestmark = pytest.mark.usefixtures("task_identity")

NODES = [901, 17, 4400, 250]
SIZES = [30, 10, 60, 100]
# A hidden layer Linear(4, 3) and the output layer Linear(3, 2): the last two arrays.
MODEL = {
    "hidden.weight": np.zeros((3, 4), dtype=np.float32),
    "hidden.bias": np.zeros(3, dtype=np.float32),
    "out.weight": np.zeros((2, 3), dtype=np.float32),
    "out.bias": np.zeros(2, dtype=np.float32),
}


def test_hicsfl_reads_its_output_layer_from_the_first_rounds_arrays() -> None:
    strategy = FedsampleStrategy(HiCSFLSampler(num_classes=2), num_sampled=2, sizes=SIZES)
    assert strategy.sampler.output_inputs is None
    messages = FakeGrid(NODES).configure(strategy, to_array_record(MODEL))
    assert len(messages) == 2
    assert isinstance(strategy.sampler, HiCSFLSampler)
    assert strategy.sampler.output_inputs == 3  # as the engine's fit_to_model sets it
    assert strategy.sampler.min_update_dimension == 2 * (3 + 1)


def test_a_model_the_sampler_cannot_read_is_refused_before_round_1() -> None:
    strategy = FedsampleStrategy(HiCSFLSampler(num_classes=5), num_sampled=2, sizes=SIZES)
    with pytest.raises(FedsampleError, match="num_classes"):
        FakeGrid(NODES).configure(strategy, to_array_record(MODEL))


def test_a_sampler_that_reads_no_model_is_left_as_it_is() -> None:
    sampler = MDSampler()
    strategy = FedsampleStrategy(sampler, num_sampled=2, sizes=SIZES)
    FakeGrid(NODES).configure(strategy, to_array_record(MODEL))
    assert strategy.sampler is sampler
