"""The ClientApp: answers the strategy's queries and trains with fedsample's local SGD.

With the ``fedsampling`` sampler the node never sends its size: it answers the round's question
with a randomized answer and draws its kept samples itself, from a generator seeded by the
operating system (so the server cannot reproduce it). A node caps the privacy budget it spends per
answer with ``--node-config "... max-epsilon=3.0"``.
"""

from __future__ import annotations

import time

import numpy as np
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
    """Answer what the strategy asks: this node's client id, its size, or FedSampling's randomized answer."""
    client, num_clients, seed = _client(context)
    features, _ = client_rows(num_clients, seed, client)
    cap = context.node_config.get("max-epsilon")
    return query_reply(
        message,
        num_examples=len(features),
        client_id=client,
        rng=np.random.default_rng(),  # the node's own randomness, unknown to the server
        max_epsilon=None if cap is None else float(cap),
    )


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
        rng=np.random.default_rng(),  # FedSampling's kept samples, drawn where the server cannot see
    )
