"""What a round revealed (:class:`Feedback`), and the one check of it that every sampler's ``update`` runs."""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedsample._arrays import ArrayFields, DTypeTable, FloatArray, IntArray
from fedsample._validation import invalid
from fedsample.samplers._selection import Selection
from fedsample.serialization import plain_data

__all__ = ["FEEDBACK_LIMIT", "Feedback", "check_client_ids", "check_feedback"]


@plain_data
@dataclass(frozen=True, eq=False)
class Feedback(ArrayFields):
    """What one round revealed, handed to :meth:`Sampler.update`.

    Attributes
    ----------
    round:
        Index of the round the feedback comes from (0-based).
    selection:
        The selection that was drawn for that round.
    clients:
        Distinct ids of the clients whose results arrived, in increasing order.
    update_norms:
        ``||theta_i - theta||`` per returned client (aligned with ``clients``), if known.
    updates:
        ``theta_i - theta`` per returned client, shape ``(len(clients), d)``, if kept.
    gradients:
        The gradient of each returned client's mean loss over all its data at the round's global
        model ``theta``, shape ``(len(clients), d)``, for samplers that ask (``needs_gradients``:
        DivFL's ``representative="gradient"``, as its authors' code computes it).
    losses:
        Local training loss per returned client, if known.
    gradient_norms:
        Norm of the mean mini-batch gradient at ``theta`` per returned client (the first local step's).
    local_lr, local_steps:
        The round's local learning rate ``eta_l`` and number of local steps ``N``, so that a
        sampler can turn update norms into gradient scales (``||theta_i - theta|| / (eta_l sqrt(N))``).
    loss_squares:
        Mean of the squared per-sample training losses per returned client (Oort's statistical
        utility reads ``sqrt`` of it), if known; ``losses`` is then the mean of the same losses.
    round_times:
        Seconds each returned client took for the round (download, local work, upload), if known.
    available:
        Ids of the clients available for the next selection, in increasing order, if the caller
        knows them; samplers that select among available clients (Oort, Power-of-Choice, DivFL and
        the selectors of :mod:`fedsample.samplers.selectors.rules`) keep them until the next feedback.
    timed_out:
        Distinct ids of the selected clients that did not reply before the round closed at its
        deadline, if the caller knows them (the engine's clock does); not the clients that dropped
        out or were unavailable. Oort keeps a lower bound on their round times from them.
    timed_out_seconds:
        How long the server waited for each client of ``timed_out`` (aligned with it): a lower bound
        on its round time.
    """

    round: int
    selection: Selection
    clients: IntArray
    update_norms: FloatArray | None = None
    updates: FloatArray | None = None
    losses: FloatArray | None = None
    gradient_norms: FloatArray | None = None
    local_lr: float | None = None
    local_steps: int | None = None
    loss_squares: FloatArray | None = None
    round_times: FloatArray | None = None
    available: IntArray | None = None
    timed_out: IntArray | None = None
    timed_out_seconds: FloatArray | None = None
    gradients: FloatArray | None = None

    _array_dtypes: ClassVar[DTypeTable] = {
        **dict.fromkeys(("clients", "available", "timed_out"), np.int64),
        **dict.fromkeys(
            (
                "update_norms",
                "updates",
                "losses",
                "gradient_norms",
                "loss_squares",
                "round_times",
                "timed_out_seconds",
                "gradients",
            ),
            np.float64,
        ),
    }


# The per-client fields of a Feedback: one value per returned client (aligned with ``clients``).
_PER_CLIENT = ("update_norms", "losses", "gradient_norms", "loss_squares", "round_times")

# The largest magnitude of a Feedback value that is a measurement: the engine's are float32 (below 3.4e38),
# and beyond it the samplers' squares and sums of squares overflow (HiCS-FL's angles of 1e154-sized
# updates raised SciPy's error, issue 32). A finite value beyond it, or a negative norm, square or time,
# counts like NaN: a client whose result is unknown, as one that did not return.
FEEDBACK_LIMIT = 1e100
# The fields that hold magnitudes (norms, squares, seconds: never negative) and those that hold values.
_MAGNITUDES = ("update_norms", "gradient_norms", "loss_squares", "round_times", "timed_out_seconds")
_SIGNED = ("losses", "updates", "gradients")


def check_client_ids(ids: IntArray, num_clients: int, owner: str, what: str, *, distinct: bool = False) -> None:
    """Refuse ``ids`` (the ``what`` of a Feedback) unless a 1-D array of client ids in ``[0, num_clients)``."""
    rule = f"a Feedback whose {what} are {'distinct ' if distinct else ''}client ids in [0, {num_clients})"
    if ids.ndim != 1 or (ids.size and (int(ids.min()) < 0 or int(ids.max()) >= num_clients)):
        raise invalid("feedback", owner, rule, ids)
    if distinct and np.unique(ids).size != ids.size:
        raise invalid("feedback", owner, rule, ids)


def check_feedback(feedback: object, num_clients: int, owner: str) -> Feedback:
    """``feedback`` when it is a :class:`Feedback` that a state over ``num_clients`` clients can read.

    Its ids (returned, selected, available, timed out) must be clients of the state, each per-client
    field one value per returned client (``updates`` one row each), the round and the local steps
    counts, the local learning rate a finite non-negative number. The values themselves may be NaN
    or infinite: a client whose result is not finite counts as one that did not return. So does a
    value that is no measurement: beyond :data:`FEEDBACK_LIMIT` in magnitude, or a negative norm,
    square or time; the feedback returned holds NaN there (the same feedback when every value is
    within the bound), so that no sampler reads it. :meth:`Sampler.update` checks its feedback with
    this, for every sampler and every caller (the engine, the Flower strategy, a loop of your own).
    """
    if not isinstance(feedback, Feedback):
        raise invalid("feedback", owner, "a Feedback", feedback)
    if not _is_count(feedback.round):
        raise invalid("feedback", owner, "a Feedback whose 'round' is an int >= 0", feedback.round)
    clients = feedback.clients
    check_client_ids(clients, num_clients, owner, "'clients'", distinct=True)
    for name in _PER_CLIENT:
        values = getattr(feedback, name)
        if values is not None and values.shape != clients.shape:
            rule = f"a Feedback whose {name!r} has one value per returned client ({clients.size})"
            raise invalid("feedback", owner, rule, f"an array of shape {values.shape}")
    for name in ("updates", "gradients"):
        vectors = getattr(feedback, name)
        if vectors is not None and (vectors.ndim != 2 or vectors.shape[0] != clients.size):
            rule = f"a Feedback whose {name!r} has one row per returned client ({clients.size})"
            raise invalid("feedback", owner, rule, f"an array of shape {vectors.shape}")
    if feedback.available is not None:
        check_client_ids(feedback.available, num_clients, owner, "'available'")
    late, waited = feedback.timed_out, feedback.timed_out_seconds
    if late is not None:
        check_client_ids(late, num_clients, owner, "'timed_out'")
    if waited is not None and (late is None or waited.shape != late.shape):
        rule = "a Feedback whose 'timed_out_seconds' align with its 'timed_out'"
        raise invalid("feedback", owner, rule, f"an array of shape {waited.shape}")
    if not isinstance(feedback.selection, Selection):
        raise invalid("feedback", owner, "a Feedback whose 'selection' is a Selection", feedback.selection)
    check_client_ids(feedback.selection.clients, num_clients, owner, "selection's clients")
    lr = feedback.local_lr
    if lr is not None and not (_is_real(lr) and math.isfinite(float(lr)) and float(lr) >= 0):
        raise invalid("feedback", owner, "a Feedback whose 'local_lr' is None or a finite float >= 0", lr)
    if feedback.local_steps is not None and not _is_count(feedback.local_steps):
        raise invalid("feedback", owner, "a Feedback whose 'local_steps' is None or an int >= 0", feedback.local_steps)
    bounded = {
        name: _within_bound(getattr(feedback, name), 0.0 if name in _MAGNITUDES else -FEEDBACK_LIMIT)
        for name in (*_MAGNITUDES, *_SIGNED)
    }
    changed: dict[str, Any] = {name: v for name, v in bounded.items() if v is not getattr(feedback, name)}
    return dataclasses.replace(feedback, **changed) if changed else feedback


def _within_bound(values: FloatArray | None, low: float) -> FloatArray | None:
    """``values`` with every finite one outside ``[low, FEEDBACK_LIMIT]`` replaced by NaN (``values`` itself
    when none is: the common case costs one pass for the minimum and one for the maximum, no copy)."""
    if values is None or values.size == 0:
        return values
    if low <= float(values.min()) and float(values.max()) <= FEEDBACK_LIMIT:  # NaN fails: the full check
        return values
    outside = np.isfinite(values) & ((values < low) | (values > FEEDBACK_LIMIT))
    return np.where(outside, np.nan, values) if outside.any() else values


def _is_count(value: object) -> bool:
    if isinstance(value, bool):  # True is an Integral, but never a count
        return False
    return isinstance(value, numbers.Integral) and int(value) >= 0


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
