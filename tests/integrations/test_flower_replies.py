"""Replies are data (issue 24): every crafted reply a careless or hostile node can send is refused and
counted, never raised, and the round goes on with the honest replies.

Each case drives the strategy directly: one node sends the crafted reply, the three others are honest.
The strategy must not raise, must count the reply as a failure of the named kind, must aggregate the
honest replies as if the crafted one had failed, and must keep the model finite.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

flwr = pytest.importorskip("flwr")

from flower_grid import FakeGrid, client_of, recorded_feedbacks  # noqa: E402
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict  # noqa: E402

import fedsample  # noqa: E402
from fedsample.integrations.flower import FedsampleStrategy, query_reply, to_array_record, train_reply  # noqa: E402
from fedsample.integrations.flower_client import REPORT_NORMS, norm_reply  # noqa: E402

pytestmark = pytest.mark.usefixtures("task_identity")  # node 0's task identity (conftest.py)

NODES = [901, 17, 4400, 250]  # clients 0..3 are the sorted node ids: 17, 250, 901, 4400
SIZES = [30, 10, 60, 100]
THETA = {"w": np.array([[1.0, -2.0], [0.5, 0.0]], dtype=np.float32), "b": np.array([0.25, -0.75], dtype=np.float32)}
HOSTILE = 0  # the client whose node sends the crafted reply


def _trained(client: int) -> dict[str, np.ndarray]:
    return {n: (v + np.float32(0.1 * (client + 1))).astype(np.float32) for n, v in THETA.items()}


def _npy(value: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, value, allow_pickle=True)  # a hostile node pickles what it likes
    return buffer.getvalue()


def _array(value: np.ndarray, *, stype: str = "numpy.ndarray", data: bytes | None = None) -> Array:
    """An Array as a node may send it, bytes and all (Array(ndarray) refuses most of these)."""
    return Array(
        dtype=str(value.dtype), shape=tuple(value.shape), stype=stype, data=_npy(value) if data is None else data
    )


def _with(name: str, array: Array) -> ArrayRecord:
    """The honest arrays of the hostile client, with ``name`` replaced by ``array``."""
    record = to_array_record(_trained(HOSTILE))
    record[name] = array
    return record


def _metrics(**values: object) -> MetricRecord:
    """An honest reply's metrics with ``values`` written over them (train_reply would refuse some)."""
    metrics = MetricRecord({"num-examples": SIZES[HOSTILE], "train-loss": 1.0, "local-lr": 0.1, "local-steps": 5})
    for key, value in values.items():
        metrics[key.replace("_", "-")] = value  # type: ignore[assignment]
    return metrics


def _reply(message: Message, arrays: ArrayRecord | None = None, metrics: MetricRecord | None = None) -> Message:
    content = RecordDict({"metrics": _metrics() if metrics is None else metrics})
    if arrays is not None:
        content["arrays"] = arrays
    return Message(content, reply_to=message)


def _honest(message: Message) -> Message:
    client = client_of(message)
    return train_reply(
        message, _trained(client), num_examples=SIZES[client], train_loss=1.0, local_lr=0.1, local_steps=5
    )


Crafted = Callable[[Message], Message]


def _metric(**values: object) -> Crafted:
    """A reply with the honest arrays and one crafted metric."""
    return lambda m: _reply(m, to_array_record(_trained(HOSTILE)), _metrics(**values))


_BAD_STEPS = (math.inf, math.nan, 1e300, 0, -5, 2.5, 10**7, [5, 5])
_BAD_LRS = (1e-100, 0.0, math.nan, math.inf, -0.1, 1e300, [0.1])
_BAD_SIZES = (2.5, math.inf, math.nan, -3, 2**50)

# Each crafted training reply of issue 24, and the failure kind it must count as.
CRAFTED: dict[str, tuple[Crafted, str]] = {
    "complex64": (lambda m: _reply(m, _with("w", _array(np.ones((2, 2), np.complex64)))), "malformed"),
    "unicode": (lambda m: _reply(m, _with("w", _array(np.full((2, 2), "1.0")))), "malformed"),
    "bytes-strings": (lambda m: _reply(m, _with("w", _array(np.full((2, 2), b"1.0")))), "malformed"),
    "datetime64": (lambda m: _reply(m, _with("w", _array(np.zeros((2, 2), "datetime64[s]")))), "malformed"),
    "structured": (lambda m: _reply(m, _with("w", _array(np.zeros((2, 2), [("a", "f4"), ("b", "i4")])))), "malformed"),
    "object": (lambda m: _reply(m, _with("w", _array(np.full((2, 2), 1.0, dtype=object)))), "malformed"),
    "bool": (lambda m: _reply(m, _with("w", _array(np.ones((2, 2), bool)))), "malformed"),
    "garbage-bytes": (
        lambda m: _reply(m, _with("w", _array(THETA["w"], data=b"\x93NUMPY garbage, not an array"))),
        "malformed",
    ),
    "truncated-bytes": (lambda m: _reply(m, _with("w", _array(THETA["w"], data=_npy(THETA["w"])[:-3]))), "malformed"),
    "huge-header-shape": (
        # The header claims 10**12 floats: refused before any memory is allocated for them.
        lambda m: _reply(m, _with("w", _array(THETA["w"], data=_npy(THETA["w"]).replace(b"(2, 2)", b"(10**12,)")))),
        "malformed",
    ),
    "another-stype": (lambda m: _reply(m, _with("w", _array(THETA["w"], stype="torch.Tensor"))), "malformed"),
    "float64-1e300": (lambda m: _reply(m, _with("w", _array(np.full((2, 2), 1e300)))), "rejected"),
    "float64-nan": (lambda m: _reply(m, _with("b", _array(np.array([np.nan, 0.0])))), "rejected"),
    "int64-2**62": (lambda m: _reply(m, _with("w", _array(np.full((2, 2), 2**62, np.int64)))), "malformed"),
    "wrong-shape": (lambda m: _reply(m, _with("w", _array(np.ones((2, 3), np.float32)))), "malformed"),
    "scalar-shape": (lambda m: _reply(m, _with("b", _array(np.array(1.0, np.float32)))), "malformed"),
    "missing-array": (lambda m: _reply(m, to_array_record({"w": THETA["w"]})), "malformed"),
    "extra-array": (lambda m: _reply(m, to_array_record({**_trained(HOSTILE), "x": THETA["b"]})), "malformed"),
    "no-arrays": (lambda m: _reply(m, None), "malformed"),
    "two-array-records": (
        lambda m: Message(
            RecordDict({"a": to_array_record(_trained(0)), "c": to_array_record(_trained(0)), "metrics": _metrics()}),
            reply_to=m,
        ),
        "malformed",
    ),
    **{f"local-steps={value!r}": (_metric(local_steps=value), "malformed") for value in _BAD_STEPS},
    **{f"local-lr={value!r}": (_metric(local_lr=value), "malformed") for value in _BAD_LRS},
    **{f"num-examples={value!r}": (_metric(num_examples=value), "malformed") for value in _BAD_SIZES},
    "train-loss=inf": (_metric(train_loss=math.inf), "malformed"),
    "train-loss=nan": (_metric(train_loss=math.nan), "malformed"),
    "gradient-norm=-1.0": (_metric(gradient_norm=-1.0), "malformed"),
    "gradient-norm=nan": (_metric(gradient_norm=math.nan), "malformed"),
    "train-loss-squares=-2.0": (_metric(train_loss_squares=-2.0), "malformed"),
}


def _round(crafted: Crafted, **kwargs: Any) -> tuple[FedsampleStrategy, list[Message], Any, Any]:
    """Round 1 of full participation: client 0 sends the crafted reply, clients 1..3 honest ones."""
    strategy = FedsampleStrategy(fedsample.make_sampler("full"), sizes=SIZES, num_sampled=4, seed=2, **kwargs)
    messages = FakeGrid(NODES).configure(strategy, to_array_record(THETA))
    assert [client_of(m) for m in messages] == [0, 1, 2, 3]
    replies = [crafted(m) if client_of(m) == HOSTILE else _honest(m) for m in messages]
    arrays, metrics = strategy.aggregate_train(1, replies)
    return strategy, messages, arrays, metrics


def _honest_model(strategy: FedsampleStrategy) -> dict[str, np.ndarray]:
    """The global model after the round had client 0 failed: the honest clients with their weights."""
    record = strategy.rounds[-1]
    out = {}
    for name, value in THETA.items():
        delta = sum(record.weights[c] * (_trained(c)[name].astype(np.float64) - value) for c in (1, 2, 3))
        out[name] = (value + delta).astype(np.float32)
    return out


@pytest.mark.parametrize("case", list(CRAFTED))
def test_a_crafted_training_reply_is_refused_counted_and_the_honest_ones_aggregated(case: str) -> None:
    crafted, kind = CRAFTED[case]
    strategy, _, arrays, metrics = _round(crafted)  # no exception
    assert metrics[kind] == 1
    other = "rejected" if kind == "malformed" else "malformed"
    assert (metrics[other], metrics["dropped"], metrics["returned"], metrics["failures"]) == (0, 0, 3, 1)
    np.testing.assert_array_equal(strategy.rounds[-1].returned, [False, True, True, True])
    expected = _honest_model(strategy)
    for name in THETA:
        got = arrays[name].numpy()
        assert got.dtype == np.float32
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, expected[name], rtol=0, atol=1e-6)


def test_integers_are_read_within_the_models_exact_range() -> None:
    """float32 holds every integer up to 2**24 exactly: such an array is converted and aggregated,
    one beyond it is malformed (int64 2**62 would become another number)."""
    for value, kind in ((2**24, ""), (2**24 + 1, "malformed")):
        arrays = {"w": np.full((2, 2), value, dtype=np.int64), "b": np.array([1, 0], dtype=np.int16)}
        strategy, _, got, metrics = _round(
            lambda m, a=arrays: _reply(m, ArrayRecord({n: Array(v) for n, v in a.items()}))
        )
        assert metrics["malformed"] == (1 if kind else 0)
        expected = _honest_model(strategy)
        if not kind:
            weight = strategy.rounds[-1].weights[0]
            expected = {n: e + weight * (arrays[n].astype(np.float64) - THETA[n]) for n, e in expected.items()}
        for name in THETA:
            np.testing.assert_allclose(got[name].numpy(), expected[name], rtol=1e-6)


def test_a_non_finite_creation_time_orders_the_reply_last_under_over_selection() -> None:
    strategy = FedsampleStrategy(
        fedsample.make_sampler("uniform"), sizes=SIZES, num_sampled=2, over_selection=1.0, seed=0
    )
    messages = FakeGrid(NODES).configure(strategy, to_array_record(THETA))
    replies = [_honest(m) for m in messages]
    for reply, created in zip(replies, [math.nan, 3.0, 2.0, -math.inf], strict=True):
        reply.metadata.created_at = created
    _, metrics = strategy.aggregate_train(1, replies)
    record = strategy.rounds[-1]
    assert metrics is not None
    assert metrics["late"] == 2
    # NaN and -inf are no times: both replies go last (ties by node id), the two finite ones are kept.
    np.testing.assert_array_equal(record.kept, [False, True, True, False])


# --- per node, and bounded -------------------------------------------------------------------------


def test_each_nodes_local_lr_and_steps_scale_its_own_norm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Client 0 trains at lr 0.4 for 20 steps, the others at 0.1 for 5: each norm is read with its own."""
    sampler = fedsample.make_sampler("full")
    seen = recorded_feedbacks(monkeypatch, type(sampler))
    strategy = FedsampleStrategy(sampler, sizes=SIZES, num_sampled=4, seed=0)
    messages = FakeGrid(NODES).configure(strategy, to_array_record(THETA))
    replies = []
    for m in messages:
        lr, steps = (0.4, 20) if client_of(m) == 0 else (0.1, 5)
        replies.append(train_reply(m, _trained(client_of(m)), num_examples=3, local_lr=lr, local_steps=steps))
    strategy.aggregate_train(1, replies)
    (feedback,) = seen
    clients = feedback.clients.tolist()
    raw = {
        c: math.sqrt(sum(float(np.sum((_trained(c)[n] - v).astype(np.float64) ** 2)) for n, v in THETA.items()))
        for c in clients
    }
    own = {c: (0.4 * math.sqrt(20) if c == 0 else 0.1 * math.sqrt(5)) for c in clients}
    # The sampler divides by the reference (the lower median of the nodes' values: 0.1 and 5).
    assert (feedback.local_lr, feedback.local_steps) == (0.1, 5)
    scales = feedback.update_norms / (feedback.local_lr * math.sqrt(feedback.local_steps))
    np.testing.assert_allclose(scales, [raw[c] / own[c] for c in clients], rtol=1e-12)
    # The honest nodes at the reference get their norms unchanged, bit for bit.
    assert [feedback.update_norms[j] == raw[c] for j, c in enumerate(clients) if c != 0] == [True] * 3


def _learning_rounds(sampler: Any, hostile_lr: float, rounds: int) -> list[np.ndarray]:
    """``rounds`` rounds of ``sampler`` on the four clients; the first time client 0 trains it reports
    ``hostile_lr`` (with honest arrays). The distributions after each round."""
    strategy = FedsampleStrategy(sampler, sizes=SIZES, num_sampled=2, seed=1)
    grid = FakeGrid(NODES)
    theta = to_array_record(THETA)
    out, hostile = [], True
    for server_round in range(1, rounds + 1):
        messages = grid.configure(strategy, theta, server_round)
        replies = []
        for m in messages:
            client = client_of(m)
            lr = hostile_lr if client == 0 and hostile else 0.1
            hostile = hostile and client != 0
            shift = np.float32(0.1 * (1 + client % 2))  # clients 1 and 3 move twice as far
            trained = {n: a.numpy() + shift for n, a in theta.items()}
            replies.append(train_reply(m, trained, num_examples=SIZES[client], local_lr=lr, local_steps=5))
        theta, _ = strategy.aggregate_train(server_round, replies)
        assert theta is not None
        out.append(np.asarray(sampler.probabilities(strategy.sampler_state)))
    return out


@pytest.mark.parametrize(
    "sampler",
    [fedsample.make_sampler("mabs"), fedsample.make_sampler("adaptive-osmd", horizon=40)],
    ids=["mabs", "adaptive-osmd"],
)
def test_one_reply_with_a_tiny_local_lr_cannot_freeze_a_learning_sampler(sampler: Any) -> None:
    """Issue 24: one reply with local-lr = 1e-100 froze MABS (one client at p = 0.667 for good) and
    Adaptive-OSMD. 1e-100 is now malformed; 1e-10 is in range, and the node's scale (1e9 times the
    others') is bounded at ten times the reference, for that node alone: the sampler keeps learning."""
    clean = _learning_rounds(sampler, 0.1, 40)
    for hostile in (1e-100, 1e-10):
        got = _learning_rounds(sampler, hostile, 40)
        # Still learning: the distribution keeps moving between round 20 and round 40 as the clean run's
        # does (before the fix it did not move at all, MABS with one client at p = 0.7 for good).
        moved = float(np.abs(got[-1] - got[19]).sum()) / 2
        clean_moved = float(np.abs(clean[-1] - clean[19]).sum()) / 2
        assert moved > 0.5 * clean_moved > 0
        assert float(np.max(got[-1])) < 0.6


# --- the size query and the norm query ------------------------------------------------------------

BAD_IDS = (math.inf, math.nan, 4, -1, 2.5, 2**70, [1])
BAD_NUM_EXAMPLES = (math.inf, math.nan, 2.5, 0, -3, 2**50, [5])


def _size_answers(**hostile: object) -> Callable[[Message], Message]:
    """Every node answers the size query with its size and client id; node 17 (client 0) with ``hostile``."""

    def answer(message: Message) -> Message:
        node = message.metadata.dst_node_id
        client = sorted(NODES).index(node)
        reply = query_reply(message, num_examples=SIZES[client], client_id=client)
        if node == 17:
            for key, value in hostile.items():
                reply.content["metrics"][key.replace("_", "-")] = value  # type: ignore[index]
        return reply

    return answer


@pytest.mark.parametrize(
    "hostile",
    [{"client_id": value} for value in BAD_IDS] + [{"num_examples": value} for value in BAD_NUM_EXAMPLES],
    ids=[f"client-id={value!r}" for value in BAD_IDS] + [f"num-examples={value!r}" for value in BAD_NUM_EXAMPLES],
)
def test_a_crafted_size_answer_leaves_its_node_out_and_the_others_train(hostile: dict[str, object]) -> None:
    strategy = FedsampleStrategy(fedsample.make_sampler("full"), num_sampled=3, num_nodes=4, seed=0)
    grid = FakeGrid(NODES, _size_answers(**hostile))
    messages = grid.configure(strategy, to_array_record(THETA))  # no exception
    assert list(strategy.excluded) == [17]
    assert strategy.num_clients == 3
    assert strategy.sizes is not None
    # The others keep their order: clients 1, 2, 3 of the nodes are clients 0, 1, 2 of the federation.
    assert strategy.sizes.tolist() == SIZES[1:]
    assert strategy.node_of_client is not None
    assert strategy.node_of_client.tolist() == sorted(NODES)[1:]
    assert sorted(m.metadata.dst_node_id for m in messages) == sorted(NODES)[1:]
    arrays, metrics = strategy.aggregate_train(1, [_honest(m) for m in messages])
    assert metrics is not None
    assert (metrics["returned"], metrics["failures"]) == (3, 0)
    assert all(np.all(np.isfinite(a.numpy())) for a in arrays.values())


def test_repeated_client_ids_fall_back_to_the_node_order() -> None:
    strategy = FedsampleStrategy(fedsample.make_sampler("full"), num_sampled=4, num_nodes=4, seed=0)
    FakeGrid(NODES, _size_answers(client_id=1)).configure(strategy, to_array_record(THETA))  # no exception
    assert strategy.excluded == {}
    assert strategy.node_of_client is not None
    assert strategy.node_of_client.tolist() == sorted(NODES)


def test_a_given_availability_follows_the_clients_left() -> None:
    """Client 0 (node 17) is left out: the availability given for clients 1..3 of the nodes is that of
    clients 0..2 of the federation."""
    from fedsample.participation.availability import TraceAvailability

    only_last = TraceAvailability(np.array([3]), np.array([0]), np.array([99]))  # the nodes' client 3, always
    strategy = FedsampleStrategy(fedsample.make_sampler("full"), num_sampled=3, num_nodes=4, availability=only_last)
    messages = FakeGrid(NODES, _size_answers(num_examples=math.nan)).configure(strategy, to_array_record(THETA))
    assert [client_of(m) for m in messages] == [2]  # the nodes' client 3 is the federation's client 2
    assert messages[0].metadata.dst_node_id == sorted(NODES)[3]


def test_known_return_probabilities_follow_the_clients_left() -> None:
    from fedsample.participation.availability import BernoulliAvailability

    strategy = FedsampleStrategy(
        fedsample.make_sampler("full"),
        num_sampled=3,
        num_nodes=4,
        availability=BernoulliAvailability(np.array([0.2, 1.0, 1.0, 1.0])),
        return_probabilities=np.array([0.5, 0.6, 0.7, 0.8]),
        policy="inverse-probability",
    )
    messages = FakeGrid(NODES, _size_answers(client_id=math.inf)).configure(strategy, to_array_record(THETA))
    assert [client_of(m) for m in messages] == [0, 1, 2]
    strategy.aggregate_train(1, [_honest(m) for m in messages])
    record = strategy.rounds[-1]
    np.testing.assert_allclose(record.applied, record.weights / np.array([0.6, 0.7, 0.8]))


def test_a_fedsampling_client_id_answer_out_of_range_leaves_its_node_out() -> None:
    sampler = fedsample.FedSamplingSampler(target_samples=40, size_threshold=80, probability=0.4)
    strategy = FedsampleStrategy(sampler, num_sampled=1, num_nodes=4, seed=0)
    rng = np.random.default_rng(0)

    def answer(message: Message) -> Message:
        node = message.metadata.dst_node_id
        client = sorted(NODES).index(node)
        reply = query_reply(message, num_examples=SIZES[client], client_id=client, rng=rng)
        if node == 17 and "client-id" in reply.content["metrics"]:  # type: ignore[operator]
            reply.content["metrics"]["client-id"] = math.nan  # type: ignore[index]
        return reply

    FakeGrid(NODES, answer).configure(strategy, to_array_record(THETA))  # no exception
    assert list(strategy.excluded) == [17]
    assert strategy.num_clients == 3


BAD_NORMS: dict[str, dict[str, object]] = {
    "update-norm=nan": {"update-norm": math.nan},
    "update-norm=inf": {"update-norm": math.inf},
    "update-norm=-1": {"update-norm": -1.0},
    "update-norm=list": {"update-norm": [1.0, 2.0]},
    "update-norm missing": {"update-norm": None},
    "gradient-norm=nan": {"gradient-norm": math.nan},
    "local-lr=1e-100": {"local-lr": 1e-100},
    "local-steps=2.5": {"local-steps": 2.5},
}


@pytest.mark.parametrize("case", list(BAD_NORMS))
def test_a_crafted_norm_report_is_no_candidate_and_counted(case: str) -> None:
    """The first message of a two-phase round: client 0's garbage norms make it no candidate."""
    norms = [0.5, 2.0, 1.0, 3.0]

    def answer(message: Message) -> Message:
        client = client_of(message)
        if message.content["config"].get(REPORT_NORMS, False):  # type: ignore[call-overload]
            reply = norm_reply(message, update_norm=norms[client], gradient_norm=1.0, local_lr=0.1, local_steps=5)
            if client == HOSTILE:
                for key, value in BAD_NORMS[case].items():
                    if value is None:
                        del reply.content["metrics"][key]  # type: ignore[attr-defined]
                    else:
                        reply.content["metrics"][key] = value  # type: ignore[index]
            return reply
        return _honest(message)

    sampler = fedsample.make_sampler("optimal", mode="protocol")
    strategy = FedsampleStrategy(sampler, sizes=SIZES, num_sampled=2, seed=3)
    messages = FakeGrid(NODES, answer).configure(strategy, to_array_record(THETA))  # no exception
    assert HOSTILE not in [client_of(m) for m in messages]
    _, metrics = strategy.aggregate_train(1, [answer(m) for m in messages])
    assert metrics is not None
    assert (metrics["computed"], metrics["malformed-reports"]) == (3, 1)


def test_norm_reports_are_read_per_node_and_bounded() -> None:
    """Client 0 reports its norm at lr 1e-10 (in range, its scale 1e9 times the others'): its scale
    is bounded at ten times the reference, and the honest norms pass unchanged."""
    from fedsample.integrations.flower_feedback import FEEDBACK_BOUND

    norms = [0.5, 2.0, 1.0, 3.0]

    def answer(message: Message) -> Message:
        client = client_of(message)
        lr = 1e-10 if client == 0 else 0.1
        return norm_reply(message, update_norm=norms[client], gradient_norm=1.0, local_lr=lr, local_steps=4)

    sampler = fedsample.make_sampler("optimal", mode="protocol")
    strategy = FedsampleStrategy(sampler, sizes=SIZES, num_sampled=2, seed=3)
    FakeGrid(NODES, answer).configure(strategy, to_array_record(THETA))
    known = strategy.sampler_state.norms
    np.testing.assert_array_equal(known[1:], norms[1:])
    scales = [norms[0] / (1e-10 * 2)] + [norm / (0.1 * 2) for norm in norms[1:]]  # eta_i sqrt(N_i)
    reference = sorted(scales)[1]  # the lower median of four
    assert known[0] == pytest.approx(FEEDBACK_BOUND * reference * 0.1 * 2)  # restated at eta = 0.1, N = 4
