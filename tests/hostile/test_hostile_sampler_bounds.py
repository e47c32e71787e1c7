"""Every registered sampler's hyperparameters at their declared bounds (issue 32 item 10, part 1).

Generated from each class's ``_parameter_constraints`` (:func:`hostile_values.probes`): each bound,
just inside and just outside it, the wrong type, NaN and the infinities for floats, booleans and huge
integers for ints. A value the declaration refuses must be refused at construction in one line naming
the parameter; a value it takes must construct, ``init`` on the contract federation, draw and learn for
three rounds and round-trip through the saved-sampler format, with no error but the library's one-line
error. Hypothesis then draws combinations of taken values per sampler (fixed seed; a heavier sweep is
marked slow). A new sampler is covered by registering it.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hostile_samplers import REQUIRED, SlowCase, build, exercise, required_fields, time_limit
from hostile_values import Probe, assert_one_line, declared_inside, inside_strategy, probes
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from fedsample import FedsampleError
from fedsample.samplers import sampler_names
from fedsample.samplers._registry import sampler_class

# Seconds one case may take: the work a bound asks for (FedCor's 10^6 GP iterations) is not a fault
# of the value's check, but it must not pass unseen; such a parameter is listed in WORK.
CASE_SECONDS = 20.0


def _constraints(name: str) -> dict[str, Any]:
    return dict(sampler_class(name)._parameter_constraints)


BOUND_CASES: list[tuple[str, str, Probe]] = [
    (name, parameter, probe)
    for name in sampler_names()
    for parameter, constraint in _constraints(name).items()
    for probe in probes(constraint)
]

# Hyperparameters that are an amount of work (iterations of a fit), with the most a case affords: beyond it a probe only
# constructs, and combinations draw them at the low end of their range, where a fit takes milliseconds
# (FedCor's 10^6 GP iterations take minutes, by design).
WORK: dict[tuple[str, str], int] = {
    ("fedcor", "warmup_iterations"): 1000,
    ("fedcor", "refit_iterations"): 1000,
    ("fedcor", "dimension"): 64,  # the GP embedding's width (1000 takes 13 s a case)
}

# Defects whose fix is another helper's (issue 32): case -> reason.
KNOWN: dict[tuple[str, str, str], str] = {}


def _id(case: tuple[str, str, Probe]) -> str:
    name, parameter, probe = case
    return f"{name}.{parameter}={probe.label}"


def _params(cases: list[tuple[str, str, Probe]]) -> list[Any]:
    marked = []
    for case in cases:
        key = (case[0], case[1], case[2].label)
        marks = [pytest.mark.xfail(strict=True, reason=KNOWN[key])] if key in KNOWN else []
        marked.append(pytest.param(case, id=_id(case), marks=marks))
    return marked


def test_every_hyperparameter_is_declared_or_built() -> None:
    """Each hyperparameter is in its class's table (so that it is probed here) or, for the arrays a
    sampler checks itself (clustered's rows), has a builder in REQUIRED."""
    missing = {(name, f) for name in sampler_names() for f in required_fields(name) if f not in REQUIRED}
    assert not missing, f"declare these or add a builder to hostile_samplers.REQUIRED: {sorted(missing)}"


@pytest.mark.parametrize("name", sampler_names())
def test_every_sampler_runs_at_its_defaults(name: str) -> None:
    """The control: at its defaults each sampler runs without any error (so a taken value that is
    refused later is the value's doing)."""
    exercise(build(name))


@pytest.mark.parametrize("case", _params(BOUND_CASES))
def test_a_hyperparameter_at_its_bound(case: tuple[str, str, Probe]) -> None:
    name, parameter, probe = case
    constraint = _constraints(name)[parameter]
    if probe.inside is not None:  # the table's own check agrees with what its bounds say
        assert constraint.is_satisfied_by(probe.value) is probe.inside, f"{constraint} on {probe.value!r}"
    if not declared_inside(constraint, probe):
        with pytest.raises(FedsampleError) as refused:
            build(name, **{parameter: probe.value})
        assert_one_line(refused.value, naming=parameter)
        return
    if (name, parameter) in WORK and probe.value > WORK[name, parameter]:
        build(name, **{parameter: probe.value})  # taken; running it is the work it asks for
        return
    _construct_and_run(name, {parameter: probe.value})


def _construct_and_run(name: str, params: dict[str, Any], rounds: int = 3) -> None:
    """Build, run and round-trip; the only error allowed is the library's, in one line."""
    try:
        with time_limit(CASE_SECONDS):
            exercise(build(name, **params), rounds=rounds)
    except FedsampleError as error:
        assert_one_line(error)
    except SlowCase:
        pytest.fail(f"{name} with {params} ran past {CASE_SECONDS} s: list it in WORK if that is its work")


def _combinations(name: str) -> st.SearchStrategy[dict[str, Any]]:
    def values(parameter: str, constraint: Any) -> st.SearchStrategy[Any]:
        if (name, parameter) in WORK:
            low = math.ceil(constraint.left)
            return st.integers(low, low + 8)
        return inside_strategy(constraint)

    return st.fixed_dictionaries({p: values(p, c) for p, c in _constraints(name).items()})


# Combinations the sweeps found, kept as cases: (sampler, hyperparameters, reason of the xfail or None).
_FEDCOR_COLLAPSE = {
    "noise": 1.0000000000000002e-06,
    "learning_rate": 999.9999999999999,
    "warmup_rounds": 0,
    "warmup_iterations": 3,
    "refit_iterations": 3,
    "history": 1,
    "decay": 5e-324,
    "discount": 0.437407608407025,
    "seed": 9_223_372_036_854_775_760,
    "refit_interval": 999981,
    "aggregation": "size",
}
FOUND: list[tuple[str, dict[str, Any], str | None]] = [
    # alpha below float's normal range: OSMD's weights' variance overflowed in the saved state's check
    ("osmd", {"alpha": 2.225073858507203e-309, "eta": 634064101615.69, "feedback": "update"}, None),
    ("adaptive-osmd", {"alpha": 2.3858756395572806e-303, "a_max": 1e-150, "gamma": 399972299721.3188}, None),
    # MABS without mixing: clients at p = 0 (its own saved state refused as biased), or at a subnormal p
    ("mabs", {"alpha": 0.0, "delta": 5e11}, None),
    ("mabs", {"alpha": 2.225073858507203e-309, "delta": 5e11, "replace": False, "step": "fixed"}, None),
    # FedCor at noise 1e-6 and learning rate 1000: its GP's variances reached 0 (a division by zero) or its
    # covariance was not positive definite (numpy's LinAlgError)
    ("fedcor", {**_FEDCOR_COLLAPSE, "dimension": 8}, None),
    ("fedcor", _FEDCOR_COLLAPSE, None),
]


@pytest.mark.parametrize(
    ("name", "params"),
    [
        pytest.param(name, params, marks=[pytest.mark.xfail(strict=True, reason=why)] if why else [])
        for name, params, why in FOUND
    ],
)
def test_combinations_the_sweeps_found(name: str, params: dict[str, Any]) -> None:
    _construct_and_run(name, params, rounds=6)


# The default suite draws a few combinations per sampler; the slow sweep many more.
EXAMPLES, SWEEP_EXAMPLES = 6, 60


@pytest.mark.hostile_examples(EXAMPLES)
@pytest.mark.parametrize("name", sampler_names())
def test_combinations_of_taken_values(name: str) -> None:
    _run_combinations(name, examples=EXAMPLES)


@pytest.mark.slow
@pytest.mark.hostile_examples(SWEEP_EXAMPLES)
@pytest.mark.parametrize("name", sampler_names())
def test_combinations_of_taken_values_sweep(name: str) -> None:
    _run_combinations(name, examples=SWEEP_EXAMPLES)


def _run_combinations(name: str, examples: int) -> None:
    # No shrinking: a failing draw is reported as drawn, so a failure costs no more than a pass.
    @settings(max_examples=examples, phases=(Phase.generate,), suppress_health_check=list(HealthCheck))
    @given(params=_combinations(name))
    def check(params: dict[str, Any]) -> None:
        _construct_and_run(name, params)

    check()
