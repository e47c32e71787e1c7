"""A stand-in for Flower's Grid in the Flower strategy's unit tests, the task identity their messages need, and a
recorder of the feedbacks the strategy hands to a sampler."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

pytest.importorskip("flwr")  # pytest imports this file for doctests too

from flwr.app import ArrayRecord, ConfigRecord, Message
from flwr.supercore.task_identity import TaskIdentity

from fedsample.integrations.flower import FedsampleStrategy
from fedsample.samplers import Feedback


@contextmanager
def as_node(node_id: int) -> Iterator[None]:
    """Messages built outside a Flower run need a run, node and task id (Flower sets them in a run):
    run 1, task 1 on ``node_id`` for the block, then the identity as it was."""
    saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, node_id, 1
    try:
        yield
    finally:
        TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved


def client_of(message: Message) -> int:
    """The client a ``configure_train`` message is addressed to."""
    return int(message.content["config"]["client-id"])  # type: ignore[arg-type, call-overload]


class FakeGrid:
    """The Grid calls the strategy makes: the connected nodes, and a round trip for its queries.

    Sending a message gives it an id, as Flower's grids do (``push_messages``), so that replies
    built with ``reply_to=message`` name it. ``answer(message)`` is a node's reply, or None.
    """

    def __init__(self, nodes: list[int], answer: Callable[[Message], Message | None] | None = None) -> None:
        self.nodes = nodes
        self.answer = answer
        self.sent: list[Message] = []
        self.received: list[Message] = []

    def get_node_ids(self) -> list[int]:
        return list(self.nodes)

    def push(self, messages: Iterable[Message]) -> list[Message]:
        pushed = list(messages)
        for message in pushed:
            message.metadata.__dict__["_message_id"] = uuid.uuid4().hex  # as InMemoryGrid.push_messages does
        self.sent.extend(pushed)
        return pushed

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        pushed = self.push(messages)
        replies = [self.answer(message) for message in pushed] if self.answer is not None else []
        self.received.extend(reply for reply in replies if reply is not None)
        return [reply for reply in replies if reply is not None]

    def configure(self, strategy: FedsampleStrategy, arrays: ArrayRecord, server_round: int = 1) -> list[Message]:
        """``configure_train``'s messages for ``server_round``, sent (the strategy's round loop sends them)."""
        return self.push(strategy.configure_train(server_round, arrays, ConfigRecord(), self))  # type: ignore[arg-type]


def recorded_feedbacks(monkeypatch: pytest.MonkeyPatch, sampler_type: type[Any]) -> list[Feedback]:
    """The feedbacks the strategy hands to ``sampler_type.update`` from now on (the update still runs)."""
    seen: list[Feedback] = []
    update = sampler_type.update

    def recording(self: Any, state: Any, feedback: Feedback) -> Any:
        seen.append(feedback)
        return update(self, state, feedback)

    monkeypatch.setattr(sampler_type, "update", recording)
    return seen
