"""The client side of :class:`~fedsample.integrations.flower.FedsampleStrategy`: the replies its ClientApp sends.

:func:`query_reply` answers the strategy's queries (the size, the client id, or FedSampling's
randomized answer), :func:`train_locally` trains with fedsample's local SGD and builds the reply
that :func:`train_reply` builds from your own training; :func:`to_array_record` and
:func:`arrays_to_numpy` convert named arrays. All are also importable from
:mod:`fedsample.integrations.flower`. Requires the ``flower`` extra; :func:`train_locally` also
needs the ``torch`` extra.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

from fedsample._imports import require
from fedsample._validation import Interval, NoneOr, check_param, invalid
from fedsample.integrations import flower_fedsampling as private
from fedsample.integrations._flwr import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

if TYPE_CHECKING:
    from fedsample.engine.paper_models import ModelSpec

__all__ = [
    "FIT_SECONDS",
    "MEASURE_LOSSES",
    "REPORT_NORMS",
    "arrays_to_numpy",
    "norm_reply",
    "query_reply",
    "reply_arrays",
    "to_array_record",
    "train_locally",
    "train_reply",
]

# The config key of the first message of a two-phase round (fedsample.integrations.flower_two_phase).
REPORT_NORMS = "report-norms"
# Set in a training message's config when the strategy's sampler reads the per-sample losses
# (train-loss-squares): only then does the client pay the extra forward pass that measures them.
MEASURE_LOSSES = "measure-loss-squares"
# The reply metric with the wall-clock seconds the client spent on the round's local training; the
# strategy hands it to the sampler as the client's round time (Feedback.round_times, Oort's T_i).
FIT_SECONDS = "fit-seconds"


# --- arrays ----------------------------------------------------------------------------------


def to_array_record(params: Mapping[str, Any]) -> ArrayRecord:
    """An ``ArrayRecord`` of named arrays (numpy arrays or CPU tensors), in the mapping's order.

    The names must be the model's parameter names (for the engine's models, those of
    :meth:`~fedsample.engine.paper_models.ModelSpec.init_params`) so that :func:`train_locally` can
    load them.
    """
    return ArrayRecord({name: Array(np.ascontiguousarray(np.asarray(value))) for name, value in params.items()})


def arrays_to_numpy(record: ArrayRecord) -> dict[str, np.ndarray]:
    """The named numpy arrays of an ``ArrayRecord``."""
    return {name: array.numpy() for name, array in record.items()}


def reply_arrays(content: RecordDict) -> ArrayRecord | None:
    """The message's arrays: its record named ``arrays``, else its only array record (``None`` otherwise)."""
    records = content.array_records
    if "arrays" in records:
        return records["arrays"]
    return next(iter(records.values())) if len(records) == 1 else None


# --- replies -----------------------------------------------------------------------------------


def query_reply(
    message: Message,
    *,
    num_examples: int,
    client_id: int | None = None,
    rng: np.random.Generator | None = None,
    max_epsilon: float | None = None,
) -> Message:
    """The answer to the strategy's query, holding only what the query asks for.

    The size query gets the node's ``num-examples`` (and ``client-id``, if given); the client-id
    query gets the ``client-id`` alone. FedSampling's question gets a randomized answer drawn here
    from ``rng`` (:func:`~fedsample.integrations.flower_fedsampling.answer_size_query`, refused
    above ``max_epsilon``); ``rng`` must then be a generator the server cannot know, such as
    ``np.random.default_rng()``. In a Flower simulation the natural ``client_id`` is
    ``context.node_config["partition-id"]``.
    """
    check_param("num_examples", "query_reply", num_examples, Interval(int, 1, None, closed="left"))
    if private.asks_for_answer(message):
        if rng is None:
            raise invalid(
                "rng", "query_reply", "a numpy Generator the server cannot know, for FedSampling's question", rng
            )
        return private.answer_size_query(message, num_examples=num_examples, rng=rng, max_epsilon=max_epsilon)
    config = message.content.config_records.get("config", ConfigRecord())
    metrics = MetricRecord()
    if config.get("fedsample-query") != "client-id":
        metrics["num-examples"] = int(num_examples)
    if client_id is not None:
        check_param("client_id", "query_reply", client_id, Interval(int, 0, None, closed="left"))
        metrics["client-id"] = int(client_id)
    return Message(RecordDict({"metrics": metrics}), reply_to=message)


def train_reply(
    message: Message,
    arrays: ArrayRecord | Mapping[str, Any],
    *,
    num_examples: int | None,
    train_loss: float | None = None,
    gradient_norm: float | None = None,
    local_lr: float | None = None,
    local_steps: int | None = None,
    train_loss_squares: float | None = None,
    fit_seconds: float | None = None,
) -> Message:
    """The reply to a training message, with what the strategy's sampler reads.

    ``arrays`` is the locally trained model ``theta_i`` (same names and shapes as the global one);
    ``train_loss`` the loss at the start of local training (the engine reports the first batch's),
    ``gradient_norm`` the norm of the first mini-batch gradient, ``local_lr`` and ``local_steps``
    the round's ``eta_l`` and ``N`` (samplers turn update norms into gradient scales with them),
    ``train_loss_squares`` the mean squared per-sample loss over the samples trained on (Oort's utility),
    ``fit_seconds`` the wall-clock seconds the local training took (the sampler's round time, Oort's
    system penalty; a finite value ``>= 0``, measured with :func:`time.perf_counter`).
    ``num_examples=None`` leaves the size out (FedSampling's replies).
    """
    check_param("num_examples", "train_reply", num_examples, NoneOr(Interval(int, 0, None, closed="left")))
    check_param("fit_seconds", "train_reply", fit_seconds, NoneOr(Interval(float, 0, math.inf, closed="left")))
    record = arrays if isinstance(arrays, ArrayRecord) else to_array_record(arrays)
    metrics = MetricRecord() if num_examples is None else MetricRecord({"num-examples": int(num_examples)})
    for key, value in (
        ("train-loss", train_loss),
        ("gradient-norm", gradient_norm),
        ("local-lr", local_lr),
        ("local-steps", local_steps),
        ("train-loss-squares", train_loss_squares),
        (FIT_SECONDS, fit_seconds),
    ):
        if value is not None:
            metrics[key] = float(value) if key != "local-steps" else int(value)
    return Message(RecordDict({"arrays": record, "metrics": metrics}), reply_to=message)


def norm_reply(
    message: Message,
    *,
    update_norm: float,
    gradient_norm: float | None = None,
    local_lr: float | None = None,
    local_steps: int | None = None,
) -> Message:
    """The reply to the first message of a two-phase round: the norms, no arrays.

    ``update_norm`` is ``||theta_i - theta||`` of the update the client computed, ``gradient_norm``
    the norm of its first mini-batch gradient (``optimal-distribution`` reads it).
    """
    metrics = MetricRecord({"update-norm": float(update_norm)})
    for key, value in (("gradient-norm", gradient_norm), ("local-lr", local_lr), ("local-steps", local_steps)):
        if value is not None:
            metrics[key] = float(value) if key != "local-steps" else int(value)
    return Message(RecordDict({"metrics": metrics}), reply_to=message)


def train_locally(
    message: Message,
    *,
    model: ModelSpec,
    features: npt.ArrayLike,
    targets: npt.ArrayLike,
    local_steps: int,
    batch_size: int,
    local_lr: float,
    lr_decay: float = 1.0,
    rng: np.random.Generator | None = None,
) -> Message:
    """Train on this client's data with the engine's local SGD and return :func:`train_reply`'s message.

    The batches are those :func:`fedsample.engine.simulate` draws for the same client, round and
    seed (read from the message's ``client-id``, ``round-index`` and ``seed``), ``N = local_steps``
    steps of ``min(B, n_i)`` distinct samples with ``B = batch_size`` (or the selection's
    ``batch_size`` instruction), at ``eta_l = local_lr * lr_decay**t``, on the batched backend;
    so a Flower run and a simulation of the same seed and data give the same models.

    A FedSampling message carries a keep rate instead: the client draws its kept count ``k`` from
    ``rng`` (a generator the server cannot know, :func:`~fedsample.integrations.flower_fedsampling.kept_count`),
    every step trains on the same ``k`` samples, and the reply is the model already weighted,
    ``theta + (k / divisor) (theta_k - theta)``, without ``num-examples`` (``theta`` itself when ``k = 0``).

    The first message of a two-phase round (its config carries ``report-norms``) gets
    :func:`norm_reply`'s answer instead: the same training, and only the norms sent back.
    """
    torch = require("torch", extra="torch", package="torch", owner="train_locally")
    from fedsample.engine.batching import plan_batches
    from fedsample.engine.trainers.base import BatchedBackend
    from fedsample.engine.user_model import bind_model

    started = time.perf_counter()  # the round time reported: the local work, from the message to the reply
    config = message.content.config_records.get("config", ConfigRecord())
    try:
        client = int(cast(int, config["client-id"]))
        t = int(cast(int, config["round-index"]))
        seed = int(cast(int, config["seed"]))
    except KeyError as exc:
        raise invalid("message", "train_locally", "a FedsampleStrategy training message", exc.args[0]) from None
    x = torch.as_tensor(np.array(features))
    if x.is_floating_point():
        x = x.to(torch.float32)
    y = torch.as_tensor(np.array(targets)).to(torch.float32 if model.task == "regression" else torch.long)
    size = int(x.shape[0])
    if size == 0 or y.shape[0] != size:
        raise invalid("targets", "train_locally", f"one target per row of 'features' ({size})", int(y.shape[0]))
    theta = arrays_to_numpy(reply_arrays(message.content) or ArrayRecord())
    weight = 1.0
    reported: int | None = size  # no size in FedSampling's reply
    kept_subset = "batch_size" in config  # a data-level kept subset, as in the engine
    batch = max(round(float(cast(float, config["batch_size"]))), 1) if kept_subset else batch_size
    if private.carries_keep_rate(message):
        if rng is None:
            raise invalid("rng", "train_locally", "a numpy Generator the server cannot know, for FedSampling", rng)
        batch, weight = private.kept_count(message, num_examples=size, rng=rng)
        kept_subset, reported = True, None
        if batch == 0:
            return train_reply(message, theta, num_examples=None)  # no sample kept: no update
    # The engine's batch rule over pooled offsets; here the pool holds this client alone, so every
    # other client id spans no rows, and the batch stream is keyed by (seed, round, client) as there.
    offsets = np.zeros(client + 2, dtype=np.int64)
    offsets[client + 1] = size
    plan = plan_batches(
        seeds=np.array([seed], dtype=np.int64),
        round_index=t,
        clients=np.array([client], dtype=np.int64),
        offsets=offsets,
        steps=local_steps,
        batch_size=batch_size,
        slot_batch_sizes=np.array([batch], dtype=np.int64),
        kept_subsets=np.array([kept_subset]),
    )
    start = {name: torch.as_tensor(np.array(value)).to(torch.float32).unsqueeze(0) for name, value in theta.items()}
    lr = local_lr * lr_decay**t
    measure = bool(config.get(MEASURE_LOSSES, False))
    bound = bind_model(model, task=model.task, owner="train_locally")
    result = BatchedBackend(bound).train(
        start, features=x, targets=y, plan=plan, steps=local_steps, local_lr=lr, measure_losses=measure
    )
    if config.get(REPORT_NORMS, False):
        squared = sum(float(torch.sum(u[0].double() ** 2)) for u in result.updates.values())
        return norm_reply(
            message,
            update_norm=squared**0.5,
            gradient_norm=float(result.gradient_norms[0]),
            local_lr=lr,
            local_steps=local_steps,
        )
    trained = {name: (start[name] + weight * result.updates[name])[0].numpy() for name in start}
    return train_reply(
        message,
        trained,
        num_examples=reported,
        train_loss=float(result.first_loss[0]),
        gradient_norm=float(result.gradient_norms[0]),
        local_lr=lr,
        local_steps=local_steps,
        train_loss_squares=None if result.loss_squares is None else float(result.loss_squares[0]),
        # FedSampling's reply carries no time: it grows with the kept count, which would tell the size.
        fit_seconds=None if reported is None else time.perf_counter() - started,
    )
