"""An initial phase in the engine (issue 25): DivFL's every-client gradients and high-loss's every-client
losses before the first selection, and the kept clients' full-batch gradients after each round."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")

import torch
from engine_cases import SIZES, classification_data, load, spec_for

from fedsample.engine import RunResult, RunSpec, TrainingConfig, initial_params, simulate
from fedsample.samplers import DivFLSampler, HighLossSampler, Sampler

M = 3
N = len(SIZES)


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))


def _reference_gradients(module: torch.nn.Module, names: list[str], data: Any) -> np.ndarray:
    """Each client's gradient of its mean cross-entropy over all its rows, by plain autograd."""
    parameters = dict(module.named_parameters())
    rows = []
    for k in range(N):
        a, b = int(data.train_indptr[k]), int(data.train_indptr[k + 1])
        x = torch.tensor(data.train_features[a:b])
        y = torch.tensor(data.train_targets[a:b])
        loss = torch.nn.functional.cross_entropy(module(x), y)
        grads = torch.autograd.grad(loss, [parameters[name] for name in names])
        rows.append(torch.cat([g.reshape(-1) for g in grads]).detach().numpy())
    return np.stack(rows)


def _run(sampler: Sampler[Any], model: Any, rounds: int, params: dict[str, Any]) -> RunResult:
    data = classification_data(3)
    config = TrainingConfig(rounds=rounds, num_sampled=M, local_steps=2, batch_size=4, local_lr=0.5)
    return simulate(data, model, [RunSpec(sampler, seed=5)], config, params=params)[0]


@pytest.mark.parametrize("kind", ["papers-mlp", "user-module"])
def test_divfl_reads_every_clients_full_batch_gradient_before_its_first_selection(kind: str) -> None:
    """After round 0 the state holds every client's gradient at the initial model (equal to plain
    autograd's, to float32's precision), not only the m selected ones'; after round 1 exactly the m
    clients kept in round 1 hold a gradient at the new model."""
    data = classification_data(3)
    if kind == "papers-mlp":
        spec = spec_for("mlp", data)
        params = {n: torch.as_tensor(v) for n, v in initial_params(spec, 7).items()}
        model, module = spec, load(spec, params)
    else:
        module = _mlp()
        params = {n: v.detach().clone() for n, v in module.named_parameters()}
        model = _mlp
    names = list(params)
    expected = _reference_gradients(module, names, data)
    state = _run(DivFLSampler(), model, 1, params).sampler_state
    assert state.round == 2  # the initial report, then the round's feedback
    np.testing.assert_allclose(state.gradients, expected, rtol=1e-4, atol=1e-6)
    later = _run(DivFLSampler(), model, 2, params).sampler_state
    moved = ~np.all(np.isclose(later.gradients, expected, rtol=1e-4, atol=1e-6), axis=1)
    assert moved.sum() == M


def test_without_the_initial_report_only_the_selected_clients_are_known() -> None:
    data = classification_data(3)
    spec = spec_for("mlp", data)
    params = {n: torch.as_tensor(v) for n, v in initial_params(spec, 7).items()}
    state = _run(DivFLSampler(initial_report=False), spec, 1, params).sampler_state
    assert int(np.any(state.gradients != 0, axis=1).sum()) == M


def test_high_loss_reads_every_clients_loss_before_its_first_selection() -> None:
    """Round 0's first phase: every client's mean loss over all its rows at the initial model (the kept
    clients' are then replaced by the round's feedback: their first batch's loss at the same model)."""
    data = classification_data(3)
    spec = spec_for("mlp", data)
    params = {n: torch.as_tensor(v) for n, v in initial_params(spec, 7).items()}
    module = load(spec, params)
    with torch.no_grad():
        full = np.array(
            [
                torch.nn.functional.cross_entropy(
                    module(torch.tensor(data.train_features[a:b])), torch.tensor(data.train_targets[a:b])
                ).item()
                for a, b in zip(data.train_indptr[:-1], data.train_indptr[1:], strict=True)
            ]
        )
    state = _run(HighLossSampler(), spec, 1, params).sampler_state
    assert np.all(np.isfinite(state.losses))
    assert int(np.isclose(state.losses, full, rtol=1e-5).sum()) >= N - M
    old = _run(HighLossSampler(initial_evaluation=False), spec, 1, params).sampler_state
    assert int(np.isfinite(old.losses).sum()) == M
