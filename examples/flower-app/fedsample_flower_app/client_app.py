"""The ClientApp: answers the strategy's size query and trains with fedsample's local SGD."""

from __future__ import annotations

import time

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fedsample.integrations.flower import query_reply, train_locally
from fedsample_flower_app.task import MODEL, client_rows

app = ClientApp()


def _client(context: Context) -> tuple[int, int, int]:
    config = context.run_config
    return int(context.node_config["partition-id"]), int(config["num-clients"]), int(config["data-seed"])


@app.query()
def query(message: Message, context: Context) -> Message:
    """Tell the strategy how many samples this node holds and which client it is."""
    client, num_clients, seed = _client(context)
    features, _ = client_rows(num_clients, seed, client)
    return query_reply(message, num_examples=len(features), client_id=client)


@app.train()
def train(message: Message, context: Context) -> Message:
    """N local SGD steps from the global model, with the batches fedsample's engine would draw."""
    client, num_clients, seed = _client(context)
    config = context.run_config
    delay = float(config["train-delay"])
    if delay > 0:
        time.sleep(delay)
    features, targets = client_rows(num_clients, seed, client)
    return train_locally(
        message,
        model=MODEL,
        features=features,
        targets=targets,
        local_steps=int(config["local-steps"]),
        batch_size=int(config["batch-size"]),
        local_lr=float(config["local-lr"]),
    )
