"""The samplers the accountant refuses, each with its reason in one line; the ones it bounds; the
re-exported FedSampling names; the missing extra."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pytest

import fedsample.privacy as privacy
from fedsample import Federation, FedsampleError, make_sampler
from fedsample.designs import NormalizedDesign, SuccessiveDesign
from fedsample.privacy import design_exposure, exposure_of, privacy_cost, refusal
from fedsample.samplers import sampler_names
from fedsample.samplers.schemes import fedsampling_ldp

# Every registered sampler that the accountant bounds (a fixed design that does not depend on data).
ACCOUNTED = {
    "full",
    "md",
    "uniform",
    "fedavg-uniform",
    "poisson",
    "binomial",
    "bernoulli",
    "systematic",
    "clustered-size",
    "clustered-groups",
    "clustered",
    "uniform-is",
}
REFUSED_WITH = {
    "osmd": "update norms",
    "adaptive-osmd": "update norms",
    "mabs": "a bandit",
    "vrb": "a bandit",
    "avare": "a bandit",
    "delta": "gradient diversity",
    "optimal": "two-phase",
    "optimal-distribution": "gradient or update norms",
    "clustered-similarity": "update vectors",
    "fedsampling": "data-level sampling",
    "fixed-rate": "data-level sampling",
    "oort": "Oort's utility",
    "power-of-choice": "current losses",
    "high-loss": "last reported losses",
    "divfl": "stale gradients",
    "afl": "valuations",
    "fedcor": "loss changes",
    "hics-fl": "heterogeneity",
    "fedcbs": "label counts",
    "number-of-samples": "round's total",
    "round-robin": "deterministic schedule",
    "sequential": "deterministic schedule",
    "population-md": "account 'md'",
    "population-uniform": "account 'uniform'",
    "population-clustered-size": "account 'clustered-size'",
}


def test_every_registered_sampler_is_either_accounted_or_refused_with_a_reason() -> None:
    names = set(sampler_names())
    assert names == ACCOUNTED | set(REFUSED_WITH)
    for name in ACCOUNTED:
        assert refusal(make_sampler(name)) is None, name


@pytest.mark.parametrize("name", sorted(REFUSED_WITH))
def test_an_adaptive_or_data_dependent_sampler_is_refused_in_one_line(name: str) -> None:
    sampler = make_sampler(name)
    with pytest.raises(FedsampleError, match="must be a sampler whose design is fixed") as caught:
        exposure_of(sampler, None)
    message = str(caught.value)
    assert REFUSED_WITH[name] in message
    assert f"Got {name!r} instead: " in message
    assert "\n" not in message
    assert caught.value.parameter == "sampler"


@pytest.mark.parametrize(
    ("sampler", "reason"),
    [
        (make_sampler("fedavg-uniform", normalize=True), "divided by the round's total"),
        (make_sampler("uniform-is", replace=False), "Des Raj's weights"),
    ],
)
def test_a_design_whose_weights_are_not_the_clients_own_is_refused(sampler: Any, reason: str) -> None:
    state = sampler.init(Federation.from_sizes([3, 5, 7, 9]), 2)
    assert isinstance(sampler.design(state), (NormalizedDesign, SuccessiveDesign))
    with pytest.raises(FedsampleError, match=reason):
        exposure_of(sampler, state)


def test_a_design_of_another_kind_is_refused_at_the_design_entry() -> None:
    with pytest.raises(FedsampleError, match=r"'design' parameter of design_exposure .* Got a str instead"):
        design_exposure("md")


def test_a_user_sampler_that_learns_is_refused_by_default() -> None:
    from fedsample.samplers.adaptive.bandits import UniformISSampler

    class Learner(UniformISSampler):  # a user's sampler that defines update()
        name = "a-learner"

    with pytest.raises(FedsampleError, match="updates its state from the clients' feedback"):
        exposure_of(Learner(), Learner().init(Federation.from_sizes([1, 2]), 1))


def test_fedsampling_names_are_re_exported_unchanged() -> None:
    for name in ("PrivacyReport", "epsilon_of", "randomized_response_matrix", "response_probability"):
        assert getattr(privacy, name) is getattr(fedsampling_ldp, name)


def test_without_the_extra_the_accountant_names_it_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.import_module

    def missing(name: str, *args: Any) -> Any:
        if name == "dp_accounting":
            raise ModuleNotFoundError("No module named 'dp_accounting'", name="dp_accounting")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", missing)
    exposure = exposure_of(make_sampler("poisson"), make_sampler("poisson").init(Federation.from_sizes([4, 4]), 1))
    with pytest.raises(FedsampleError, match=r"needs dp-accounting\b.*pip install 'fedsample\[privacy\]'") as caught:
        privacy_cost(exposure, noise_multiplier=1.0, rounds=3, delta=1e-5)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("argument", "value", "rule"),
    [
        ("noise_multiplier", 0.0, r"a float in the range \(0, 10000\]"),
        ("noise_multiplier", float("nan"), r"a float in the range \(0, 10000\]"),
        ("rounds", -1, r"an int in the range \[0, 1000000\]"),
        ("rounds", 2.5, r"an int in the range \[0, 1000000\]"),
        ("delta", 1.0, r"a float in the range \(0, 1\)"),
        ("accountant", "prv", r"one of \{'pld', 'rdp'\}"),
    ],
)
def test_bad_arguments_name_the_parameter_the_rule_and_the_value(argument: str, value: object, rule: str) -> None:
    exposure = exposure_of(make_sampler("full"), make_sampler("full").init(Federation.from_sizes([4, 4]), 2))
    arguments: dict[str, Any] = {"noise_multiplier": 1.0, "rounds": 3, "delta": 1e-5, "accountant": "pld"}
    arguments[argument] = value
    with pytest.raises(FedsampleError, match=rf"The '{argument}' parameter of privacy_cost must be {rule}"):
        privacy_cost(exposure, **arguments)
    with pytest.raises(FedsampleError, match="'exposure' parameter of privacy_cost must be an Exposure"):
        privacy_cost(np.zeros(2), noise_multiplier=1.0, rounds=3, delta=1e-5)  # type: ignore[arg-type]
