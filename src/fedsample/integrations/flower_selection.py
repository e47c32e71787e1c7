"""The selection step of :class:`~fedsample.integrations.flower.FedsampleStrategy`: a round's draw and messages.

:func:`select_round` draws round ``t = server_round - 1``'s clients among the connected, available
ones in one of three ways, and builds one training message per client it asks:

- a FedSampling sampler starts the round with the question of
  :mod:`~fedsample.integrations.flower_fedsampling`: the available nodes that answer it are the
  round's clients, and each gets the keep rate in place of a weight;
- a two-phase sampler (``optimal``, ``optimal-distribution``) first reads its candidates' norms
  (:mod:`~fedsample.integrations.flower_two_phase`), then draws as below;
- every other sampler draws exactly as the engine does
  (:func:`~fedsample.integrations.flower_rounds.draw_round`): unavailable entries are redrawn or
  skipped, and skipped clients get no message.

Requires the ``flower`` extra.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from fedsample.federation import Federation
from fedsample.integrations._flwr import ArrayRecord, ConfigRecord, Grid, Message
from fedsample.integrations.flower_feedback import FeedbackHistory
from fedsample.integrations.flower_rounds import RoundRecord, draw_round, start_fedsampling_round, train_messages
from fedsample.integrations.flower_two_phase import PhaseOne, report_round
from fedsample.participation.procedure import Selected
from fedsample.participation.setting import Participation
from fedsample.samplers import FedSamplingSampler, Sampler

__all__ = ["select_round"]


def select_round(
    sampler: Sampler[Any],
    state: Any,
    participation: Participation,
    federation: Federation | None,
    *,
    seed: int,
    server_round: int,
    node_of_client: npt.NDArray[np.uint64],
    arrays: ArrayRecord,
    config: ConfigRecord,
    grid: Grid,
    timeout: float | None,
    history: FeedbackHistory,
) -> tuple[RoundRecord, Selected, list[Message | None], Any, PhaseOne | None]:
    """Round ``server_round - 1``'s selection and its training messages (``None`` for a client not asked).

    A client is available when its node is connected (``grid.get_node_ids()``) and the strategy's
    availability model says so. Returns the round's record, its selection after availability, the
    messages, the sampler's state (new after a two-phase sampler's reports) and, for a two-phase
    sampler, what its first phase gave (``None`` otherwise; ``history`` is the feedback bounds' so far).
    """
    t = server_round - 1
    online = np.fromiter((int(node) for node in grid.get_node_ids()), dtype=np.uint64)
    connected = np.isin(node_of_client, online)
    phase_one = None
    if isinstance(sampler, FedSamplingSampler):
        record, selected, settings = start_fedsampling_round(
            sampler,
            state,
            participation.availability,
            server_round=server_round,
            connected=connected,
            node_of_client=node_of_client,
            grid=grid,
            timeout=timeout,
        )
    else:
        if sampler.two_phase:  # the connected, available candidates report their norms first
            assert federation is not None
            phase_one = report_round(
                sampler,
                state,
                federation.importances,
                server_round=server_round,
                seed=seed,
                available=connected & participation.availability.available(t, np.arange(connected.size)),
                node_of_client=node_of_client,
                arrays=arrays,
                config=config,
                grid=grid,
                timeout=timeout,
                history=history,
            )
            state = phase_one.state
        record, selected, settings = draw_round(
            sampler, state, participation, seed=seed, round=t, connected=connected, node_of_client=node_of_client
        )
    messages = train_messages(
        record,
        settings,
        arrays,
        config,
        server_round=server_round,
        seed=seed,
        measure_losses=sampler.needs_loss_squares,
    )
    return record, selected, messages, state, phase_one
