"""Fixtures of the integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture
def task_identity() -> Iterator[None]:
    """Node 0's task identity for the test, which messages built outside a Flower run need (the Flower
    strategy's modules use it for every test: ``pytestmark = pytest.mark.usefixtures("task_identity")``)."""
    from flower_grid import as_node  # Flower's modules only: flower_grid needs flwr

    with as_node(0):
        yield
