"""The sampler contract: immutable samplers, explicit state, selections and feedback.

A sampler is a frozen, keyword-only dataclass of hyperparameters, validated at construction.
Its state is plain data created by :meth:`Sampler.init`; :meth:`Sampler.sample` reads it with a
caller-provided :class:`numpy.random.Generator`; :meth:`Sampler.update` returns a *new* state
from what a round revealed. Nothing is mutated and no global random state is touched.

>>> import numpy as np
>>> from fedsample import Federation, MDSampler
>>> sampler = MDSampler()
>>> state = sampler.init(Federation.from_sizes([100, 250, 500, 150]), num_sampled=2)
>>> selection = sampler.sample(state, np.random.default_rng(0))
>>> selection.clients.size, float(selection.weights.sum())
(2, 1.0)
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import numbers
import typing
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np

from fedsample._arrays import ArrayFields, DTypeTable, FloatArray, IntArray, readonly
from fedsample._invariants import FieldError, check_count, check_distribution
from fedsample._validation import Constraint, Interval, check_param, check_params, invalid
from fedsample.designs import MAX_DRAWS, Design, FixedSizeDesign, FullDesign, RowDesign, SystematicDesign
from fedsample.federation import Federation
from fedsample.rng import check_generator
from fedsample.serialization import plain_data

__all__ = [
    "FEEDBACK_LIMIT",
    "MAX_NUM_SAMPLED",
    "DesignState",
    "Feedback",
    "FixedDesignSampler",
    "Sampler",
    "SamplerState",
    "Selection",
    "StateT",
    "check_client_ids",
    "check_feedback",
    "check_sampling_fields",
    "check_state",
    "state_type",
]


@plain_data
@dataclass(frozen=True, eq=False)
class Selection(ArrayFields):
    """One round's selection.

    Attributes
    ----------
    clients:
        Client ids, one entry per draw: a client drawn twice appears twice.
    weights:
        Aggregation weight of each entry; a client's weight ``w_i(S_t)`` is the sum over its entries.
    instructions:
        Per-entry client-side instructions, keyed by name (for example ``"data_rate"``, the
        probability with which a client keeps each local sample in data-level sampling). Each
        value is an array aligned with ``clients``.
    """

    clients: IntArray
    weights: FloatArray
    instructions: Mapping[str, FloatArray] = field(default_factory=dict)

    _array_dtypes: ClassVar[DTypeTable] = {"clients": np.int64, "weights": np.float64}

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(
            self,
            "instructions",
            {k: readonly(np.asarray(v, dtype=np.float64)) for k, v in self.instructions.items()},
        )
        if self.clients.shape != self.weights.shape or self.clients.ndim != 1:
            raise ValueError("Selection needs 1-D clients and weights of the same length")

    @property
    def num_draws(self) -> int:
        return int(self.clients.size)

    def distinct(self) -> tuple[IntArray, FloatArray]:
        """Distinct client ids in increasing order and their summed weights."""
        ids, inverse = np.unique(self.clients, return_inverse=True)
        summed = np.bincount(inverse, weights=self.weights, minlength=ids.size).astype(np.float64)
        return ids.astype(np.int64), summed

    def dense_weights(self, num_clients: int) -> FloatArray:
        """``w_i(S_t)`` for every client, zero for those not selected."""
        return np.bincount(self.clients, weights=self.weights, minlength=num_clients).astype(np.float64)


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


@dataclass(frozen=True, eq=False)
class SamplerState(ArrayFields):
    """The fields a learning sampler's state starts with: the importances ``p_i`` of the clients and
    ``num_sampled``, the ``m`` (``K``) clients drawn a round. Subclasses add theirs after these."""

    importances: FloatArray
    num_sampled: int

    _array_dtypes: ClassVar[DTypeTable] = {"importances": np.float64}


def check_sampling_fields(
    owner: str, importances: Any, num_sampled: Any, *, at_most_clients: bool = False
) -> tuple[int, int]:
    """Check a saved state's ``importances`` (a distribution) and ``num_sampled`` (``m`` in
    ``[1, MAX_NUM_SAMPLED]``, and at most the ``n`` clients for a sampler that draws distinct ones);
    ``(n, m)``."""
    check_distribution(owner, "importances", importances)
    n = int(np.asarray(importances).size)
    m = check_count(
        owner, "num_sampled", num_sampled, 1, min(n, MAX_NUM_SAMPLED) if at_most_clients else MAX_NUM_SAMPLED
    )
    return n, m


@plain_data
@dataclass(frozen=True, eq=False)
class DesignState(ArrayFields):
    """State of a sampler that does not learn: its federation's importances and a fixed design."""

    num_sampled: int
    importances: FloatArray
    design: Any  # one of the designs of fedsample.designs

    _array_dtypes: ClassVar[DTypeTable] = {"importances": np.float64}

    def check_invariants(self) -> None:
        owner = "DesignState"
        m = check_count(owner, "num_sampled", self.num_sampled, 1, MAX_NUM_SAMPLED)
        check_distribution(owner, "importances", self.importances)
        n = int(self.importances.size)
        if not isinstance(getattr(self.design, "num_clients", None), int) or not hasattr(self.design, "draw"):
            raise FieldError(owner, "design", "a sampling design", f"a {type(self.design).__name__}")
        if self.design.num_clients != n:
            got = f"one over {self.design.num_clients}"
            raise FieldError(owner, "design", f"a design over the {n} clients of 'importances'", got)
        # The draws of a round are the m the state was built for.
        base, path = (self.design.base, "design.base") if hasattr(self.design, "base") else (self.design, "design")
        if isinstance(base, RowDesign) and int(base.row_counts.sum()) != m:
            got = f"counts summing to {int(base.row_counts.sum())}"
            raise FieldError(owner, f"{path}.row_counts", f"draw counts summing to num_sampled ({m})", got)
        if isinstance(base, (FixedSizeDesign, SystematicDesign)) and base.num_sampled != m:
            raise FieldError(owner, f"{path}.num_sampled", f"num_sampled ({m})", str(base.num_sampled))
        if isinstance(base, FullDesign) and m != n:
            raise FieldError(owner, "num_sampled", f"the number of clients ({n}) for full participation", str(m))


StateT = TypeVar("StateT")

MAX_NUM_SAMPLED = MAX_DRAWS


@dataclass(frozen=True, kw_only=True)
class Sampler(ABC, Generic[StateT]):
    """Base of every sampler.

    Subclasses are frozen keyword-only dataclasses that declare ``name`` (the registry name),
    ``biased`` (``True`` when ``E[w_i] != p_i``), ``needs_updates`` (whether :meth:`update` reads
    the update vectors), ``two_phase`` (whether the round's report reaches :meth:`update` before
    :meth:`sample`) and ``_parameter_constraints`` (the table checked at construction).

    The arguments of the contract are checked here, once for every sampler: each class's own
    ``init``, ``sample``, ``update``, ``design`` and ``draw_candidates`` are wrapped (when the class
    is created) so that a federation of the wrong type, a state the sampler does not make, an
    ``rng`` that is not a :class:`numpy.random.Generator` (:func:`~fedsample.rng.check_generator`)
    and feedback that does not fit the state (:func:`check_feedback`) raise the library's error
    before the sampler's own code runs.
    """

    name: ClassVar[str]
    biased: ClassVar[bool] = False
    # Whether update() reads the clients' update vectors (Feedback.updates); the engine only
    # gathers them for samplers that ask, since they cost O(clients x parameters) per round.
    needs_updates: ClassVar[bool] = False
    # Whether update() reads Feedback.gradients (each returned client's full-batch gradient at the
    # round's global model): the engine computes them, one more pass over those clients' data.
    needs_gradients: ClassVar[bool] = False
    # Whether the round is two-phase (optimal sampling's norm-reporting protocol): the round's
    # candidates report first, update() receives that report BEFORE sample() draws the round, and
    # update() is not called again after the round. See docs/samplers.md, "Optimal sampling".
    two_phase: ClassVar[bool] = False
    # Whether update() reads Feedback.loss_squares (Oort's utility): the batched engine measures
    # every sample's loss at each local step only for samplers that ask (one more forward pass).
    needs_loss_squares: ClassVar[bool] = False
    # Whether init() accepts ``durations=``, every client's expected round time in seconds (Oort:
    # FedScale's selector knows them from registration); the engine passes its system model's.
    known_durations: ClassVar[bool] = False
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {}
    # Parameters renamed or removed, and the one-line hint that make_sampler and the config reader
    # give when an old name is used (``high-loss``'s temperature became inverse_temperature).
    _renamed_parameters: ClassVar[dict[str, str]] = {}
    # What init accepts as its federation; empty: init checks it itself (the population samplers).
    _federation_types: ClassVar[tuple[type, ...]] = (Federation,)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _check_arguments_of(cls)

    def __post_init__(self) -> None:
        check_params(type(self).__name__, self.get_params(), self._parameter_constraints)

    def get_params(self) -> dict[str, Any]:
        """The hyperparameters, as keyword arguments that rebuild this sampler."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @abstractmethod
    def init(self, federation: Federation, num_sampled: int) -> StateT:
        """Create the state for ``federation`` with ``num_sampled`` (``m``) clients drawn per round."""

    @abstractmethod
    def design(self, state: StateT) -> Design:
        """The sampling design that ``state`` draws from (the basis of exact statistics)."""

    def sample(self, state: StateT, rng: np.random.Generator) -> Selection:
        """Draw one round's selection, using randomness from ``rng`` only."""
        clients, weights = self.design(state).draw(rng)
        return Selection(clients=clients, weights=weights)

    def update(self, state: StateT, feedback: Feedback) -> StateT:
        """Return the state after a round; samplers that do not learn return it unchanged."""
        return state

    def importances(self, state: StateT) -> FloatArray:
        """The importances ``p_i`` the state was built for."""
        return state.importances  # type: ignore[attr-defined, no-any-return]

    def num_clients(self, state: StateT) -> int:
        """The number of clients ``n`` the state was built for."""
        try:
            return int(np.asarray(self.importances(state)).size)
        except AttributeError:  # a state that keeps no importances (a user's sampler): its design knows n
            return int(self.design(state).num_clients)

    def _check_num_sampled(self, num_sampled: object, *, upper: int | None) -> int:
        # A round never draws more than MAX_NUM_SAMPLED clients: beyond it the per-draw arrays
        # alone would not fit in memory, and no federated deployment draws that many.
        bound = MAX_NUM_SAMPLED if upper is None else min(upper, MAX_NUM_SAMPLED)
        check_param("num_sampled", f"{type(self).__name__}.init", num_sampled, Interval(int, 1, bound, closed="both"))
        assert isinstance(num_sampled, (int, np.integer))
        return int(num_sampled)


@functools.cache
def state_type(cls: type) -> type | None:
    """The state class a sampler class makes: the class its ``init`` is annotated to return, else the
    one it declares (``class MDSampler(Sampler[DesignState])``); ``None`` when neither is a class."""
    init = getattr(cls, "init", None)
    try:
        made = typing.get_type_hints(inspect.unwrap(init)).get("return") if callable(init) else None
    except Exception:  # an annotation that does not resolve (a name defined in a function): use the declaration
        made = None
    if isinstance(made, type) and made is not Any:  # Any is a class since Python 3.11
        return made
    for klass in cls.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            for argument in typing.get_args(base):
                if isinstance(argument, type) and argument is not Any:
                    return argument
    return None


def check_state(sampler: Sampler[Any], state: object, owner: str, *, defined_in: type | None = None) -> None:
    """Refuse ``state`` unless it is of the state class ``sampler`` makes (:func:`state_type`).

    ``defined_in`` is the class whose method reads the state: its own state class is accepted too,
    for a subclass that wraps its parent's state and hands it on through ``super()``.
    """
    expected = state_type(type(sampler))
    accepted = tuple(t for t in (expected, state_type(defined_in) if defined_in else None) if t is not None)
    if accepted and not isinstance(state, accepted):
        made = f"a {accepted[0].__name__} (as {type(sampler).__name__}.init makes)"
        raise invalid("state", owner, made, state)


def _checked_init(method: Callable[..., Any], owner_class: type) -> Callable[..., Any]:
    @functools.wraps(method)
    def init(self: Sampler[Any], federation: object, num_sampled: object, **options: Any) -> Any:
        kinds = self._federation_types
        if kinds and not isinstance(federation, kinds):
            names = " or a ".join(kind.__name__ for kind in kinds)
            raise invalid("federation", f"{type(self).__name__}.init", f"a {names}", federation)
        return method(self, federation, num_sampled, **options)

    return init


def _checked_sample(method: Callable[..., Any], owner_class: type) -> Callable[..., Any]:
    @functools.wraps(method)
    def sample(self: Sampler[Any], state: object, rng: object, *args: Any, **kwargs: Any) -> Any:
        owner = f"{type(self).__name__}.sample"
        check_state(self, state, owner, defined_in=owner_class)
        check_generator(rng, owner)
        return method(self, state, rng, *args, **kwargs)

    return sample


def _checked_update(method: Callable[..., Any], owner_class: type) -> Callable[..., Any]:
    @functools.wraps(method)
    def update(self: Sampler[Any], state: object, feedback: object) -> Any:
        owner = f"{type(self).__name__}.update"
        check_state(self, state, owner, defined_in=owner_class)
        return method(self, state, check_feedback(feedback, self.num_clients(state), owner))

    return update


def _checked_design(method: Callable[..., Any], owner_class: type) -> Callable[..., Any]:
    @functools.wraps(method)
    def design(self: Sampler[Any], state: object) -> Any:
        check_state(self, state, f"{type(self).__name__}.design", defined_in=owner_class)
        return method(self, state)

    return design


def _checked_candidates(method: Callable[..., Any], owner_class: type) -> Callable[..., Any]:
    @functools.wraps(method)
    def draw_candidates(self: Sampler[Any], state: object, available: object, rng: object) -> Any:
        owner = f"{type(self).__name__}.draw_candidates"
        check_state(self, state, owner, defined_in=owner_class)
        ids = np.asarray(available)
        if ids.dtype.kind not in "iu":
            raise invalid("available", owner, "a 1-D array of client ids", available)
        n = self.num_clients(state)
        if ids.ndim != 1 or (ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n)):
            raise invalid("available", owner, f"a 1-D array of client ids in [0, {n})", ids)
        check_generator(rng, owner)
        return method(self, state, ids.astype(np.int64, copy=False), rng)

    return draw_candidates


_CHECKS: dict[str, Callable[[Callable[..., Any], type], Callable[..., Any]]] = {
    "init": _checked_init,
    "sample": _checked_sample,
    "update": _checked_update,
    "design": _checked_design,
    "draw_candidates": _checked_candidates,
}


def _check_arguments_of(cls: type) -> None:
    """Wrap the contract's methods that ``cls`` defines itself with the checks of their arguments."""
    for name, wrap in _CHECKS.items():
        method = cls.__dict__.get(name)
        abstract = getattr(method, "__isabstractmethod__", False)
        if callable(method) and not abstract and not getattr(method, "_arguments_checked", False):
            checked = wrap(method, cls)
            checked._arguments_checked = True  # type: ignore[attr-defined]
            setattr(cls, name, checked)


_check_arguments_of(Sampler)


class FixedDesignSampler(Sampler[DesignState]):
    """A sampler that does not learn: ``init`` builds its design once and the state carries it."""

    def design(self, state: DesignState) -> Design:
        design: Design = state.design
        return design
