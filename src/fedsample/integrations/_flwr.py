"""The Flower names the integration uses, imported in one place behind the check for the extra.

Every module of the integration imports Flower through this one, so a missing ``flwr`` raises
:class:`~fedsample.data.MissingDependencyError` naming ``pip install 'fedsample[flower]'`` whichever
module is imported first, and a change in Flower's API (the ``flwr.app`` / ``flwr.serverapp`` message
API of Flower 1.20 and later) is adapted here.
"""

from __future__ import annotations

from fedsample._imports import require

require("flwr", extra="flower", package="flwr", owner="fedsample.integrations (Flower)")

from flwr.app import (  # noqa: E402  (after the check that names the extra to install)
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp import Grid  # noqa: E402
from flwr.serverapp.strategy import Result, Strategy  # noqa: E402

__all__ = [
    "Array",
    "ArrayRecord",
    "ConfigRecord",
    "Grid",
    "Message",
    "MessageType",
    "MetricRecord",
    "RecordDict",
    "Result",
    "Strategy",
]
