"""The sampler contract: immutable samplers, explicit state (:mod:`._state`), selections (:mod:`._selection`)
and feedback (:mod:`._feedback`).

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
import typing
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np

from fedsample._arrays import FloatArray
from fedsample._validation import Constraint, Interval, check_param, check_params, invalid
from fedsample.designs import Design
from fedsample.federation import Federation
from fedsample.rng import check_generator
from fedsample.samplers._feedback import Feedback, check_feedback
from fedsample.samplers._selection import Selection
from fedsample.samplers._state import MAX_NUM_SAMPLED, DesignState

__all__ = ["FixedDesignSampler", "Sampler", "StateT", "check_state", "state_type"]


StateT = TypeVar("StateT")


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
