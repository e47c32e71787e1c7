"""MIFA's two variants, and the warm-up of the one its authors released (docs/failures.md).

Under the ``"mifa"`` policy the server remembers every client's latest update and moves along their
average. :data:`MIFA_VARIANTS` says how that memory starts and what it stores
(``Participation.mifa_variant``):

``"zeros"`` (the default)
    IBM/fedau's port of MIFA (the repository of FedAU, commit ``6e9cce9``), which is also the authors'
    own ``fdu_no_wait`` trainer: the memory starts at zero (a client never seen contributes nothing),
    holds the updates as they came and is averaged with the importances ``p_i``. Every round trains.
``"released"``
    The authors' ``fdu`` trainer, the one their run scripts run (hmgxr128/MIFA_code, commit
    ``c1099d9``, ``src/trainers/fdu.py``). Nothing trains until every client has been available once
    (:class:`MemoryWarmup`): in the round that completes the set, every client, available or not,
    trains at the model of the warm-up and fills the memory, and the model does not move; it moves
    from the next round on. The memory holds each update divided by the local learning rate it was
    computed at, and the server moves along ``eta_t`` times the memory's plain mean ``(1/N) sum_i y_i``,
    so a stale update is rescaled by the learning rate's decay. The average is ``1/N`` whatever the
    importances (the paper's objective is the mean over the devices).

:func:`~fedsample.participation.procedure.warmed_up` turns a round's selection into what trains under
the released warm-up; the engine and the statistics apply it, and :class:`MemoryWarmup` is a run's
state (part of the checkpoints, as FedAU's interval counts are).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from fedsample._validation import Interval, check_param, invalid
from fedsample.participation.estimators import restored_counts

__all__ = ["MIFA_VARIANTS", "MemoryWarmup", "Phase"]

MIFA_VARIANTS: tuple[str, ...] = ("zeros", "released")

# A round of the released MIFA: nobody trains yet, every client fills the memory, or the usual round.
Phase = Literal["wait", "fill", "train"]


@dataclass
class MemoryWarmup:
    """Which clients have taken part at least once (the released MIFA waits for all of them).

    ``seen[i]`` is 1 once client ``i`` was available and did not drop out in a round; memory: one
    count per client. :meth:`observe` gives each round its :data:`Phase`.
    """

    num_clients: int
    seen: npt.NDArray[np.int64] = field(init=False)

    def __post_init__(self) -> None:
        check_param("num_clients", "MemoryWarmup", self.num_clients, Interval(int, 1, None, closed="left"))
        self.seen = np.zeros(self.num_clients, dtype=np.int64)

    @property
    def complete(self) -> bool:
        """Whether every client has taken part (the memory was filled)."""
        return bool(self.seen.all())

    def observe(self, clients: npt.ArrayLike, present: npt.ArrayLike) -> Phase:
        """The round's phase: ``"train"`` once the set was complete before it; otherwise the ``present``
        of ``clients`` are recorded, and the round is ``"fill"`` when that completes the set, else ``"wait"``."""
        if self.complete:
            return "train"
        ids = np.asarray(clients, dtype=np.int64)
        self.seen[ids[np.asarray(present, dtype=bool)]] = 1
        return "fill" if self.complete else "wait"

    def counts(self) -> dict[str, npt.NDArray[np.int64]]:
        """The state, as named arrays (what a checkpoint stores)."""
        return {"mifa_seen": self.seen}

    def load_counts(self, counts: Mapping[str, npt.ArrayLike]) -> None:
        """Continue from :meth:`counts` (of a checkpoint), checked first."""
        seen = restored_counts(counts, "mifa_seen", self.seen, "MemoryWarmup")
        if np.any(seen > 1):
            raise invalid("mifa_seen", "MemoryWarmup", "a 0 or 1 per client", "a count above 1")
        self.seen[...] = seen
