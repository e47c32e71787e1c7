"""Running any registered sampler for a few rounds and checking what it gives (issue 32 item 10).

A sampler is built by name with the hyperparameters its table does not declare (:data:`REQUIRED`, by
field name: a new sampler with such a field not here fails ``test_every_hyperparameter_is_declared_or_built``),
run through ``init``, ``sample`` and ``update`` on the contract federation with the synthetic feedback
of :mod:`sampler_cases`, and each selection and state is checked: client ids in range, finite
weights, finite probabilities, a state that round-trips through the saved-sampler format and draws
the same selections after it.
"""

from __future__ import annotations

import dataclasses
import json
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from fedsample import Federation, FedsampleError, Selection
from fedsample.samplers import Sampler, make_sampler, size_clustered_design
from fedsample.samplers._registry import sampler_class
from fedsample.samplers.persistence import sampler_from_dict, sampler_to_dict
from sampler_cases import CONTRACT_NUM_SAMPLED, client_norms, contract_federation, label_counts, synthetic_feedback

__all__ = [
    "BASE",
    "REQUIRED",
    "SlowCase",
    "build",
    "check_selection",
    "check_state",
    "exercise",
    "required_fields",
    "round_trip",
    "time_limit",
]


def _masses(federation: Federation) -> np.ndarray:
    masses = federation.importance_masses
    assert masses is not None, "the contract federation's importances are ratios of sizes"
    return masses


# Builders of the hyperparameters that no table declares, by field name: (federation, m) -> value.
REQUIRED: dict[str, Callable[[Federation, int], Any]] = {
    "rows": lambda federation, m: size_clustered_design(_masses(federation), m).dense_rows(),
    "groups": lambda federation, m: np.arange(federation.num_clients) % 3,
    "label_counts": lambda federation, m: label_counts(federation),
}


# The hyperparameters a sampler starts from, where its defaults do not suit three rounds of synthetic
# feedback: HiCS-FL reads the 4-entry updates as a Linear(1, 2) output layer (as sampler_cases does), and
# FedCor fits its GP after one round and refits every two (its default warm-up is 15 rounds), so that
# three rounds reach what each learns. A probed value replaces them.
BASE: dict[str, dict[str, Any]] = {
    "hics-fl": {"num_classes": 2, "output_inputs": 1},
    "fedcor": {"warmup_rounds": 1, "refit_interval": 2, "warmup_iterations": 20, "refit_iterations": 5},
}


def required_fields(name: str) -> list[str]:
    """The hyperparameters of the sampler registered as ``name`` that its table does not declare: the
    arrays it checks itself (clustered's rows), built by :data:`REQUIRED`."""
    declared = sampler_class(name)._parameter_constraints
    return [f.name for f in dataclasses.fields(sampler_class(name)) if f.init and f.name not in declared]


def build(
    name: str, federation: Federation | None = None, m: int = CONTRACT_NUM_SAMPLED, **params: Any
) -> Sampler[Any]:
    """``make_sampler(name, **params)`` with the undeclared hyperparameters built for ``federation`` and
    those of :data:`BASE`."""
    federation = federation or contract_federation()
    required = {field: REQUIRED[field](federation, m) for field in required_fields(name) if field not in params}
    return make_sampler(name, **{**BASE.get(name, {}), **required, **params})


class SlowCase(Exception):
    """A case ran past its time limit (a hyperparameter at its bound that asks for that much work)."""


@contextmanager
def time_limit(seconds: float, wall_factor: float = 15.0) -> Iterator[None]:
    """Raise :class:`SlowCase` in the main thread once the block has used ``seconds`` of the process's CPU
    time (SIGPROF), or after ``wall_factor * seconds`` of wall time (SIGALRM), whichever comes first. CPU
    time does not stretch with the machine's load (a loaded machine ran cases past a wall-clock limit); the
    wall-clock limit still ends a case that waits without computing."""

    def expire(signum: int, frame: object) -> None:
        what = "of CPU time" if signum == signal.SIGPROF else "of wall time"
        raise SlowCase(f"still running after {seconds * (1 if signum == signal.SIGPROF else wall_factor)} s {what}")

    previous = signal.signal(signal.SIGPROF, expire), signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    signal.setitimer(signal.ITIMER_REAL, seconds * wall_factor)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGPROF, previous[0])
        signal.signal(signal.SIGALRM, previous[1])


def check_selection(selection: object, num_clients: int) -> None:
    """A round's selection: ids in ``[0, n)``, one finite weight each, finite instructions."""
    assert isinstance(selection, Selection), type(selection)
    clients, weights = np.asarray(selection.clients), np.asarray(selection.weights)
    assert clients.dtype.kind in "iu", clients.dtype
    assert clients.shape == weights.shape, (clients, weights)
    assert clients.size == 0 or 0 <= clients.min() <= clients.max() < num_clients, clients
    assert np.all(np.isfinite(weights)), weights
    for key, values in selection.instructions.items():
        assert np.shape(values) == clients.shape, (key, values)
        assert np.all(np.isfinite(values)), (key, values)


def check_state(sampler: Sampler[Any], state: Any, num_clients: int) -> None:
    """A state the sampler can use: its importances and (where it has them) probabilities finite and of
    length ``n``, its design about ``n`` clients."""
    importances = np.asarray(sampler.importances(state), dtype=np.float64)
    assert importances.shape == (num_clients,), importances
    assert np.all(np.isfinite(importances)), importances
    probabilities = getattr(sampler, "probabilities", None)
    if callable(probabilities):
        p = np.asarray(probabilities(state), dtype=np.float64)
        assert np.all(np.isfinite(p)), p
        assert np.all(p >= 0), p
    assert sampler.design(state).num_clients == num_clients


def round_trip(sampler: Sampler[Any], state: Any) -> tuple[Sampler[Any], Any]:
    """The sampler and state as ``fedsample stats --sampler-state`` reads them back from strict JSON."""
    text = json.dumps(sampler_to_dict(sampler, state), allow_nan=False)
    return sampler_from_dict(json.loads(text))


def _draws(sampler: Sampler[Any], state: Any, seed: int, rounds: int = 3) -> list[tuple[list[int], list[float]]]:
    rng = np.random.default_rng(seed)
    return [(s.clients.tolist(), s.weights.tolist()) for s in (sampler.sample(state, rng) for _ in range(rounds))]


def one_round(sampler: Sampler[Any], state: Any, t: int, rng: np.random.Generator, norms: np.ndarray) -> Any:
    """Round ``t``: a two-phase sampler reads every client's report and then draws; any other draws and
    reads its clients' feedback. Returns the new state; every selection is checked."""
    n = norms.size
    if sampler.two_phase:
        candidates = Selection(clients=np.arange(n), weights=sampler.importances(state))
        state = sampler.update(state, synthetic_feedback(t, candidates, norms))
        check_selection(sampler.sample(state, rng), n)
        return state
    selection = sampler.sample(state, rng)
    check_selection(selection, n)
    return sampler.update(state, synthetic_feedback(t, selection, norms))


def exercise(
    sampler: Sampler[Any], federation: Federation | None = None, m: int = CONTRACT_NUM_SAMPLED, rounds: int = 3
) -> Any:
    """``init``, ``rounds`` rounds, and the round trip of the last state; returns that state."""
    federation = federation or contract_federation()
    n = federation.num_clients
    state = sampler.init(federation, m)
    check_state(sampler, state, n)
    rng, norms = np.random.default_rng(0), client_norms(n)
    for t in range(rounds):
        state = one_round(sampler, state, t, rng, norms)
        check_state(sampler, state, n)
    try:  # a state the sampler made itself must read back: an error here is not about the caller's input
        loaded, loaded_state = round_trip(sampler, state)
    except FedsampleError as error:
        raise AssertionError(f"the state {sampler!r} made after {rounds} rounds is refused on load: {error}") from None
    assert loaded.get_params().keys() == sampler.get_params().keys()
    if not sampler.two_phase:  # a two-phase state draws only after its round's report (it has one here)
        assert _draws(loaded, loaded_state, 5) == _draws(sampler, state, 5)
    return state
