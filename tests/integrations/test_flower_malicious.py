"""One malicious SuperNode in a real Flower simulation (issue 24): three SuperNodes, one of which sends a
crafted training reply every round (float64 arrays of 1e300, then complex arrays, then a local learning
rate of 1e-100, then garbage bytes). The run completes, the two honest nodes' rounds aggregate, the
model stays finite, and the rounds' failure counts show each rejection.

The ClientApp needs numpy alone (no torch): the honest nodes move the model a tenth of the way to a
target of their own, so the expected model is known in closed form.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

flwr = pytest.importorskip("flwr")
pytest.importorskip("ray", reason="Flower's simulation needs the flwr[simulation] extra")

from flwr.app import Array, Context, Message, MetricRecord, RecordDict  # noqa: E402

import fedsample  # noqa: E402
from fedsample.integrations.flower import FedsampleStrategy, query_reply, to_array_record, train_reply  # noqa: E402

NUM_NODES, ROUNDS, MALICIOUS = 3, 4, 2  # partition 2 is the malicious node
SIZES = [20, 40, 60]
START = {"w": np.zeros((3, 2), dtype=np.float32), "b": np.zeros(2, dtype=np.float32)}
# What the malicious node sends in each round, and the failure kind the round must count.
ATTACKS = {1: ("float64-1e300", "rejected"), 2: ("complex64", "malformed"), 3: ("local-lr=1e-100", "malformed")}
ATTACKS[4] = ("garbage-bytes", "malformed")


def _target(client: int) -> dict[str, np.ndarray]:
    return {n: np.full(v.shape, float(client + 1), dtype=np.float32) for n, v in START.items()}


def _honest(theta: dict[str, np.ndarray], client: int) -> dict[str, np.ndarray]:
    """One honest node's training: a tenth of the way from ``theta`` to its target."""
    return {n: (v + np.float32(0.1) * (_target(client)[n] - v)).astype(np.float32) for n, v in theta.items()}


def _crafted(message: Message, attack: str) -> Message:
    theta = {n: a.numpy() for n, a in message.content["arrays"].items()}  # type: ignore[union-attr]
    metrics = MetricRecord({"num-examples": SIZES[MALICIOUS], "train-loss": 1.0, "local-lr": 0.1, "local-steps": 1})
    arrays = to_array_record(_honest(theta, MALICIOUS))
    if attack == "float64-1e300":
        arrays = to_array_record({n: np.full(v.shape, 1e300) for n, v in theta.items()})
    elif attack == "complex64":
        arrays = to_array_record({n: v.astype(np.complex64) for n, v in theta.items()})
    elif attack == "local-lr=1e-100":
        metrics["local-lr"] = 1e-100
    else:
        arrays["w"] = Array(dtype="float32", shape=(3, 2), stype="numpy.ndarray", data=b"garbage" * 5)
    return Message(RecordDict({"arrays": arrays, "metrics": metrics}), reply_to=message)


def _client_app() -> Any:
    from flwr.clientapp import ClientApp

    app = ClientApp()

    @app.query()
    def query(message: Message, context: Context) -> Message:
        client = int(context.node_config["partition-id"])  # type: ignore[arg-type]
        return query_reply(message, num_examples=SIZES[client], client_id=client)

    @app.train()
    def train(message: Message, context: Context) -> Message:
        client = int(context.node_config["partition-id"])  # type: ignore[arg-type]
        server_round = int(message.content["config"]["server-round"])  # type: ignore[call-overload]
        if client == MALICIOUS:
            return _crafted(message, ATTACKS[server_round][0])
        theta = {n: a.numpy() for n, a in message.content["arrays"].items()}  # type: ignore[union-attr]
        return train_reply(message, _honest(theta, client), num_examples=SIZES[client], local_lr=0.1, local_steps=1)

    return app


def test_one_malicious_supernode_cannot_take_the_server_down_nor_poison_the_model() -> None:
    import ray.cloudpickle
    from flwr.serverapp import Grid, ServerApp
    from flwr.simulation import run_simulation

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray's workers get the app by value
    out: dict[str, Any] = {}
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = FedsampleStrategy(
            fedsample.make_sampler("full"), num_sampled=NUM_NODES, num_nodes=NUM_NODES, policy="renormalise"
        )
        out["result"] = strategy.start(grid, to_array_record(START), num_rounds=ROUNDS, timeout=120.0)
        out["strategy"] = strategy

    backend = {"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": 1, "include_dashboard": False}}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FLWR_TELEMETRY_ENABLED", "0")
        run_simulation(server, _client_app(), num_supernodes=NUM_NODES, backend_config=backend)

    assert "result" in out, "the ServerApp did not finish"
    strategy, result = out["strategy"], out["result"]
    assert sorted(result.train_metrics_clientapp) == list(range(1, ROUNDS + 1))  # every round ran
    theta = {n: v.astype(np.float64) for n, v in START.items()}
    p = np.asarray(SIZES, dtype=np.float64) / sum(SIZES)
    for server_round, (_, kind) in ATTACKS.items():
        record = strategy.rounds[server_round - 1]
        metrics = result.train_metrics_clientapp[server_round]
        assert record.clients.tolist() == [0, 1, 2]
        assert record.returned.tolist() == [True, True, False]  # the honest nodes' round aggregated
        assert (metrics[kind], metrics["failures"], metrics["returned"]) == (1, 1, 2)
        # Renormalised over the honest two: theta + sum_i w'_i (theta_i - theta), w' = p_i / (p_0 + p_1).
        weights = p[:2] * p.sum() / p[:2].sum()
        np.testing.assert_allclose(record.applied[:2], weights)
        trained = [_honest({n: v.astype(np.float32) for n, v in theta.items()}, c) for c in (0, 1)]
        theta = {n: v + sum(w * (t[n] - v) for w, t in zip(weights, trained, strict=True)) for n, v in theta.items()}
    for name, array in result.arrays.items():
        assert np.all(np.isfinite(array.numpy()))
        np.testing.assert_allclose(array.numpy(), theta[name], rtol=0, atol=1e-5)
