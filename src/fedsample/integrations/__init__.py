"""Adapters that carry fedsample's samplers into other frameworks, each imported on first use.

* :mod:`fedsample.integrations.flower`: a Flower strategy (Message API) that selects nodes with
  any fedsample sampler, aggregates with the selection's weights, and feeds the replies back to
  the sampler; needs the ``flower`` extra (``pip install 'fedsample[flower]'``). With a
  FedSampling sampler it runs :mod:`fedsample.integrations.flower_fedsampling`'s protocol, in
  which every size stays on its client. The ClientApp's helpers are in
  :mod:`fedsample.integrations.flower_client` (and re-exported by the strategy's module).

Importing this package imports no framework: ``FedsampleStrategy`` and the client helpers are
looked up in their module when first asked for.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["FedsampleStrategy", "query_reply", "train_locally", "train_reply"]

_FLOWER_NAMES = frozenset(__all__)


def __getattr__(name: str) -> Any:
    if name in _FLOWER_NAMES:
        return getattr(importlib.import_module("fedsample.integrations.flower"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
