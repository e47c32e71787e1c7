"""ServerUpdate: the engine's server update in a user's loop, on state dicts, numpy arrays and ArrayRecords."""

from __future__ import annotations

import copy
import io
import itertools
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import fedsample  # noqa: E402
from fedsample.data import FederatedDataset  # noqa: E402
from fedsample.engine import RunSpec, TrainingConfig, make_server_optimizer, simulate  # noqa: E402
from fedsample.errors import FedsampleError  # noqa: E402
from fedsample.integrations import ServerUpdate  # noqa: E402
from fedsample.rng import Stream, stream_rng  # noqa: E402

# --- the engine's round, reproduced with a plain PyTorch loop and ServerUpdate --------------------


def _module() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 5), nn.BatchNorm1d(5), nn.ReLU(), nn.Linear(5, 1))


def _federation(sizes: list[int], seed: int = 0) -> FederatedDataset:
    rng = np.random.default_rng(seed)
    total = sum(sizes)
    x = rng.normal(size=(total, 3)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5], dtype=np.float32) + rng.normal(scale=0.1, size=total)).astype(np.float32)
    indptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return FederatedDataset(x, y, indptr, x, y, indptr, task="regression")


def _local_training(module: nn.Module, start: dict[str, Any], x: Any, y: Any, *, steps: int, lr: float) -> Any:
    """Full-batch local SGD on the mean squared error, as the engine's sequential backend trains a client."""
    local = copy.deepcopy(module)
    local.load_state_dict(start)
    local.train()
    optimizer = torch.optim.SGD(local.parameters(), lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        ((local(x).squeeze(-1) - y) ** 2).mean().backward()
        optimizer.step()
    return local.state_dict()


def _own_loop(data: FederatedDataset, sampler: Any, config: TrainingConfig, update: ServerUpdate) -> dict[str, Any]:
    """The rounds of ``simulate`` (no failures, full batches) in a plain loop: the final state dict."""
    module = _module()
    theta = {n: t.clone() for n, t in module.state_dict().items()}
    sizes = np.diff(data.train_indptr)
    state = sampler.init(fedsample.Federation.from_sizes(sizes), config.num_sampled)
    x, y = torch.tensor(data.train_features), torch.tensor(data.train_targets)
    for t in range(config.rounds):
        clients, weights = sampler.sample(state, stream_rng(0, Stream.SAMPLING, t)).distinct()
        trained = []
        for i in clients:
            rows = slice(int(data.train_indptr[i]), int(data.train_indptr[i + 1]))
            trained.append(
                _local_training(module, theta, x[rows], y[rows], steps=config.local_steps, lr=config.local_lr)
            )
        theta = update.apply(theta, trained, weights)
    return theta


@pytest.mark.parametrize(
    ("server", "rounds"),
    [("sgd", 2), ("fedavgm", 3), ("fedadam", 3)],
)
def test_it_moves_a_batchnorm_model_as_the_engine_does(server: str, rounds: int) -> None:
    """Parameters by the server optimizer, BatchNorm's running statistics by their weighted mean and
    num_batches_tracked rounded: the engine's final model, to 1e-6."""
    data = _federation([8, 8, 8, 8])
    optimizer = make_server_optimizer(server, lr=0.5) if server != "sgd" else make_server_optimizer("sgd")
    config = TrainingConfig(
        rounds=rounds, num_sampled=4, local_steps=2, batch_size=8, local_lr=0.1, server=optimizer, backend="sequential"
    )
    [engine] = simulate(data, _module(), [RunSpec(fedsample.make_sampler("full"), seed=0)], config)
    buffers = dict(_module().named_buffers())
    mine = _own_loop(data, fedsample.make_sampler("full"), config, ServerUpdate(optimizer, buffers=buffers))
    expected = engine.state_dict()
    assert set(mine) == set(expected)
    for name, value in expected.items():
        assert mine[name].dtype == value.dtype, name
        torch.testing.assert_close(mine[name], value, atol=1e-6, rtol=0, msg=name)
    assert int(mine["1.num_batches_tracked"]) == 2 * rounds


def test_it_moves_the_model_as_the_engine_does_when_the_weights_do_not_sum_to_one() -> None:
    """OSMD's draws with replacement over unequal clients: its weights sum to 17/12 in round 0 here."""
    data = _federation([4, 6, 10, 12], seed=1)
    config = TrainingConfig(
        rounds=1, num_sampled=3, local_steps=3, batch_size=12, local_lr=0.1, backend="sequential", importance="size"
    )
    sampler = fedsample.make_sampler("osmd", replace=True)
    state = sampler.init(fedsample.Federation.from_sizes([4, 6, 10, 12]), 3)
    weight_sum = float(sampler.sample(state, stream_rng(0, Stream.SAMPLING, 0)).weights.sum())
    assert weight_sum == pytest.approx(17 / 12)
    [engine] = simulate(data, _module(), [RunSpec(sampler, seed=0)], config)
    buffers = dict(_module().named_buffers())
    mine = _own_loop(data, sampler, config, ServerUpdate(buffers=buffers))
    for name, value in engine.state_dict().items():
        torch.testing.assert_close(mine[name], value, atol=1e-6, rtol=0, msg=name)


# --- the update is a step from theta, not an average ----------------------------------------------


def test_weights_summing_to_two_thirds_keep_the_model_where_the_naive_average_shrinks_it() -> None:
    """Issue 26: OSMD's round weights summed to 0.667. Clients that barely moved leave theta nearly
    where it was; sum_i w_i theta_i shrinks it by a third."""
    rng = np.random.default_rng(0)
    theta = {"w": rng.normal(size=(4, 3)), "b": rng.normal(size=3)}
    clients = [{n: v + 1e-3 * rng.normal(size=v.shape) for n, v in theta.items()} for _ in range(2)]
    weights = np.array([0.4, 0.267])
    new = ServerUpdate().apply(theta, clients, weights)
    naive = {n: sum(w * c[n] for w, c in zip(weights, clients, strict=True)) for n in theta}
    for name, value in theta.items():
        expected = value + sum(w * (c[name] - value) for w, c in zip(weights, clients, strict=True))
        np.testing.assert_allclose(new[name], expected, rtol=0, atol=1e-12)
        assert np.linalg.norm(new[name] - value) < 1e-2 * np.linalg.norm(value)
        # The average is 0.667 theta plus the weighted updates: a third of the model is lost.
        np.testing.assert_allclose(np.linalg.norm(naive[name]) / np.linalg.norm(value), 0.667, atol=5e-3)
        assert np.linalg.norm(naive[name] - new[name]) > 0.3 * np.linalg.norm(value)


def test_buffers_take_the_weighted_mean_and_integer_buffers_are_rounded() -> None:
    theta = {"w": torch.ones(2), "var": torch.ones(2), "count": torch.tensor(10)}
    clients = [
        {"w": torch.full((2,), 2.0), "var": torch.full((2,), 3.0), "count": torch.tensor(12)},
        {"w": torch.zeros(2), "var": torch.full((2,), 6.0), "count": torch.tensor(13)},
    ]
    new = ServerUpdate(buffers=["var"]).apply(theta, clients, [0.4, 0.267])
    share = 0.4 / 0.667
    torch.testing.assert_close(new["var"], torch.full((2,), 3 * share + 6 * (1 - share)))
    assert new["count"].dtype == torch.int64
    assert int(new["count"]) == round(12 * share + 13 * (1 - share))
    torch.testing.assert_close(new["w"], torch.full((2,), 1 + 0.4 * 1 - 0.267 * 1))
    # Weights summing to zero leave the buffers as they were.
    kept = ServerUpdate(buffers=["var"]).apply(theta, clients, [0.0, 0.0])
    torch.testing.assert_close(kept["var"], theta["var"])
    assert int(kept["count"]) == 10


# --- every kind of model gives the same result ------------------------------------------------------


def _rounds(kind: Callable[[dict[str, np.ndarray]], Any], unkind: Callable[[Any], dict[str, np.ndarray]]) -> Any:
    """Three FedAdam rounds of a BatchNorm model given as ``kind``; the final model as named arrays."""
    module = _module()
    names = list(module.state_dict())
    buffers: list[str | int] = [n for n, _ in module.named_buffers()]
    if kind is _as_list:
        buffers = [names.index(str(n)) for n in buffers]
    update = ServerUpdate(make_server_optimizer("fedadam", lr=0.1), buffers=buffers)
    theta = {n: t.numpy().copy() for n, t in module.state_dict().items()}
    rng = np.random.default_rng(3)
    model = kind(theta)
    for _ in range(3):
        current = unkind(model)
        clients = [
            kind(
                {
                    n: v + rng.normal(size=v.shape).astype(v.dtype) if v.dtype.kind == "f" else np.asarray(v + 1)
                    for n, v in current.items()
                }
            )
            for _ in range(3)
        ]
        model = update.apply(model, clients, np.array([0.5, 0.3, 0.4]))
    return unkind(model)


def _as_list(arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
    return list(arrays.values())


def _from_list(model: list[np.ndarray]) -> dict[str, np.ndarray]:
    return dict(zip(_module().state_dict(), model, strict=True))


def _as_record(arrays: dict[str, np.ndarray]) -> Any:
    from flwr.app import Array, ArrayRecord

    return ArrayRecord({n: Array(np.ascontiguousarray(v)) for n, v in arrays.items()})


KINDS: dict[str, tuple[Callable[[dict[str, np.ndarray]], Any], Callable[[Any], dict[str, np.ndarray]]]] = {
    "torch state dict": (
        lambda a: {n: torch.from_numpy(v.copy()) for n, v in a.items()},
        lambda m: {n: t.numpy() for n, t in m.items()},
    ),
    "dict of numpy arrays": (lambda a: dict(a), lambda m: dict(m)),
    "list of numpy arrays": (_as_list, _from_list),
    "Flower ArrayRecord": (_as_record, lambda m: {n: a.numpy() for n, a in m.items()}),
}


def test_the_model_kinds_give_the_same_result() -> None:
    pytest.importorskip("flwr")
    results = {name: _rounds(*pair) for name, pair in KINDS.items()}
    reference = results.pop("torch state dict")
    for name, result in results.items():
        assert list(result) == list(reference), name
        for key, value in reference.items():
            assert result[key].dtype == value.dtype, (name, key)
            np.testing.assert_array_equal(result[key], value, err_msg=f"{name}: {key}")


def test_the_result_keeps_the_kind_and_the_inputs_are_left_alone() -> None:
    theta = {"w": torch.ones(2, dtype=torch.float64)}
    client = {"w": torch.full((2,), 3.0, dtype=torch.float64)}
    new = ServerUpdate().apply(theta, [client], [0.5])
    assert isinstance(new["w"], torch.Tensor)
    assert new["w"].dtype == torch.float64
    torch.testing.assert_close(new["w"], torch.full((2,), 2.0, dtype=torch.float64))
    torch.testing.assert_close(theta["w"], torch.ones(2, dtype=torch.float64))
    listed = ServerUpdate().apply([np.ones(2, dtype=np.float32)], [[np.full(2, 3.0, dtype=np.float32)]], [0.5])
    assert isinstance(listed, list)
    assert listed[0].dtype == np.float32
    np.testing.assert_array_equal(listed[0], np.full(2, 2.0, dtype=np.float32))


def test_importing_it_imports_no_flower() -> None:
    code = "import sys, fedsample.integrations.server_update; assert 'flwr' not in sys.modules, 'flwr imported'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


# --- the optimizer's state is carried from round to round -----------------------------------------


def _constant_rounds(update: ServerUpdate, theta: dict[str, Any], rounds: int) -> list[dict[str, Any]]:
    """``rounds`` rounds in which two clients move theta by +1 and +3 (weights 0.5, 0.25): delta = 1.25."""
    models = [theta]
    for _ in range(rounds):
        current = models[-1]
        clients = [{n: v + 1.0 for n, v in current.items()}, {n: v + 3.0 for n, v in current.items()}]
        models.append(update.apply(current, clients, [0.5, 0.25]))
    return models


def test_fedavgm_carries_its_momentum() -> None:
    theta = {"w": np.zeros(3)}
    models = _constant_rounds(ServerUpdate(make_server_optimizer("fedavgm", lr=1.0, beta=0.9)), theta, 3)
    steps = [float((b["w"] - a["w"])[0]) for a, b in itertools.pairwise(models)]
    # m_1 = 1.25, m_2 = 0.9 m_1 + 1.25, m_3 = 0.9 m_2 + 1.25: each step is the momentum.
    np.testing.assert_allclose(steps, [1.25, 1.25 * 1.9, 1.25 * (1 + 0.9 * 1.9)], rtol=1e-12)


@pytest.mark.parametrize("name", ["fedavgm", "fedadam", "fedyogi"])
def test_the_state_round_trips_through_torch_save_and_continues_exactly(name: str) -> None:
    theta = {"w": np.linspace(-1, 1, 5), "b": np.zeros(2)}
    optimizer = make_server_optimizer(name, lr=0.1)
    going = ServerUpdate(optimizer)
    models = _constant_rounds(going, theta, 2)
    buffer = io.BytesIO()
    torch.save(going.state_dict(), buffer)
    buffer.seek(0)
    resumed = ServerUpdate(make_server_optimizer(name, lr=0.1))
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    assert resumed.rounds == 2
    # Saved again before any round, the loaded state is what was saved.
    again = resumed.state_dict()
    assert again["rounds"] == 2
    assert torch.equal(again["state"]["momentum"]["w"], going.state_dict()["state"]["momentum"]["w"])
    after_going = _constant_rounds(going, models[-1], 2)
    after_resumed = _constant_rounds(resumed, models[-1], 2)
    fresh = _constant_rounds(ServerUpdate(make_server_optimizer(name, lr=0.1)), models[-1], 2)
    for key in theta:
        np.testing.assert_array_equal(after_resumed[-1][key], after_going[-1][key])
        # Without the state the next rounds differ: the state is what carries the optimizer.
        assert not np.allclose(fresh[-1][key], after_going[-1][key])


# --- bad input is one line naming the parameter ----------------------------------------------------


def _theta() -> dict[str, Any]:
    return {"w": torch.ones(2, 3), "b": torch.zeros(3)}


def _client(**changes: Any) -> dict[str, Any]:
    model = {"w": torch.full((2, 3), 2.0), "b": torch.ones(3)}
    model.update(changes)
    return {n: v for n, v in model.items() if v is not None}


def _apply(global_model: Any = None, clients: Any = None, weights: Any = None, **kwargs: Any) -> Callable[[], Any]:
    def call() -> Any:
        update = ServerUpdate(**kwargs)
        g = _theta() if global_model is None else global_model
        c = [_client(), _client()] if clients is None else clients
        return update.apply(g, c, [0.5, 0.5] if weights is None else weights)

    return call


def _changed_model() -> Any:
    update = ServerUpdate(make_server_optimizer("fedadam"))
    update.apply(_theta(), [_client()], [1.0])
    return update.apply({"w": torch.ones(2, 4), "b": torch.zeros(3)}, [_client(w=torch.ones(2, 4))], [1.0])


def _loaded_elsewhere() -> Any:
    first = ServerUpdate(make_server_optimizer("fedadam"))
    first.apply(_theta(), [_client()], [1.0])
    second = ServerUpdate(make_server_optimizer("fedadam"))
    second.load_state_dict(first.state_dict())
    return second.apply({"v": torch.ones(4)}, [{"v": torch.zeros(4)}], [1.0])


def _load(state: Any, name: str = "fedadam") -> Callable[[], Any]:
    return lambda: ServerUpdate(make_server_optimizer(name)).load_state_dict(state)


def _saved(name: str) -> dict[str, Any]:
    update = ServerUpdate(make_server_optimizer(name))
    update.apply(_theta(), [_client()], [1.0])
    return update.state_dict()


BAD: dict[str, tuple[Callable[[], Any], str, str]] = {
    "empty global model": (_apply(global_model={}), "global_model", "not empty"),
    "global model of text": (_apply(global_model="model"), "global_model", "a PyTorch state dict"),
    "tensors and arrays mixed": (
        _apply(global_model={"w": torch.ones(2), "b": np.zeros(3)}),
        "global_model",
        "one kind",
    ),
    "NaN in the global model": (
        _apply(global_model={"w": torch.full((2, 3), np.nan), "b": torch.zeros(3)}),
        "global_model",
        "finite",
    ),
    "complex global model": (_apply(global_model={"w": np.ones(2, dtype=complex)}), "global_model", "real numbers"),
    "integer keys": (_apply(global_model={1: torch.ones(2)}), "global_model", "named by strings"),
    "empty round": (_apply(clients=[]), "client_models", "non-empty list"),
    "clients not a list": (_apply(clients=_client()), "client_models", "non-empty list"),
    "missing entry": (_apply(clients=[_client(b=None)]), "client_models", "missing 'b'"),
    "extra entry": (_apply(clients=[_client(c=torch.ones(1))]), "client_models", "unexpected 'c'"),
    "wrong shape": (_apply(clients=[_client(w=torch.ones(3, 2))]), "client_models", "shape (3, 2)"),
    "wrong dtype": (_apply(clients=[_client(w=torch.ones(2, 3, dtype=torch.float64))]), "client_models", "float64"),
    "NaN in a client": (
        _apply(clients=[_client(), _client(b=torch.tensor([0.0, np.nan, 0.0]))]),
        "client_models",
        "client 1",
    ),
    "infinity in a client": (
        _apply(clients=[_client(w=torch.full((2, 3), np.inf))]),
        "client_models",
        "NaN or infinity",
    ),
    "client of another kind": (
        _apply(clients=[{"w": np.ones((2, 3)), "b": np.ones(3)}]),
        "client_models",
        "kind 'numpy'",
    ),
    "client not a model": (_apply(clients=[None]), "client_models", "client 0"),
    "too few weights": (_apply(weights=[1.0]), "weights", "2 finite numbers"),
    "too many weights": (_apply(weights=[1.0, 1.0, 1.0]), "weights", "shape (3,)"),
    "NaN weight": (_apply(weights=[0.5, np.nan]), "weights", "finite"),
    "infinite weight": (_apply(weights=torch.tensor([0.5, float("inf")])), "weights", "finite"),
    "weights as a matrix": (_apply(weights=[[0.5, 0.5]]), "weights", "shape (1, 2)"),
    "weights as text": (_apply(weights=["a", "b"]), "weights", "finite numbers"),
    "weights of no length": (_apply(weights=0.5), "weights", "shape ()"),
    "unknown buffer": (_apply(buffers=["running_mean"]), "buffers", "'running_mean'"),
    "buffer of no name": (_apply(buffers=[1.5]), "buffers", "names"),
    "not an optimizer": (_apply(optimizer="fedadam"), "optimizer", "a server optimizer"),
    "model changed between rounds": (_changed_model, "global_model", "the model of the rounds before"),
    "a loaded state of another model": (_loaded_elsewhere, "global_model", "whose state was loaded"),
    "state of another optimizer": (_load(_saved("fedavgm")), "state_dict", "'fedadam'"),
    "not a state dict": (_load({"momentum": 1}), "state_dict", "ServerUpdate.state_dict()"),
    "state of another version": (_load({**_saved("fedadam"), "version": 9}), "state_dict", "version 9"),
    "negative rounds": (_load({**_saved("fedadam"), "rounds": -1}), "state_dict", "'rounds'"),
    "state with a field missing": (
        _load({**_saved("fedadam"), "state": {"type": "AdaptiveState", "steps": 1}}),
        "state_dict",
        "AdaptiveState",
    ),
    "state holding NaN": (
        _load(
            {**_saved("fedavgm"), "state": {"type": "MomentumState", "momentum": {"w": torch.tensor(np.nan)}}},
            "fedavgm",
        ),
        "state_dict",
        "'momentum'",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_line_naming_the_parameter(case: str) -> None:
    call, parameter, fragment = BAD[case]
    with pytest.raises(FedsampleError) as caught:
        call()
    message = str(caught.value)
    assert len(message.splitlines()) == 1, message
    assert caught.value.parameter == parameter, message
    assert f"The {parameter!r} parameter of ServerUpdate" in message, message
    assert fragment in message, message
