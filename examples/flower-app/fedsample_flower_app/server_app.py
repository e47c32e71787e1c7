"""The ServerApp: FedsampleStrategy with the sampler named in the run config."""

from __future__ import annotations

import json
from pathlib import Path

from flwr.app import Context, MetricRecord
from flwr.serverapp import Grid, ServerApp

import fedsample
from fedsample.engine import initial_params
from fedsample.integrations.flower import FedsampleStrategy, arrays_to_numpy, to_array_record
from fedsample_flower_app.task import MODEL, evaluate_model

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    config = context.run_config
    num_clients, data_seed = int(config["num-clients"]), int(config["data-seed"])
    name = str(config["sampler"])
    # FedSampling's K must be given: its default (m times the mean size) needs sizes the server never sees.
    params = {"target_samples": int(config["target-samples"])} if name == "fedsampling" else {}
    strategy = FedsampleStrategy(
        fedsample.make_sampler(name, **params),
        num_sampled=int(config["num-sampled"]),
        seed=int(config["seed"]),
        server_lr=float(config["server-lr"]),
        policy=str(config["policy"]),
        timeout=float(config["timeout"]),
        num_nodes=num_clients,  # client ids (and sizes, but for FedSampling) come from the first query
    )

    def evaluate(server_round: int, arrays: object) -> MetricRecord:
        loss, accuracy = evaluate_model(arrays_to_numpy(arrays), num_clients, data_seed)  # type: ignore[arg-type]
        return MetricRecord({"test-loss": loss, "test-accuracy": accuracy})

    start = {name: value.numpy() for name, value in initial_params(MODEL, int(config["seed"])).items()}
    result = strategy.start(
        grid,
        to_array_record(start),
        num_rounds=int(config["num-server-rounds"]),
        evaluate_fn=evaluate,
    )
    path = str(config["results-path"])
    if path:
        summary = {
            "rounds": [
                {
                    "round": record.round,
                    "clients": record.clients.tolist(),
                    "weights": record.weights.tolist(),
                    "returned": record.returned.tolist(),
                    "failures": dict(record.failures),
                }
                for record in strategy.rounds
            ],
            "train_metrics": {str(k): dict(v) for k, v in result.train_metrics_clientapp.items()},
            "evaluate_metrics": {str(k): dict(v) for k, v in result.evaluate_metrics_serverapp.items()},
            "sizes": [] if strategy.sizes is None else strategy.sizes.tolist(),
        }
        if isinstance(strategy.sampler, fedsample.FedSamplingSampler):
            summary["privacy"] = strategy.sampler.privacy(strategy.sampler_state).to_dict()
        Path(path).write_text(json.dumps(summary, indent=1))
