"""The Python API speaks the library's error (issue 24, item 7): a table walks the public entry points
(every registered sampler's init, sample, update and design, the two-phase draws, the designs, the
statistics functions, loads and dumps, make_sampler) with wrong types, shapes and values, and each
call must raise a FedsampleError (a ValueError) of one line naming the parameter, never an
AttributeError, an IndexError, a numpy broadcast error, a NaN statistic or a silent truncation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from fedsample import Federation, FedsampleError, Feedback, Selection, dumps, loads
from fedsample.participation.setting import Participation
from fedsample.samplers import make_sampler, sampler_names
from fedsample.samplers.schemes.clustered import size_clustered_design
from fedsample.stats import (
    compare_samplers,
    exact_statistics,
    monte_carlo_bias,
    monte_carlo_statistics,
    participation_statistics,
    weight_covariance,
)
from fedsample.stats.compare import compare_states

FEDERATION = Federation.from_sizes([5, 1, 3, 8, 2, 6, 4, 1])
N, M = 8, 3
RNG = np.random.default_rng(0)
# What a careless caller hands over as rng: none of them is a numpy Generator.
BAD_GENERATORS: dict[str, Callable[[], object]] = {
    "RandomState": lambda: np.random.RandomState(0),
    "int": lambda: 0,
    "None": lambda: None,
    "torch.Generator": lambda: torch.Generator(),
}


def _sampler(name: str) -> Any:
    """The registered sampler ``name``, with the hyperparameters it cannot go without."""
    if name == "clustered":
        masses = FEDERATION.importance_masses
        assert masses is not None
        return make_sampler(name, rows=size_clustered_design(masses, M).dense_rows())
    if name == "clustered-groups":
        return make_sampler(name, groups=np.arange(N) % 3)
    if name == "fedcbs":  # the clients' label histograms: 3 classes, client i mostly class i mod 3
        counts = np.ones((N, 3), dtype=np.int64)
        counts[np.arange(N), np.arange(N) % 3] += 4
        return make_sampler(name, label_counts=counts)
    return make_sampler(name)


def _state(name: str) -> tuple[Any, Any]:
    sampler = _sampler(name)
    return sampler, sampler.init(FEDERATION, M)


def _feedback(**fields: Any) -> Feedback:
    """A round in which clients 0 and 2 were selected and returned (``fields`` replace any of it)."""
    base: dict[str, Any] = {
        "round": 0,
        "selection": Selection(clients=[0, 2], weights=[0.5, 0.5]),
        "clients": [0, 2],
        "update_norms": [1.0, 2.0],
        "losses": [0.5, 0.25],
        "gradient_norms": [1.0, 2.0],
        "updates": np.ones((2, 4)),
        "local_lr": 0.1,
        "local_steps": 2,
    }
    return Feedback(**{**base, **fields})


# Feedback that does not fit a state of N clients: (what it breaks, how it is built).
BAD_FEEDBACK: dict[str, Callable[[], object]] = {
    "a dict": lambda: {"clients": [0, 2]},
    "a client out of range": lambda: _feedback(clients=[0, N], update_norms=[1.0, 1.0], losses=[1.0, 1.0]),
    "a negative client": lambda: _feedback(clients=[-1, 2]),
    "a client twice": lambda: _feedback(clients=[2, 2]),
    "norms of the wrong length": lambda: _feedback(update_norms=[1.0, 2.0, 3.0]),
    "losses of the wrong length": lambda: _feedback(losses=[1.0]),
    "gradient norms of the wrong length": lambda: _feedback(gradient_norms=[[1.0, 2.0]]),
    "updates of the wrong shape": lambda: _feedback(updates=np.ones((3, 4))),
    "a selection beyond the clients": lambda: _feedback(selection=Selection(clients=[0, 99], weights=[0.5, 0.5])),
    "a selection of the wrong type": lambda: _feedback(selection=[0, 2]),
    "availability beyond the clients": lambda: _feedback(available=[0, 1, 50]),
    "a negative round": lambda: _feedback(round=-1),
    "a NaN local lr": lambda: _feedback(local_lr=float("nan")),
    "a text local lr": lambda: _feedback(local_lr="0.1"),
    "a fractional local steps": lambda: _feedback(local_steps=2.5),
    "timed-out clients out of range": lambda: _feedback(timed_out=[N + 3], timed_out_seconds=[1.0]),
}

# What a few samplers checked in their own update before the check moved to the base class (each
# of them, one sampler at a time; tests/samplers covers them): left out, so that every case below is
# one that the base class's check newly refuses.
_IDS = ("a client out of range", "a negative client")
CHECKED_BEFORE: dict[str, tuple[str, ...]] = {
    "high-loss": (*_IDS, "losses of the wrong length", "availability beyond the clients"),
    "round-robin": (
        *_IDS,
        "losses of the wrong length",
        "a selection beyond the clients",
        "availability beyond the clients",
    ),
    "clustered-similarity": (*_IDS, "a client twice", "updates of the wrong shape"),
    "divfl": (*_IDS, "a client twice", "updates of the wrong shape", "availability beyond the clients"),
    "oort": (*_IDS, "losses of the wrong length", "availability beyond the clients", "timed-out clients out of range"),
    "optimal": ("norms of the wrong length",),
    "optimal-distribution": ("gradient norms of the wrong length",),
    "power-of-choice": (*_IDS, "losses of the wrong length", "availability beyond the clients"),
}

# Two-phase samplers draw their candidates among the available clients before the round.
TWO_PHASE = [name for name in sampler_names() if hasattr(_sampler(name), "draw_candidates")]


def _cases() -> dict[str, tuple[Callable[[], object], str]]:
    """Case id -> (the call, the parameter its error must name)."""
    cases: dict[str, tuple[Callable[[], object], str]] = {}
    for name in sampler_names():
        for label, bad in BAD_GENERATORS.items():
            cases[f"{name}.sample rng={label}"] = (lambda name=name, bad=bad: _call_sample(name, bad()), "rng")
        cases[f"{name}.sample state=str"] = (lambda name=name: _sampler(name).sample("state", RNG), "state")
        cases[f"{name}.design state=None"] = (lambda name=name: _sampler(name).design(None), "state")
        if not name.startswith("population"):  # those check their Population (or Federation) themselves
            cases[f"{name}.init federation=list"] = (lambda name=name: _sampler(name).init([5, 1, 3], M), "federation")
        cases[f"{name}.update state=dict"] = (lambda name=name: _sampler(name).update({}, _feedback()), "state")
        for label, bad_feedback in BAD_FEEDBACK.items():
            if label not in CHECKED_BEFORE.get(name, ()):
                cases[f"{name}.update {label}"] = (lambda name=name, f=bad_feedback: _call_update(name, f), "feedback")
    for name in TWO_PHASE:
        cases[f"{name}.draw_candidates rng=RandomState"] = (
            lambda name=name: _call_candidates(name, np.arange(N), np.random.RandomState(0)),
            "rng",
        )
        cases[f"{name}.draw_candidates available out of range"] = (
            lambda name=name: _call_candidates(name, np.array([0, N + 1]), RNG),
            "available",
        )
    return cases


def _call_sample(name: str, rng: object) -> object:
    sampler, state = _state(name)
    return sampler.sample(state, rng)


def _call_update(name: str, make_feedback: Callable[[], object]) -> object:
    sampler, state = _state(name)
    return sampler.update(state, make_feedback())


def _call_candidates(name: str, available: np.ndarray, rng: object) -> object:
    sampler, state = _state(name)
    return sampler.draw_candidates(state, available, rng)


def _md() -> tuple[Any, Any]:
    return _state("md")


def _design() -> Any:
    sampler, state = _md()
    return sampler.design(state)


P = FEDERATION.importances
STATISTICS: dict[str, tuple[Callable[[], object], str]] = {
    "exact_statistics NaN importance": (
        lambda: exact_statistics(_design(), np.where(P[0] == P, np.nan, P)),
        "importances",
    ),
    "exact_statistics negative importance": (lambda: exact_statistics(_design(), -P), "importances"),
    "exact_statistics importances of the wrong length": (lambda: exact_statistics(_design(), P[:3]), "importances"),
    "exact_statistics text importances": (lambda: exact_statistics(_design(), ["a"] * N), "importances"),
    "exact_statistics boolean importances": (lambda: exact_statistics(_design(), [True] * N), "importances"),
    "exact_statistics design=str": (lambda: exact_statistics("md", P), "design"),
    "weight_covariance NaN importance": (lambda: weight_covariance(_design(), np.full(N, np.nan)), "importances"),
    "weight_covariance design=None": (lambda: weight_covariance(None, P), "design"),
    "monte_carlo_statistics rng=RandomState": (
        lambda: monte_carlo_statistics(*_md(), np.random.RandomState(0), num_rounds=10),
        "rng",
    ),
    "monte_carlo_statistics rng=None": (lambda: monte_carlo_statistics(*_md(), None, num_rounds=10), "rng"),
    "monte_carlo_statistics rng=int": (lambda: monte_carlo_statistics(*_md(), 7, num_rounds=10), "rng"),
    "monte_carlo_statistics num_rounds=10^12": (
        lambda: monte_carlo_statistics(*_md(), RNG, num_rounds=10**12),
        "num_rounds",
    ),
    "monte_carlo_statistics sampler=str": (
        lambda: monte_carlo_statistics("md", _md()[1], RNG, num_rounds=10),
        "sampler",
    ),
    "monte_carlo_statistics state=str": (
        lambda: monte_carlo_statistics(_md()[0], "state", RNG, num_rounds=10),
        "state",
    ),
    "monte_carlo_bias NaN importances": (
        lambda: monte_carlo_bias(monte_carlo_statistics(*_md(), RNG, num_rounds=10), np.full(N, np.nan)),
        "importances",
    ),
    "compare_samplers rng=RandomState": (
        lambda: compare_samplers(FEDERATION, M, [_sampler("md")], rng=np.random.RandomState(0)),
        "rng",
    ),
    "compare_samplers monte_carlo_rounds=10^12": (
        lambda: compare_samplers(FEDERATION, M, [_sampler("md")], monte_carlo_rounds=10**12),
        "monte_carlo_rounds",
    ),
    "compare_samplers samplers=str": (lambda: compare_samplers(FEDERATION, M, "md"), "samplers"),
    "compare_samplers federation=list": (lambda: compare_samplers([5, 1], M, [_sampler("md")]), "federation"),
    "compare_states state=str": (
        lambda: compare_states(FEDERATION, M, [("md", _sampler("md"), "state")]),
        "state",
    ),
    "participation_statistics num_rounds=10^12": (
        lambda: participation_statistics(*_md(), Participation(), num_sampled=M, num_rounds=10**12),
        "num_rounds",
    ),
    "participation_statistics sampler=str": (
        lambda: participation_statistics("md", _md()[1], Participation(), num_sampled=M, num_rounds=10),
        "sampler",
    ),
}

# Text that is not fedsample's encoding, and objects it cannot encode.
SERIALIZATION: dict[str, tuple[Callable[[], object], str]] = {
    "loads int": (lambda: loads(5), "text"),  # type: ignore[arg-type]
    "loads not JSON": (lambda: loads("{"), "text"),
    "loads nested 100000 deep": (lambda: loads("[" * 100_000 + "]" * 100_000), "text"),
    "loads a tuple of an int": (lambda: loads('{"__tuple__": 5}'), "text"),
    "loads a dict of a list": (lambda: loads('{"__dict__": [1]}'), "text"),
    "loads an int of 5000 digits": (lambda: loads("1" * 5000), "text"),
    "dumps object": (lambda: dumps(object()), "obj"),
    "dumps a set": (lambda: dumps({1, 2}), "obj"),
}

REGISTRY: dict[str, tuple[Callable[[], object], str]] = {
    "make_sampler name=list": (lambda: make_sampler(["md"]), "sampler"),  # type: ignore[arg-type]
    "make_sampler name=dict": (lambda: make_sampler({"name": "md"}), "sampler"),  # type: ignore[arg-type]
}

DESIGNS: dict[str, tuple[Callable[[], object], str]] = {
    f"{name} design.draw rng={label}": (lambda name=name, bad=bad: _design_of(name).draw(bad()), "rng")
    for name in ("md", "uniform", "poisson", "full", "systematic", "fedsampling", "osmd")
    for label, bad in BAD_GENERATORS.items()
}


def _design_of(name: str) -> Any:
    sampler, state = _state(name)
    return sampler.design(state)


CASES = {**_cases(), **STATISTICS, **SERIALIZATION, **REGISTRY, **DESIGNS}


@pytest.mark.parametrize("case", list(CASES))
def test_the_public_api_raises_the_library_error_naming_the_parameter(case: str) -> None:
    call, parameter = CASES[case]
    with pytest.raises(FedsampleError) as info:
        call()
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert len(message.splitlines()) == 1, message
    assert f"'{parameter}'" in message, message


@pytest.mark.parametrize(
    "value", [[4.7], [1.5, 2.0], [np.nan], ["1"], [True]], ids=["4.7", "1.5", "nan", "text", "bool"]
)
def test_client_ids_are_whole_numbers_never_truncated(value: list[Any]) -> None:
    """``clients=[4.7]`` was truncated to client 4; a whole float (``2.0``) is still client 2."""
    with pytest.raises(FedsampleError, match="'clients' parameter of Feedback"):
        Feedback(round=0, selection=Selection(clients=[0], weights=[1.0]), clients=value)
    with pytest.raises(FedsampleError, match="'clients' parameter of Selection"):
        Selection(clients=value, weights=[1.0] * len(value))
    assert Feedback(round=0, selection=Selection(clients=[2.0], weights=[1.0]), clients=[2.0]).clients.tolist() == [2]


def test_exact_statistics_of_a_design_without_a_closed_form_is_still_a_type_error_for_monte_carlo() -> None:
    """Callers that fall back to Monte Carlo catch TypeError: the library's error keeps being one."""
    sampler, state = _state("power-of-choice")
    with pytest.raises(TypeError) as info:
        exact_statistics(sampler.design(state), P)
    assert isinstance(info.value, FedsampleError)
    assert info.value.parameter == "design"
