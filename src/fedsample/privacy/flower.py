"""DP-FedAvg on a Flower server: the strategy's aggregation, clipped and noised once a round.

:class:`ServerNoise` is what :class:`~fedsample.integrations.flower.FedsampleStrategy` holds with
``privacy=DPFedAvg(...)``: the plan of its one run (:func:`~fedsample.privacy.plan.plan_privacy`, made
once the federation and the rounds are known), and the round itself on numpy arrays. The server
clips: in the model of docs/privacy.md the server is trusted and sees each update anyway, so clipping
there gives the same guarantee and does not rely on every client running an unmodified clipping step
(a client that skipped it would break the bound for everyone). The noise is the server's, added
once to the weighted sum; a client receives only the noised global model, never another's update.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from fedsample._arrays import FloatArray
from fedsample._validation import invalid
from fedsample.federation import Federation
from fedsample.privacy.mechanism import DPFedAvg
from fedsample.privacy.plan import PrivacyPlan, plan_privacy
from fedsample.samplers import Sampler

__all__ = ["ServerNoise", "server_noise"]

_OWNER = "FedsampleStrategy"


class ServerNoise:
    """One Flower run's DP-FedAvg: ``plan(...)`` before the first round, then ``aggregate(...)`` each round."""

    def __init__(self, settings: DPFedAvg, seed: int) -> None:
        self.settings = settings
        self.seed = int(seed)
        self.plan_: PrivacyPlan | None = None
        self.clip_norms: FloatArray = np.array([float(settings.clip_norm)])

    def plan(self, sampler: Sampler[Any], federation: Federation, num_sampled: int, rounds: int) -> None:
        """Account the run (refusing a sampler the accountant cannot bound), for ``rounds`` rounds."""
        self.plan_ = plan_privacy(self.settings, federation, [sampler], num_sampled, rounds, [sampler.name])
        self.clip_norms = self.plan_.initial_clip_norms()

    def exhausted(self, t: int) -> str | None:
        """The budget's one line when round ``t`` (0-based) would spend more than ``max_epsilon``, else ``None``."""
        if self.plan_ is None or t < self.plan_.rounds:
            return None
        return self.plan_.stop or f"privacy: the run was planned for {self.plan_.rounds} rounds"

    def metrics(self, t: int) -> dict[str, float]:
        """Round ``t``'s spent epsilon (the most exposed client, after the round) and its clip norm."""
        if self.plan_ is None or t >= self.plan_.spent[0].size:
            return {}
        return {"epsilon": float(self.plan_.spent[0][t]), "clip-norm": float(self.clip_norms[0])}

    def aggregate(
        self,
        theta: Mapping[str, np.ndarray],
        arrays: Sequence[Mapping[str, np.ndarray]],
        weights: FloatArray,
        server_lr: float,
        t: int,
    ) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        """``theta + eta_g (sum_i w_i clip_C(theta_i - theta) + noise)``, the noise drawn once from round ``t``'s
        stream, and the round's :meth:`metrics`; the next round's clip norm is kept (adaptive clipping)."""
        assert self.plan_ is not None, "ServerNoise.plan must come first"
        names = list(theta)
        updates = None
        if arrays:
            updates = {
                name: torch.as_tensor(np.stack([(a[name] - theta[name]).astype(np.float64) for a in arrays]))
                for name in names
            }
        like = {name: torch.zeros((1, *np.shape(theta[name])), dtype=torch.float64) for name in names}
        out, following = self.plan_.direction(
            updates,
            np.zeros(len(arrays), dtype=np.int64),
            torch.as_tensor(np.asarray(weights, dtype=np.float64)),
            self.clip_norms,
            seeds=[self.seed],
            round=t,
            like=like,
        )
        metrics = self.metrics(t)  # the clip norm this round used
        self.clip_norms = following
        new = {name: (theta[name] + server_lr * out[name][0].numpy()).astype(theta[name].dtype) for name in names}
        return new, metrics


def server_noise(privacy: object, *, seed: int, norm_bound: float | None, sizes_private: bool) -> ServerNoise | None:
    """The strategy's :class:`ServerNoise` for its ``privacy`` argument (``None``: none), or one line saying
    why not: the privacy's clip replaces the norm bound, and FedSampling's sizes stay on the clients."""
    if privacy is None:
        return None
    if not isinstance(privacy, DPFedAvg):
        raise invalid("privacy", _OWNER, "a DPFedAvg or None", type(privacy).__name__)
    if norm_bound is not None:
        raise invalid(
            "norm_bound", _OWNER, "None under privacy (DP-FedAvg clips every update to clip_norm)", norm_bound
        )
    if sizes_private:
        rule = "a sampler the accountant bounds (FedSampling's design depends on the clients' reported sizes)"
        raise invalid("privacy", _OWNER, rule, "fedsampling")
    return ServerNoise(privacy, seed)
