"""Adapters that carry fedsample's samplers into other frameworks, each imported on first use.

* :mod:`fedsample.integrations.flower`: a Flower strategy (Message API) that selects nodes with
  any fedsample sampler, aggregates with the selection's weights, and feeds the replies back to
  the sampler; needs the ``flower`` extra (``pip install 'fedsample[flower]'``). With a
  FedSampling sampler it runs :mod:`fedsample.integrations.flower_fedsampling`'s protocol, in
  which every size stays on its client. The ClientApp's helpers are in
  :mod:`fedsample.integrations.flower_client` (and re-exported by the strategy's module).

* :mod:`fedsample.integrations.server_update`: :class:`ServerUpdate`, the server update
  ``theta + eta_g * sum_i w_i (theta_i - theta)`` with the engine's server optimizers, for your own
  training loop (PyTorch state dicts, numpy arrays, Flower ``ArrayRecord``); needs the ``torch``
  extra, not Flower (docs/your-loop.md).

Importing this package imports no framework: ``FedsampleStrategy``, the client helpers and
``ServerUpdate`` are looked up in their module when first asked for.
"""

from __future__ import annotations

from typing import Any

from fedsample._imports import lazy_attribute

__all__ = ["FedsampleStrategy", "ServerUpdate", "query_reply", "train_locally", "train_reply"]

# Where each name lives; __getattr__ imports the module on first use.
_HOMES = {
    "FedsampleStrategy": "fedsample.integrations.flower",
    "query_reply": "fedsample.integrations.flower",
    "train_locally": "fedsample.integrations.flower",
    "train_reply": "fedsample.integrations.flower",
    "ServerUpdate": "fedsample.integrations.server_update",
}


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, _HOMES, name)
