"""Any torch.nn.Module in the engine: dropout, BatchNorm, LayerNorm/GroupNorm, embeddings, regression.

The batched backend (``torch.func.vmap`` over the slots' stacked parameters and buffers) is checked
against the sequential reference (an ``nn.Module`` and ``torch.optim.SGD`` per client): the same
global parameters and buffers to float32 round-off (rtol 1e-4, atol 1e-5 after three rounds of
three local steps), with the same dropout masks on both (keyed by seed, round and client).
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from engine_cases import classification_data, regression_data, sequence_data
from torch import nn

from fedsample.engine import RunSpec, SimulationCheckpoint, TrainingConfig, load_checkpoint, save_checkpoint, simulate
from fedsample.engine.specs import FallbackWarning
from fedsample.engine.trainers.base import BatchedBackend, SequentialBackend
from fedsample.engine.user_model import Model, bind_model
from fedsample.errors import FedsampleError
from fedsample.samplers import FullSampler, MDSampler, UniformSampler

# Clients of at least 4 samples: BatchNorm in training mode needs more than one value per channel.
SIZES = (6, 9, 5, 7, 12, 4, 10, 8)
CONFIG = TrainingConfig(rounds=3, num_sampled=3, local_steps=3, batch_size=4, local_lr=0.05)


class ConvBN(nn.Module):
    """conv-BN-ReLU, dropout, a linear head: the issue's user CNN in miniature."""

    def __init__(self, classes: int = 4) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.3)
        self.head = nn.Linear(4 * 4 * 4, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.head(self.drop(h.flatten(1)))


class Norms(nn.Module):
    """LayerNorm, GroupNorm and channel dropout."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.group = nn.GroupNorm(2, 4)
        self.channel_drop = nn.Dropout2d(0.25)
        self.layer = nn.LayerNorm(4 * 8 * 8)
        self.head = nn.Linear(4 * 8 * 8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.channel_drop(torch.relu(self.group(self.conv(x))))
        return self.head(self.layer(h.flatten(1)))


class Embedder(nn.Module):
    """An embedding of integer tokens, a 1-D convolution over the sequence, mean pooling."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(80, 6)
        self.conv = nn.Conv1d(6, 8, 3)
        self.drop = nn.Dropout(0.2)
        self.head = nn.Linear(8, 80)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv(self.embed(x).transpose(1, 2))).mean(-1)
        return self.head(self.drop(h))


class Regressor(nn.Module):
    """A regression output (B, 1), BatchNorm1d on the features."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(5)
        self.hidden = nn.Linear(5, 8)
        self.out = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(self.bn(x))))


def _images(seed: int = 0) -> Any:
    return classification_data(seed, sizes=SIZES, sample_shape=(3, 8, 8))


CASES: dict[str, tuple[Any, Any]] = {
    "conv-bn-dropout": (ConvBN, _images),
    "layernorm-groupnorm-dropout2d": (Norms, _images),
    "embedding-conv1d": (Embedder, lambda: sequence_data(0, sizes=(5, 7, 6, 4), length=12)),
    "regression-batchnorm1d": (Regressor, lambda: regression_data(0, sizes=SIZES)),
}


def _run(factory: Any, data: Any, backend: str, runs: list[RunSpec] | None = None, **config: Any) -> list[Any]:
    settings = TrainingConfig(**{**CONFIG.__dict__, "backend": backend, **config})
    return simulate(data, factory, runs or [RunSpec(MDSampler(), seed=3)], settings, init_seed=1)


@pytest.mark.parametrize("batching", ["vmap", "threads"])
@pytest.mark.parametrize("case", list(CASES))
def test_batched_equals_sequential_for_user_models(case: str, batching: str) -> None:
    """Same parameters, buffers and metrics on both backends (rtol 1e-4, atol 1e-5), dropout included, with
    the batched backend's vmap computation and with its threads."""
    factory, make_data = CASES[case]
    data = make_data()
    batched = _run(Model(factory, batching=batching), data, "batched")[0]
    sequential = _run(factory, data, "sequential")[0]
    assert batched.history.info["backend"] == "batched"
    assert sequential.history.info["backend"] == "sequential"
    for name in batched.params:
        np.testing.assert_allclose(batched.params[name], sequential.params[name], rtol=1e-4, atol=1e-5, err_msg=name)
    assert batched.buffers.keys() == sequential.buffers.keys()
    for name in batched.buffers:
        np.testing.assert_allclose(batched.buffers[name], sequential.buffers[name], rtol=1e-4, atol=1e-5, err_msg=name)
    np.testing.assert_allclose(batched.history.train_loss, sequential.history.train_loss, rtol=1e-4)
    # The model trained: its parameters moved from the initial ones.
    initial = _run(factory, data, "batched", rounds=1, local_lr=1e-30)[0]
    assert any(not np.allclose(batched.params[n], initial.params[n]) for n in batched.params)


@pytest.mark.parametrize("batching", ["vmap", "threads"])
def test_dropout_masks_do_not_depend_on_the_runs_batched_alongside(batching: str) -> None:
    """A run with dropout alone = the same run batched with two others (its masks are keyed by its own seed,
    round and client), to 1e-6; the other runs' numbers differ, so the check is not vacuous."""
    data = _images()
    model = Model(ConvBN, batching=batching)
    runs = [RunSpec(MDSampler(), seed=3), RunSpec(UniformSampler(), seed=4), RunSpec(MDSampler(), seed=5)]
    together = _run(model, data, "batched", runs)
    alone = _run(model, data, "batched", runs[:1])[0]
    for name in alone.params:
        np.testing.assert_allclose(together[0].params[name], alone.params[name], rtol=1e-6, atol=1e-7, err_msg=name)
    assert not np.allclose(together[0].params["head.weight"], together[2].params["head.weight"])


def test_same_seed_same_run_and_the_callers_random_state_is_left_alone() -> None:
    """Two runs of a dropout model with the same seed are identical, whatever the global random state was,
    and simulate leaves the global torch and numpy states as it found them."""
    data = _images()
    torch.manual_seed(123)
    before = torch.get_rng_state()
    first = _run(ConvBN, data, "batched")[0]
    assert torch.equal(torch.get_rng_state(), before)
    torch.manual_seed(999)
    second = _run(ConvBN, data, "batched")[0]
    for name in first.params:
        np.testing.assert_array_equal(first.params[name], second.params[name])
    third = _run(ConvBN, data, "sequential")[0]
    torch.manual_seed(5)
    fourth = _run(ConvBN, data, "sequential")[0]
    for name in third.params:
        np.testing.assert_array_equal(third.params[name], fourth.params[name])


def test_dropout_changes_training_but_never_evaluation() -> None:
    """With dropout p = 0.9 the training differs from p = 0 (dropout is on while training), but the
    evaluation of the initial model is the same for both (the evaluation runs in eval() mode)."""

    def heavy() -> nn.Module:
        torch.manual_seed(0)
        module = ConvBN()
        module.drop.p = 0.9
        return module

    def none() -> nn.Module:
        torch.manual_seed(0)
        module = ConvBN()
        module.drop.p = 0.0
        return module

    data = _images()
    dropped, plain = _run(heavy, data, "batched")[0], _run(none, data, "batched")[0]
    assert dropped.history.train_loss[0] == plain.history.train_loss[0]
    assert dropped.history.test_loss[0] == plain.history.test_loss[0]
    assert not np.allclose(dropped.params["head.weight"], plain.params["head.weight"])


def test_evaluation_uses_the_running_statistics_not_the_batch() -> None:
    """At round 0 the objective equals the module's own eval()-mode loss on every client's rows: BatchNorm
    reads its running statistics (the batch statistics of a client's rows would give another value)."""
    data = _images()
    module = ConvBN()
    with torch.no_grad():
        module.bn.running_mean.fill_(0.3)
        module.bn.running_var.fill_(2.0)
    result = simulate(data, module, [RunSpec(MDSampler(), seed=0)], TrainingConfig(rounds=1, num_sampled=2))[0]
    x = torch.as_tensor(np.array(data.train_features))
    y = torch.as_tensor(np.array(data.train_targets))
    reference = copy.deepcopy(module).eval()
    with torch.no_grad():
        losses = nn.functional.cross_entropy(reference(x), y, reduction="none").double().numpy()
    sizes = np.diff(data.train_indptr)
    per_client = np.add.reduceat(losses, data.train_indptr[:-1]) / sizes
    objective = float(per_client @ (sizes / sizes.sum()))
    assert result.history.train_loss[0] == pytest.approx(objective, rel=1e-6)
    with torch.no_grad():
        train_mode = nn.functional.cross_entropy(copy.deepcopy(module).train()(x), y).item()
    assert abs(train_mode - objective) > 1e-3  # the check above would notice batch statistics


def test_buffers_are_aggregated_with_the_rounds_weights() -> None:
    """Full participation, one round: the global running statistics are the clients' own after their local
    steps (sequential reference, trained by hand), averaged with the weights p_i = n_i / M."""
    data = _images()
    module = ConvBN()
    module.drop.p = 0.0
    config = TrainingConfig(rounds=1, num_sampled=len(SIZES), local_steps=2, batch_size=4, local_lr=0.05)
    result = simulate(data, module, [RunSpec(FullSampler(), seed=7)], config)[0]
    sizes = np.diff(data.train_indptr)
    expected_mean = np.zeros(4)
    expected_var = np.zeros(4)
    from fedsample.engine.batching import plan_batches

    plan = plan_batches(
        seeds=np.full(len(SIZES), 7),
        round_index=0,
        clients=np.arange(len(SIZES)),
        offsets=np.asarray(data.train_indptr),
        steps=2,
        batch_size=4,
    )
    x = torch.as_tensor(np.array(data.train_features))
    y = torch.as_tensor(np.array(data.train_targets))
    for client, size in enumerate(sizes):
        local = copy.deepcopy(module).train()
        optimizer = torch.optim.SGD(local.parameters(), lr=0.05)
        for step in range(2):
            rows = torch.as_tensor(plan.rows[step, client, : plan.counts[client]])
            optimizer.zero_grad()
            nn.functional.cross_entropy(local(x[rows]), y[rows]).backward()
            optimizer.step()
        expected_mean += size / sizes.sum() * local.bn.running_mean.numpy()
        expected_var += size / sizes.sum() * local.bn.running_var.numpy()
    np.testing.assert_allclose(result.buffers["bn.running_mean"], expected_mean, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(result.buffers["bn.running_var"], expected_var, rtol=1e-4, atol=1e-6)
    assert int(result.buffers["bn.num_batches_tracked"]) == 2
    # Not the initial statistics: the aggregation moved them.
    assert not np.allclose(result.buffers["bn.running_mean"], 0.0)


def test_the_users_module_is_never_changed() -> None:
    """simulate trains copies: the module's parameters, buffers and mode are as they were; the result loads."""
    data = _images()
    module = ConvBN().eval()
    state = copy.deepcopy(module.state_dict())
    result = simulate(data, module, [RunSpec(MDSampler(), seed=0)], CONFIG)[0]
    assert not module.training
    for name, value in module.state_dict().items():
        assert torch.equal(value, state[name]), name
    assert isinstance(module.drop, nn.Dropout)
    trained = ConvBN()
    trained.load_state_dict(result.state_dict())
    assert torch.equal(trained.head.weight, torch.as_tensor(result.params["head.weight"]))


def test_a_factory_is_seeded_by_init_seed() -> None:
    """A factory's initial model comes from init_seed (two seeds differ, one seed repeats), and calling
    it does not move the global random state."""
    data = _images()
    config = TrainingConfig(rounds=1, num_sampled=2, local_lr=1e-30)
    runs = [RunSpec(MDSampler(), seed=0)]
    state = torch.get_rng_state()
    a = simulate(data, ConvBN, runs, config, init_seed=1)[0]
    b = simulate(data, ConvBN, runs, config, init_seed=1)[0]
    c = simulate(data, ConvBN, runs, config, init_seed=2)[0]
    assert torch.equal(torch.get_rng_state(), state)
    np.testing.assert_array_equal(a.params["head.weight"], b.params["head.weight"])
    assert not np.allclose(a.params["head.weight"], c.params["head.weight"])


class Noisy(nn.Module):
    """Adds Gaussian noise in training: a random operation vmap cannot batch."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(6, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            x = x + 0.1 * torch.randn_like(x)
        return self.linear(x)


def test_a_module_vmap_cannot_batch_runs_sequentially_with_one_line_saying_why() -> None:
    """torch.randn_like in the forward pass: the batched backend falls back to the sequential one with a
    FallbackWarning naming the model and the reason; the run is reproducible and leaves the global
    random state alone."""
    data = classification_data(0)
    state = torch.get_rng_state()
    with pytest.warns(FallbackWarning, match=r"Noisy.*draws from PyTorch.s global generator") as caught:
        first = _run(Noisy, data, "batched")[0]
    assert len(str(caught[0].message).splitlines()) == 1
    assert first.history.info["backend"] == "sequential"
    assert torch.equal(torch.get_rng_state(), state)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        second = _run(Noisy, data, "batched")[0]
    np.testing.assert_array_equal(first.params["linear.weight"], second.params["linear.weight"])


def test_a_sequential_mlp_takes_the_fused_kernels_and_matches_the_generic_path() -> None:
    """A user's nn.Sequential(Flatten, Linear, ReLU, Linear) gets the dense layout; with fused=False it runs
    through torch.func: both give the same model (rtol 1e-4)."""

    def mlp() -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 4))

    data = classification_data(0)
    fused = bind_model(mlp, task="classification", features=data.train_features, targets=data.train_targets)
    assert fused.dense is not None
    assert fused.dense.weights == ("1.weight", "3.weight")
    generic = bind_model(Model(mlp, fused=False), task="classification")
    assert generic.dense is None
    a = simulate(data, mlp, [RunSpec(MDSampler(), seed=1)], CONFIG)[0]
    b = simulate(data, Model(mlp, fused=False), [RunSpec(MDSampler(), seed=1)], CONFIG)[0]
    for name in a.params:
        np.testing.assert_allclose(a.params[name], b.params[name], rtol=1e-4, atol=1e-6, err_msg=name)


def test_a_callable_loss_and_extra_metrics() -> None:
    """A label-smoothed cross-entropy trains; an extra metric is reported per evaluation in test_metrics."""

    def smoothed(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(output, target, reduction="none", label_smoothing=0.1)

    def top2(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return (output.topk(2, dim=-1).indices == target.unsqueeze(-1)).any(-1).to(output.dtype)

    data = classification_data(0)
    model = Model(lambda: nn.Linear(6, 4), loss=smoothed, metrics={"top2": top2})
    result = simulate(data, model, [RunSpec(MDSampler(), seed=1)], CONFIG)[0]
    assert set(result.history.test_metrics) == {"top2"}
    top2_values = result.history.test_metrics["top2"]
    assert top2_values.shape == result.history.test_accuracy.shape
    assert np.all(top2_values >= result.history.test_accuracy)
    assert "test_top2" in result.history.to_dict()["evaluations"]


class Wide(nn.Module):
    def __init__(self, outputs: int) -> None:
        super().__init__()
        self.linear = nn.Linear(6, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def _raises_factory() -> nn.Module:
    raise RuntimeError("no GPU here")


@pytest.mark.parametrize(
    ("model", "data", "match"),
    [
        (_raises_factory, "classification", r"'model' parameter of simulate .*RuntimeError: no GPU here"),
        (lambda: "a string", "classification", r"'model' .* returning an nn.Module"),
        (lambda: Wide(2), "classification", r"'model' .*one logit per class.*C >= 4.*\(4, 2\)"),
        (lambda: nn.Linear(5, 3), "regression", r"'model' .*one value per sample for mse.*\(4, 3\)"),
        (lambda: nn.Linear(7, 4), "classification", r"'model' .*samples of shape \(6,\).*RuntimeError"),
        (Model(lambda: Wide(4), loss=lambda o, t: o.sum()), "classification", r"'loss' .*one float per sample"),
        (Model(lambda: Wide(4), loss="mse"), "classification", r"'loss' parameter .*'cross-entropy'"),
        (Model(lambda: Wide(1), loss="cross-entropy"), "regression", r"'loss' parameter .*'mse'"),
        (42, "classification", r"'model' parameter of simulate must be a Model"),
    ],
    ids=[
        "factory-raises",
        "not-a-module",
        "too-few-logits",
        "mse-shape",
        "input-shape",
        "loss-shape",
        "mse-on-classes",
        "ce-on-values",
        "not-a-model",
    ],
)
def test_a_bad_model_is_refused_in_one_line_before_training(model: Any, data: str, match: str) -> None:
    dataset = classification_data(0) if data == "classification" else regression_data(0)
    with pytest.raises(FedsampleError, match=match) as caught:
        simulate(dataset, model, [RunSpec(MDSampler(), seed=0)], CONFIG)
    assert len(str(caught.value).splitlines()) == 1


def test_the_sequential_and_batched_backends_accept_a_bound_model_directly() -> None:
    data = _images()
    bound = bind_model(ConvBN, task="classification", features=data.train_features, targets=data.train_targets)
    assert bound.batch_dependent
    assert bound.keyed_dropout
    assert bound.buffer_names
    assert isinstance(BatchedBackend(bound).model, type(bound))
    assert SequentialBackend(bound).name == "sequential"


def test_a_model_with_buffers_resumes_identically(tmp_path: Path) -> None:
    """Checkpoint a BatchNorm-and-dropout model after round 2 of 4 (saved to disk and read back), resume:
    the parameters, buffers, metrics and extra metrics equal an uninterrupted run's, bit for bit."""
    data = _images()
    model = Model(ConvBN, metrics={"kept": lambda o, t: torch.ones_like(o[:, 0])})
    runs = [RunSpec(MDSampler(), seed=3), RunSpec(UniformSampler(), seed=4)]
    config = TrainingConfig(**{**CONFIG.__dict__, "rounds": 4})
    whole = simulate(data, model, runs, config, init_seed=1)
    saved: list[Path] = []

    def keep(checkpoint: SimulationCheckpoint) -> None:
        path = tmp_path / f"round{checkpoint.rounds_done}.npz"
        save_checkpoint(path, checkpoint)
        saved.append(path)

    simulate(data, model, runs, config, init_seed=1, checkpoint=keep, checkpoint_every=2)
    checkpoint = load_checkpoint(saved[0])
    assert set(checkpoint.buffers) == {"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}
    resumed = simulate(data, model, runs, config, init_seed=1, resume=checkpoint)
    for a, b in zip(whole, resumed, strict=True):
        for name in a.params:
            np.testing.assert_array_equal(a.params[name], b.params[name], err_msg=name)
        for name in a.buffers:
            np.testing.assert_array_equal(a.buffers[name], b.buffers[name], err_msg=name)
        np.testing.assert_array_equal(a.history.train_loss, b.history.train_loss)
        np.testing.assert_array_equal(a.history.test_metrics["kept"], b.history.test_metrics["kept"])


def test_on_threads_a_slots_numbers_do_not_depend_on_the_thread_count() -> None:
    """The threads strategy trains each client on one thread: 1, 2 or 3 worker threads give the same
    model bit for bit, and it is the strategy a CPU picks for a convolutional model."""
    data = _images()
    assert bind_model(ConvBN, task="classification").threaded(torch.device("cpu"))
    results = [_run(ConvBN, data, "batched", threads=threads)[0] for threads in (1, 2, 3)]
    assert [r.history.info["threads"] for r in results] == [1, 2, 3]
    for other in results[1:]:
        for name in results[0].params:
            np.testing.assert_array_equal(results[0].params[name], other.params[name], err_msg=name)
        for name in results[0].buffers:
            np.testing.assert_array_equal(results[0].buffers[name], other.buffers[name], err_msg=name)


class FrozenBackbone(nn.Module):
    """A frozen first layer (requires_grad=False) under a trained head: fine-tuning."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Linear(6, 8)
        self.backbone.requires_grad_(False)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.backbone(x)))


@pytest.mark.parametrize("backend", ["batched", "sequential"])
def test_frozen_parameters_never_move_and_both_backends_agree(backend: str) -> None:
    """Frozen parameters keep their value (also under SCAFFOLD's corrections); the trained ones match the
    sequential reference."""
    from fedsample.engine import Scaffold

    data = classification_data(0)
    torch.manual_seed(3)
    module = FrozenBackbone()
    config = TrainingConfig(**{**CONFIG.__dict__, "backend": backend, "algorithm": Scaffold()})
    result = simulate(data, module, [RunSpec(MDSampler(), seed=1)], config)[0]
    np.testing.assert_array_equal(result.params["backbone.weight"], module.backbone.weight.detach().numpy())
    assert not np.allclose(result.params["head.weight"], module.head.weight.detach().numpy())
    reference = simulate(
        data, module, [RunSpec(MDSampler(), seed=1)], TrainingConfig(**{**config.__dict__, "backend": "sequential"})
    )[0]
    for name in result.params:
        np.testing.assert_allclose(result.params[name], reference.params[name], rtol=1e-4, atol=1e-6, err_msg=name)


class TrainOnlyBug(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(6, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            raise ValueError("a bug in the training branch")
        return self.linear(x)


def test_a_module_that_fails_only_in_training_is_refused_before_any_round() -> None:
    with pytest.raises(
        FedsampleError, match=r"'model' .*trains \(train\(\) mode.*ValueError: a bug in the training"
    ) as caught:
        simulate(classification_data(0), TrainOnlyBug, [RunSpec(MDSampler(), seed=0)], CONFIG)
    assert len(str(caught.value).splitlines()) == 1


def test_batchnorm_needs_batches_of_two() -> None:
    """BatchNorm raises on one-sample batches in training mode: refused up front, naming the client or batch_size."""
    data = classification_data(0, sizes=(6, 1, 5), sample_shape=(3, 8, 8))
    with pytest.raises(FedsampleError, match=r"'model' .*at least 2 samples.*client 1 holding 1"):
        simulate(data, ConvBN, [RunSpec(MDSampler(), seed=0)], CONFIG)
    with pytest.raises(FedsampleError, match=r"'batch_size' .*at least 2"):
        simulate(
            _images(), ConvBN, [RunSpec(MDSampler(), seed=0)], TrainingConfig(**{**CONFIG.__dict__, "batch_size": 1})
        )


class NoisyConv(nn.Module):
    """A convolution (trained on threads on a CPU) with Gaussian noise drawn from the global generator."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 2, 3, padding=1)
        self.head = nn.Linear(2 * 8 * 8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)
        if self.training:
            h = h + 0.1 * torch.randn_like(h)
        return self.head(h.flatten(1))


def test_a_threaded_model_that_draws_random_numbers_runs_sequentially() -> None:
    """Threads would share the global generator: the model falls back, reproducibly, the caller's state kept."""
    data = _images()
    state = torch.get_rng_state()
    with pytest.warns(FallbackWarning, match="NoisyConv.*global generator"):
        first = _run(NoisyConv, data, "batched")[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        second = _run(NoisyConv, data, "batched")[0]
    assert first.history.info["backend"] == "sequential"
    assert torch.equal(torch.get_rng_state(), state)
    np.testing.assert_array_equal(first.params["head.weight"], second.params["head.weight"])


class TiedAndScratch(nn.Module):
    """Tied input and output embeddings, and a non-persistent buffer: state_dict keys differ from the names."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(80, 6)
        self.out = nn.Linear(6, 80, bias=False)
        self.out.weight = self.embed.weight
        self.register_buffer("scratch", torch.zeros(3), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.embed(x).mean(1))


def test_the_final_state_dict_loads_strictly() -> None:
    data = sequence_data(0, sizes=(5, 7, 6, 4), length=12)
    result = simulate(data, TiedAndScratch, [RunSpec(MDSampler(), seed=0)], CONFIG)[0]
    fresh = TiedAndScratch()
    fresh.load_state_dict(result.state_dict())  # strict: every key, none too many
    assert torch.equal(fresh.out.weight, torch.as_tensor(result.params["embed.weight"]))


class PoisonedBuffer(nn.Module):
    """A float buffer that every training step makes infinite."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(6, 4)
        self.register_buffer("seen", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.seen.add_(float("inf"))
        return self.linear(x)


def test_a_non_finite_buffer_rejects_the_update() -> None:
    """A client whose buffer became NaN or infinite is rejected like a non-finite update: the global buffers
    stay finite and the failures are counted."""
    config = TrainingConfig(**{**CONFIG.__dict__, "max_rejected_rounds": 0, "backend": "sequential"})
    result = simulate(classification_data(0), PoisonedBuffer, [RunSpec(MDSampler(), seed=0)], config)[0]
    assert np.isfinite(result.buffers["seen"]).all()
    assert result.history.rejected is not None
    assert int(result.history.rejected.sum()) > 0


def test_resuming_with_other_extra_metrics_is_refused(tmp_path: Path) -> None:
    data = _images()
    saved: list[SimulationCheckpoint] = []
    config = TrainingConfig(**{**CONFIG.__dict__, "rounds": 4})
    simulate(data, ConvBN, [RunSpec(MDSampler(), seed=1)], config, checkpoint=saved.append, checkpoint_every=2)
    with pytest.raises(FedsampleError, match=r"'resume' .*extra metrics \['kept'\]"):
        simulate(
            data,
            Model(ConvBN, metrics={"kept": lambda o, t: o[:, 0]}),
            [RunSpec(MDSampler(), seed=1)],
            config,
            resume=saved[0],
        )
