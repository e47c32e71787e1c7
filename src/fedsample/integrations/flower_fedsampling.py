"""FedSampling over Flower with every client's size kept on the client (paper 004's protocol).

With a :class:`~fedsample.samplers.FedSamplingSampler`, :class:`~fedsample.integrations.flower.FedsampleStrategy`
never asks a node for its size. Round ``t`` goes:

1. **Question** (server). Every available node gets a ``query`` message whose ``"config"`` holds
   the mechanism: ``fedsample-query = "fedsampling-answer"``, ``size-threshold`` (``M``),
   ``response-probability`` (``alpha``) and ``epsilon`` (``ln(((M - 2) alpha + 1) / (1 - alpha))``).
2. **Answer** (client, :func:`answer_size_query`). The node draws its randomized answer itself
   with the sampler's own mechanism (:meth:`FedSamplingSampler.answers` on the node's
   one-client state: its size clipped to ``M - 1`` with probability ``alpha``, else uniform on
   ``1..M-1``), from a generator the server cannot know, and sends that answer alone.
3. **Rate** (server). :meth:`FedSamplingSampler.rate_from_answers` turns the answers into the
   estimate ``N~`` (004, eq. 2), the keep rate ``min(1, K / N~)`` and the divisor; every node that
   answered gets a ``train`` message carrying ``fedsampling-rate`` and ``fedsampling-divisor``.
4. **Training** (client, :func:`kept_count`, then ``train_locally``). The node draws its kept count
   ``k ~ Binomial(n, rate)`` (the design's own draw, :meth:`DataLevelDesign.draw_counts`), trains on
   ``k`` of its samples and returns the model already weighted, ``theta + (k / divisor)
   (theta_k - theta)``: FedSampling's return ``-eta (1/K) sum_kept g`` for one local step. Neither
   ``n`` nor ``k`` is sent.
5. **Aggregation** (server). The returns are added with weight one (times the failure policy's
   correction): ``theta <- theta + eta_g sum_c (returned_c - theta)``.

What the guarantee covers: each answer is ``epsilon``-LDP for the node's size (one answer per
round: ``T`` rounds cost ``T epsilon`` under basic composition, see :mod:`fedsample.samplers.schemes.fedsampling_ldp`).
The trained models are not privatised: their updates depend on ``k`` and on the data, as in any
federated training without secure aggregation or differentially private training.
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np

from fedsample._arrays import IntArray
from fedsample._validation import Interval, NoneOr, check_param, invalid
from fedsample.designs import DataLevelDesign
from fedsample.errors import FedsampleError
from fedsample.federation import Federation
from fedsample.integrations._flwr import ConfigRecord, Message, MetricRecord, RecordDict
from fedsample.participation.policies import build_policy
from fedsample.samplers import DataLevelState, FedSamplingSampler, Selection
from fedsample.samplers.schemes.fedsampling_ldp import epsilon_of

__all__ = [
    "ANSWER",
    "QUESTION",
    "answer_size_query",
    "asks_for_answer",
    "carries_keep_rate",
    "check_strategy",
    "kept_count",
    "question_config",
    "read_answer",
    "round_selection",
    "server_state",
    "train_config",
]

QUESTION_KEY = "fedsample-query"
QUESTION = "fedsampling-answer"
ANSWER = "fedsampling-answer"
SIZE_THRESHOLD = "size-threshold"
RESPONSE_PROBABILITY = "response-probability"
EPSILON = "epsilon"
RATE = "fedsampling-rate"
DIVISOR = "fedsampling-divisor"

_STRATEGY = "FedsampleStrategy"


# --- the server's side -----------------------------------------------------------------------


def check_strategy(
    sampler: FedSamplingSampler, *, sizes: object, importance: str, policy: str, over_selection: float
) -> None:
    """Refuse the strategy settings that would need a size or a kept count on the server."""
    if sizes is not None:
        raise invalid(
            "sizes", _STRATEGY, "left out with a FedSampling sampler (the server must not know them)", "given"
        )
    if sampler.target_samples is None:
        raise invalid(
            "target_samples",
            "FedSamplingSampler (in FedsampleStrategy)",
            "given: its default, m times the mean client size, needs the sizes the server must not know",
            None,
        )
    if sampler.normalize:
        raise invalid(
            "normalize",
            "FedSamplingSampler (in FedsampleStrategy)",
            "False: the weights k_c / sum_j k_j need the kept counts, which the clients do not send",
            True,
        )
    if importance != "size":
        raise invalid(
            "importance", _STRATEGY, "'size' with a FedSampling sampler (it samples data uniformly)", importance
        )
    if build_policy(policy).renormalises:
        raise invalid(
            "policy",
            _STRATEGY,
            "'ignore' or 'inverse-probability' with a FedSampling sampler (renormalising needs the weights "
            "k_c / K, which the clients apply themselves)",
            policy,
        )
    if over_selection != 0:
        raise invalid("over_selection", _STRATEGY, "0 with a FedSampling sampler (every node answers)", over_selection)


def server_state(sampler: FedSamplingSampler) -> DataLevelState:
    """The sampler's state as the server holds it: ``K``, ``alpha`` and ``M``, and no size at all."""
    return DataLevelState(
        sizes=np.zeros(0, dtype=np.int64),
        importances=np.zeros(0),
        target=cast(int, sampler.target_samples),
        response_probability=sampler.truth_probability,
        size_threshold=sampler.size_threshold,
    )


def question_config(state: DataLevelState, round_index: int) -> ConfigRecord:
    """The config of round ``round_index``'s question: the mechanism each node answers with."""
    return ConfigRecord(
        {
            QUESTION_KEY: QUESTION,
            "round-index": int(round_index),
            SIZE_THRESHOLD: int(state.size_threshold),
            RESPONSE_PROBABILITY: float(state.response_probability),
            EPSILON: epsilon_of(state.response_probability, state.size_threshold),
        }
    )


def read_answer(reply: Message, size_threshold: int) -> int | None:
    """A node's randomized answer, or ``None`` when the reply is an error or holds no valid answer."""
    if reply.has_error():
        return None
    records = reply.content.metric_records
    value = next((record[ANSWER] for record in records.values() if ANSWER in record), None)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= size_threshold - 1:
        return None
    return int(value)


def round_selection(clients: IntArray, estimate: float, rate: float) -> Selection:
    """The round as the server knows it: every answering client, weight one (it weighs its own return)."""
    return Selection(
        clients=clients,
        weights=np.ones(clients.size),
        instructions={"data_rate": np.full(clients.size, rate), "estimated_total": np.full(clients.size, estimate)},
    )


def train_config(rate: float, divisor: float) -> dict[str, float]:
    """What a training message adds to its config: the keep rate and the divisor ``rate N~``."""
    return {RATE: float(rate), DIVISOR: float(divisor)}


# --- the client's side -----------------------------------------------------------------------


def _config(message: Message) -> ConfigRecord:
    return message.content.config_records.get("config", ConfigRecord())


def asks_for_answer(message: Message) -> bool:
    """Whether ``message`` is the strategy's FedSampling question (a randomized answer, not the size)."""
    return _config(message).get(QUESTION_KEY) == QUESTION


def carries_keep_rate(message: Message) -> bool:
    """Whether ``message`` is a FedSampling training message (the node draws its own kept samples)."""
    return RATE in _config(message)


def _read(config: ConfigRecord, key: str, owner: str) -> Any:
    if key not in config:
        raise invalid("message", owner, f"a FedsampleStrategy FedSampling message with {key!r} in its config", None)
    return config[key]


def answer_size_query(
    message: Message, *, num_examples: int, rng: np.random.Generator, max_epsilon: float | None = None
) -> Message:
    """The node's randomized answer to the FedSampling question, drawn here with the sampler's mechanism.

    ``rng`` must be unknown to the server (``np.random.default_rng()`` seeds itself from the
    operating system): an answer drawn from a seed the server knows discloses the size.
    ``max_epsilon`` refuses a question whose mechanism spends more than that budget; the budget
    is computed here from ``M`` and ``alpha``, not taken from the question. A ClientApp calls it
    through :func:`~fedsample.integrations.flower.query_reply`, which answers every query the
    strategy makes.
    """
    owner = "answer_size_query"
    check_param("num_examples", owner, num_examples, Interval(int, 1, None, closed="left"))
    if not isinstance(rng, np.random.Generator):
        raise invalid("rng", owner, "a numpy Generator the server cannot know", rng)
    check_param("max_epsilon", owner, max_epsilon, NoneOr(Interval(float, 0, None, closed="left")))
    config = _config(message)
    threshold, probability = _read(config, SIZE_THRESHOLD, owner), _read(config, RESPONSE_PROBABILITY, owner)
    sampler = FedSamplingSampler(size_threshold=threshold, probability=probability)  # validates M and alpha
    epsilon = epsilon_of(sampler.truth_probability, sampler.size_threshold)
    stated = config.get(EPSILON)
    if isinstance(stated, float) and not math.isclose(stated, epsilon, rel_tol=1e-9):
        raise invalid("message", owner, f"a question whose epsilon is its mechanism's ({epsilon:g})", stated)
    if max_epsilon is not None and epsilon > max_epsilon:
        raise FedsampleError(
            f"The 'max_epsilon' parameter of {owner} is {max_epsilon:g}, and the question's mechanism "
            f"(M = {threshold}, alpha = {probability:g}) spends epsilon = {epsilon:g}: no answer is sent.",
            parameter="max_epsilon",
        )
    state = sampler.init(Federation.from_sizes([num_examples]), 1)
    answer = int(sampler.answers(state, rng)[0])
    return Message(RecordDict({"metrics": MetricRecord({ANSWER: answer})}), reply_to=message)


def kept_count(message: Message, *, num_examples: int, rng: np.random.Generator) -> tuple[int, float]:
    """The node's kept count ``k ~ Binomial(n, rate)`` and its weight ``k / divisor``, drawn here.

    ``rng`` must be unknown to the server, as for :func:`answer_size_query`.
    """
    owner = "kept_count"
    check_param("num_examples", owner, num_examples, Interval(int, 1, None, closed="left"))
    if not isinstance(rng, np.random.Generator):
        raise invalid("rng", owner, "a numpy Generator the server cannot know", rng)
    config = _config(message)
    rate, divisor = _read(config, RATE, owner), _read(config, DIVISOR, owner)
    check_param(RATE, owner, rate, Interval(float, 0, 1, closed="right"))
    check_param(DIVISOR, owner, divisor, Interval(float, 0, None, closed="neither"))
    design = DataLevelDesign(sizes=np.array([num_examples]), rate=rate, divisor=divisor)
    clients, kept = design.draw_counts(rng)
    if clients.size == 0:
        return 0, 0.0
    return int(kept[0]), float(design.weights_of(kept)[0])
