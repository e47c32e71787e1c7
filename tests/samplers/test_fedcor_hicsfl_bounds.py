"""FedCor and HiCS-FL at the ends of their declared ranges, and from the command line (issue 32, item 7).

Every hyperparameter at each end of its range either runs or is refused in one line; the command line
runs both samplers for two rounds with no value a user must know (HiCS-FL reads its output layer from
the model), refuses an ``output_inputs`` that does not match the model before writing anything, and runs
FedCor at the issue's in-range values (``noise = 1e-6``, ``learning_rate = 1000``...), which used to end in
a "not positive definite" traceback.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cli_helpers import digits_config, run_cli
from fedsample import Federation, FedsampleError, Feedback
from fedsample._validation import Interval, Options
from fedsample.samplers import FedCorSampler, HiCSFLSampler
from fedsample.serialization import dumps, loads

SIZES = (30, 10, 60, 100, 25, 45, 80, 15, 50, 70, 20, 40)  # 12 clients: fewer than FedCor's D = 15
N = len(SIZES)
C, H = 3, 4  # HiCS-FL's synthetic output layer: Linear(4, 3)


def _ends(constraint: Any) -> list[Any]:
    """The values at each end of a declared range (the nearest float inside an open end; an unbounded end:
    infinity for floats, 2**62 for ints), or every option."""
    if isinstance(constraint, Options):
        return list(constraint.values)
    assert isinstance(constraint, Interval), constraint
    ends = []
    for bound, inward, closed in (
        (constraint.left, math.inf, constraint.closed in ("both", "left")),
        (constraint.right, -math.inf, constraint.closed in ("both", "right")),
    ):
        if bound is None:
            ends.append(math.inf if constraint.kind is float else 2**62)
        elif constraint.kind is int:
            ends.append(int(bound) if closed else int(bound) + (1 if inward > 0 else -1))
        else:
            ends.append(float(bound) if closed else math.nextafter(float(bound), inward))
    return ends


def _cases(sampler_class: type, skip: set[str]) -> list[tuple[str, Any]]:
    table = sampler_class._parameter_constraints  # type: ignore[attr-defined]
    return [(name, value) for name, c in table.items() if name not in skip for value in _ends(c)]


def _runs_or_refuses(build: Any, rounds: Any) -> str:
    """``"ran"`` or ``"refused"`` (one line), after checking the states stay valid (they load back)."""
    refused = None
    try:
        sampler = build()
        for state in rounds(sampler):
            loads(dumps(state))
    except FedsampleError as error:
        refused = str(error)
    assert refused is None or "\n" not in refused, refused
    return "ran" if refused is None else "refused"


def _fedcor_rounds(sampler: FedCorSampler, count: int = 6) -> Any:
    """``count`` two-phase rounds of every client reporting a made-up loss (falling, with noise)."""
    state = sampler.init(Federation.from_sizes(SIZES), 3)
    rng = np.random.default_rng(0)
    losses = rng.uniform(1.0, 3.0, N)
    for t in range(count):
        candidates = sampler.draw_candidates(state, np.arange(N), rng)
        ids = candidates.clients
        state = sampler.update(state, Feedback(round=t, selection=candidates, clients=ids, losses=losses[ids]))
        selection = sampler.sample(state, rng)
        assert np.isfinite(selection.weights).all()
        losses = losses - 0.1 * rng.random(N) + 0.05 * rng.standard_normal(N)
        yield state


FEDCOR_SMALL = {"warmup_rounds": 1, "refit_interval": 2, "warmup_iterations": 50, "refit_iterations": 10}


@pytest.mark.parametrize(("name", "value"), _cases(FedCorSampler, skip=set()))
def test_fedcor_runs_at_each_end_of_every_declared_range(name: str, value: Any) -> None:
    """Six rounds (the first fit after round 1, refits every 2) with the hyperparameter at one end of its
    range. The largest (10^4 Adam steps, D = 100) take a few seconds each."""
    params = {**FEDCOR_SMALL, name: value}
    assert _runs_or_refuses(lambda: FedCorSampler(**params), _fedcor_rounds) == "ran"


def test_fedcor_at_the_issues_values_does_not_crash() -> None:
    """noise = 1e-6, learning_rate = 1000, warmup_rounds = 0, refit_interval = 1 on 12 clients (fewer than
    D = 15): sigma^2 I + X X^T is not positive definite in floating point once X grows; base raised
    numpy's LinAlgError ("Matrix is not positive definite")."""
    sampler = FedCorSampler(noise=1e-6, learning_rate=1000.0, warmup_rounds=0, refit_interval=1, refit_iterations=100)
    states = list(_fedcor_rounds(sampler, 5))
    assert states[-1].change_rounds.size > 0
    assert np.isfinite(states[-1].embedding).all()
    assert np.abs(states[-1].embedding).max() > 1e2  # grown: the regime where Cholesky fails


@pytest.mark.parametrize(("name", "value"), [("warmup_iterations", 10**6), ("dimension", 1000)])
def test_fedcor_refuses_values_that_would_stall_a_run(name: str, value: int) -> None:
    with pytest.raises(FedsampleError, match=rf"'{name}'.*\[.*\]\. Got {value} instead") as caught:
        FedCorSampler(**{name: value})  # type: ignore[arg-type]
    assert caught.value.parameter == name
    table = FedCorSampler._parameter_constraints
    assert table["warmup_iterations"].right == table["refit_iterations"].right == 10**4  # type: ignore[attr-defined]
    assert table["dimension"].right == 100  # type: ignore[attr-defined]


def _hicsfl_rounds(sampler: HiCSFLSampler, count: int = 8) -> Any:
    """``count`` rounds in which the drawn clients send output-layer updates of mixed scales."""
    state = sampler.init(Federation.from_sizes(SIZES), 3)
    rng = np.random.default_rng(1)
    for t in range(count):
        selection = sampler.sample(state, rng)
        assert np.isfinite(selection.weights).all()
        ids = np.unique(selection.clients)
        updates = rng.standard_normal((ids.size, C * H + C)) * (1e-3 if t % 2 else 1e3)
        state = sampler.update(state, Feedback(round=t, selection=selection, clients=ids, updates=updates))
        yield state


@pytest.mark.parametrize(
    ("name", "value"), _cases(HiCSFLSampler, skip={"num_classes", "output_inputs"})
)  # those two are the model's: for_model checks them
def test_hicsfl_runs_or_refuses_at_each_end_of_every_declared_range(name: str, value: Any) -> None:
    params = {"num_classes": C, "output_inputs": H, "num_clusters": 3, "horizon": 20, name: value}
    outcome = _runs_or_refuses(lambda: HiCSFLSampler(**params), _hicsfl_rounds)
    # max_clients = 1 is below the 12 clients: init refuses the federation in one line.
    assert outcome == ("refused" if (name, value) == ("max_clients", 1) else "ran")


def test_for_model_reads_the_output_layer_and_refuses_one_that_does_not_match() -> None:
    shapes = [(50, 64), (50,), (10, 50), (10,)]
    assert HiCSFLSampler().for_model(shapes).output_inputs == 50
    assert HiCSFLSampler(output_inputs=50).for_model(shapes).output_inputs == 50
    for params, parameter, fragment in [
        ({"output_inputs": 49}, "output_inputs", "output layer, 50 (the model's output layer is a Linear(50, 10))"),
        ({"num_classes": 9}, "num_classes", "the model's output width, 10"),
    ]:
        with pytest.raises(FedsampleError, match=r"Got (49|9) instead") as caught:
            HiCSFLSampler(**params).for_model(shapes)  # type: ignore[arg-type]
        assert caught.value.parameter == parameter
        assert fragment in str(caught.value)
    with pytest.raises(FedsampleError, match=r"weight \(C, h\) and bias \(C,\)") as caught:
        HiCSFLSampler().for_model([(10, 50)])  # no bias
    assert caught.value.parameter == "output_inputs"
    # The largest declared widths: the sampler fits a model that has them (no vector is allocated).
    wide = HiCSFLSampler(num_classes=10**6).for_model([(10**6, 10**8), (10**6,)])
    assert wide.output_inputs == 10**8


def test_hicsfl_refuses_a_federation_whose_dissimilarities_cannot_fit_in_memory() -> None:
    huge = Federation.from_sizes(np.ones(10**7, dtype=np.int64))
    with pytest.raises(FedsampleError, match=r"to fit in memory") as caught:
        HiCSFLSampler(max_clients=10**8).init(huge, 3)
    assert caught.value.parameter == "federation"


# --- the command line ------------------------------------------------------------------------------


def _run(tmp_path: Path, capsys: Any, name: str, tables: str, *extra: str) -> tuple[int, str, Path]:
    config = tmp_path / f"{name}.toml"
    config.write_text(digits_config(seeds=1, rounds=2, tables=tables))
    out = tmp_path / name
    code, _, err = run_cli(["run", str(config), "-o", str(out), "-q", *extra], capsys)
    return code, err, out


def _state(out: Path) -> dict[str, Any]:
    [path] = sorted((out / "states").glob("hics-fl*.json"))
    payload: dict[str, Any] = json.loads(path.read_text())
    return payload


def test_cli_runs_hics_fl_with_no_output_width_given(tmp_path: Path, capsys: Any) -> None:
    """Two rounds on the embedded digits (10 clients, an MLP of width 16): HiCS-FL's output layer is the
    model's Linear(16, 10), read by the engine (base: refused at round 1, config.toml already written)."""
    code, err, out = _run(tmp_path, capsys, "hics", '[[samplers]]\nname = "hics-fl"\n')
    assert code == 0, err
    assert (out / "summary.csv").is_file()
    assert "output_inputs" not in (out / "config.toml").read_text()  # the config keeps what was asked
    assert '"output_inputs": 16' in json.dumps(_state(out))


@pytest.mark.parametrize(
    ("param", "key"),
    [("hics-fl.output_inputs=15", "samplers[0].output_inputs"), ("hics-fl.num_classes=9", "samplers[0].num_classes")],
)
def test_cli_refuses_an_output_layer_that_is_not_the_models_before_writing(
    tmp_path: Path, capsys: Any, param: str, key: str
) -> None:
    """output_inputs = 15 for the MLP's Linear(16, 10) read the wrong entries on base (and ran to the end)."""
    argv = ["--sampler", "hics-fl", "--param", param]
    code, err, out = _run(tmp_path, capsys, "wrong", '[[samplers]]\nname = "md"\n', *argv)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert f"'{key}' key" in err
    assert "Linear(16, 10)" in err
    assert not out.exists()


def test_cli_runs_hics_fl_at_extreme_declared_bounds(tmp_path: Path, capsys: Any) -> None:
    tables = (
        '[[samplers]]\nname = "hics-fl"\ntemperature = 1e-12\nentropy_weight = 1e12\nannealing = 1000.0\n'
        "horizon = 1\nnum_clusters = 1000000\nvariance_threshold = 0.0\n"
    )
    code, err, out = _run(tmp_path, capsys, "hics-extreme", tables)
    assert code == 0, err
    assert (out / "summary.csv").is_file()


def test_cli_runs_fedcor_for_two_rounds_on_the_default_data(tmp_path: Path, capsys: Any) -> None:
    tables = '[[samplers]]\nname = "fedcor"\nwarmup_rounds = 0\nwarmup_iterations = 20\nrefit_iterations = 5\n'
    code, err, out = _run(tmp_path, capsys, "fedcor", tables)
    assert code == 0, err
    assert (out / "summary.csv").is_file()


def test_cli_runs_fedcor_at_the_issues_values_and_extreme_bounds(tmp_path: Path, capsys: Any) -> None:
    """The issue's in-range values (noise 1e-6, learning_rate 1000, warmup_rounds 0, refit_interval 1),
    which gave a 61-line traceback on base, with history, decay, discount, dimension and seed at their
    ends too: a clean run."""
    tables = (
        '[[samplers]]\nname = "fedcor"\nnoise = 1e-6\nlearning_rate = 1000.0\nwarmup_rounds = 0\nrefit_interval = 1\n'
        "history = 1\ndecay = 5e-324\ndiscount = 5e-324\ndimension = 100\nseed = 9223372036854775807\n"
        "warmup_iterations = 200\nrefit_iterations = 200\n"
    )
    start = time.perf_counter()
    code, err, out = _run(tmp_path, capsys, "fedcor-extreme", tables)
    assert code == 0, err
    assert (out / "summary.csv").is_file()
    assert time.perf_counter() - start < 120


def test_cli_refuses_a_fedcor_fit_that_would_stall_in_one_line(tmp_path: Path, capsys: Any) -> None:
    argv = ["--sampler", "fedcor", "--param", "fedcor.warmup_iterations=1000000"]
    code, err, out = _run(tmp_path, capsys, "stall", '[[samplers]]\nname = "md"\n', *argv)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert "warmup_iterations" in err
    assert "10000" in err
    assert not out.exists()
