"""Saved sampler states and checkpoints are read strictly (issue 24 item 6).

A real state, encoded as JSON and edited by hand, is refused in one line naming the field, both by
:func:`fedsample.loads` and as a saved sampler file (:func:`sampler_from_dict`): booleans are
booleans (``"x"``, NaN, ``1e30`` or ``1`` were read as ``True``), numbers are numbers (``true`` was
read as 1), the counters of Oort's clients stay within the rounds its state has done, and DivFL's
cached distances agree with the gradients they derive from. Untouched states read back.

Deterministic although :func:`~fedsample.samplers.similarity.distances.check_squared_distances`
probes with fresh random signs: an honest cache passes every probe (its tolerance bounds the float
rounding), and a symmetric pair of entries off by ``delta`` moves its row's product by exactly
``|delta|`` whatever the signs, so the edits below (far beyond the tolerance) fail every probe.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fedsample
from cli_helpers import run_cli, snapshot
from fedsample import Federation, FedsampleError
from fedsample.experiments.config import config_from_dict
from fedsample.experiments.executors import CHECKPOINT_FILE
from fedsample.experiments.runner import run_experiment
from fedsample.samplers import DivFLSampler, Feedback, Sampler
from fedsample.samplers.persistence import sampler_from_dict, sampler_to_dict
from run_interrupts import Interrupted, StopAfter
from sampler_cases import contract_federation, make_case

Fields = dict[str, Any]
Tamper = Callable[[Fields], None]


def _encoded(state: Any) -> dict[str, Any]:
    encoded: dict[str, Any] = json.loads(fedsample.dumps(state))
    return encoded


def _oort() -> tuple[Sampler[Any], dict[str, Any]]:
    """Oort and its state after four rounds of synthetic feedback (round 4), as JSON."""
    sampler, state = make_case("oort", contract_federation(), 3)
    return sampler, _encoded(state)


def _divfl() -> tuple[Sampler[Any], dict[str, Any]]:
    """DivFL after six rounds of random update vectors (d = 64) with norms from 1e-3 to 1e3, as JSON."""
    sampler = DivFLSampler(representative="update")
    state = sampler.init(Federation.from_sizes(list(range(1, 13))), 4)
    rng = np.random.default_rng(24)
    for t in range(6):
        selection = sampler.sample(state, rng)
        clients = np.unique(selection.clients)
        updates = rng.standard_normal((clients.size, 64)) * 10.0 ** rng.uniform(-3, 3, size=(clients.size, 1))
        state = sampler.update(state, Feedback(round=t, selection=selection, clients=clients, updates=updates))
    return sampler, _encoded(state)


def _read_both_ways(sampler: Sampler[Any], encoded: dict[str, Any]) -> list[Any]:
    """The state read by fedsample.loads and from a saved sampler file holding it."""
    saved = json.dumps({**sampler_to_dict(sampler, None), "state": encoded})
    return [fedsample.loads(json.dumps(encoded)), sampler_from_dict(json.loads(saved))[1]]


def _assert_refused(sampler: Sampler[Any], encoded: dict[str, Any], tamper: Tamper, field: str) -> None:
    tampered = copy.deepcopy(encoded)
    tamper(tampered["fields"])
    saved = json.dumps({**sampler_to_dict(sampler, None), "state": tampered})
    for read in (lambda: fedsample.loads(json.dumps(tampered)), lambda: sampler_from_dict(json.loads(saved))):
        with pytest.raises(FedsampleError) as info:
            read()
        message = str(info.value)
        assert "\n" not in message
        assert f"'{field}' field of {encoded['__type__']}" in message


def _element(field: str, value: Any, position: int = 0) -> Tamper:
    def tamper(fields: Fields) -> None:
        fields[field]["data"][position] = value

    return tamper


def _scalar(field: str, value: Any) -> Tamper:
    def tamper(fields: Fields) -> None:
        fields[field] = value

    return tamper


def _beyond_round(field: str) -> Tamper:
    def tamper(fields: Fields) -> None:
        fields[field]["data"][0] = fields["round"] + 1

    return tamper


OORT_CASES: dict[str, tuple[Tamper, str]] = {
    'explored "x"': (_element("explored", "x"), "explored"),
    "explored NaN": (_element("explored", float("nan")), "explored"),
    "explored encoded NaN": (_element("explored", {"__float__": "nan"}), "explored"),
    "explored 1e30": (_element("explored", 1e30), "explored"),
    "explored 1 for true": (_element("explored", 1), "explored"),
    "available 0 for false": (_element("available", 0, position=1), "available"),
    "utility element true": (_element("utility", True), "utility"),
    "last_round element true": (_element("last_round", True), "last_round"),
    "epsilon true": (_scalar("epsilon", True), "epsilon"),
    "percentile beyond 100": (_scalar("percentile", 100.5), "percentile"),
    "timed_out 1 for true": (_element("timed_out", 1), "timed_out"),
    "round true": (_scalar("round", True), "round"),
    "last_round 2**62": (_element("last_round", 2**62), "last_round"),
    "last_round one beyond the round": (_beyond_round("last_round"), "last_round"),
    "participations one beyond the round": (_beyond_round("participations"), "participations"),
    "participations 2**62": (_element("participations", 2**62), "participations"),
}


@pytest.mark.parametrize("case", list(OORT_CASES))
def test_a_tampered_oort_state_is_refused_in_one_line(case: str) -> None:
    sampler, encoded = _oort()
    tamper, field = OORT_CASES[case]
    _assert_refused(sampler, encoded, tamper, field)


def test_an_untouched_oort_state_reads_back_with_counters_at_the_round() -> None:
    """The control: the saved state itself, and its counters raised to the state's round (the bound)."""
    sampler, encoded = _oort()
    for state in _read_both_ways(sampler, encoded):
        assert fedsample.dumps(state) == json.dumps(encoded)
    at_bound = copy.deepcopy(encoded)
    for field in ("last_round", "participations"):
        at_bound["fields"][field]["data"][0] = at_bound["fields"]["round"]
    assert all(int(state.last_round[0]) == encoded["fields"]["round"] for state in _read_both_ways(sampler, at_bound))


def _largest_pair(fields: Fields) -> tuple[np.ndarray, int, int]:
    """The distance matrix (a view of the encoded data's values) and its largest entry's position."""
    n = fields["distances"]["shape"][0]
    matrix = np.asarray(fields["distances"]["data"], dtype=np.float64).reshape(n, n)
    i, j = np.unravel_index(int(np.argmax(matrix)), matrix.shape)
    return matrix, int(i), int(j)


def _set_distances(edit: Callable[[np.ndarray, int, int], None]) -> Tamper:
    def tamper(fields: Fields) -> None:
        matrix, i, j = _largest_pair(fields)
        edit(matrix, i, j)
        fields["distances"]["data"] = matrix.ravel().tolist()

    return tamper


def _doubled(matrix: np.ndarray, i: int, j: int) -> None:
    matrix[i, j] = matrix[j, i] = 2 * matrix[i, j]


def _zeroed(matrix: np.ndarray, i: int, j: int) -> None:
    matrix[i, j] = matrix[j, i] = 0.0


def _one_side(matrix: np.ndarray, i: int, j: int) -> None:
    matrix[i, j] *= 1.5


def _gradient_row_doubled(fields: Fields) -> None:
    """The largest gradient row doubled, the distances kept: the cache no longer derives from them."""
    rows, dim = fields["gradients"]["shape"]
    gradients = np.asarray(fields["gradients"]["data"], dtype=np.float32).reshape(rows, dim)
    gradients[int(np.argmax(np.linalg.norm(gradients, axis=1)))] *= 2
    fields["gradients"]["data"] = gradients.ravel().tolist()


DIVFL_CASES: dict[str, Tamper] = {
    "largest distance doubled": _set_distances(_doubled),
    "largest distance zeroed": _set_distances(_zeroed),
    "largest distance changed on one side": _set_distances(_one_side),
    "a gradient row doubled": _gradient_row_doubled,
}


@pytest.mark.parametrize("case", list(DIVFL_CASES))
def test_divfl_distances_that_contradict_its_gradients_are_refused(case: str) -> None:
    sampler, encoded = _divfl()
    _assert_refused(sampler, encoded, DIVFL_CASES[case], "distances")


def test_an_honest_divfl_cache_reads_back_under_every_probe() -> None:
    """Read 20 times, each with fresh probe signs: norms spanning six orders of magnitude never fail."""
    sampler, encoded = _divfl()
    matrix, i, j = _largest_pair(encoded["fields"])
    assert matrix[i, j] > 1.0  # the edits above change an entry by far more than the rounding allowed
    for _ in range(20):
        for state in _read_both_ways(sampler, encoded):
            assert fedsample.dumps(state) == json.dumps(encoded)


@pytest.mark.parametrize(
    "text",
    ["[" * 100_000, '{"a": ' * 100_000, "", "not json", "{", '{"__type__": "OortState", "fields": '],
    ids=["100000 lists", "100000 objects", "empty", "not json", "unclosed", "truncated state"],
)
def test_loads_refuses_text_it_cannot_parse_with_the_librarys_error(text: str) -> None:
    with pytest.raises(FedsampleError) as info:
        fedsample.loads(text)
    assert info.value.parameter == "text"
    assert "\n" not in str(info.value)


# --- the resume path: a checkpoint holding a tampered Oort state ------------------------------------


def _interrupted_oort_run(run_dir: Path) -> None:
    """A run of Oort on the linear data, cut after 2 of its 6 rounds with a checkpoint every round."""
    config = config_from_dict(
        {
            "name": "oort",
            "seeds": [0],
            "federation": {"dataset": "osmd-linear", "num_clients": 12, "sigma": 3.0, "seed": 4},
            "algorithm": {"name": "minibatch-sgd"},
            "training": {"rounds": 6, "num_sampled": 3, "local_steps": 1, "batch_size": 10, "local_lr": 0.05},
            "samplers": [{"name": "oort"}],
            "run": {"checkpoint_every": 1},
        }
    )
    with pytest.raises(Interrupted):
        run_experiment(config, run_dir, progress=StopAfter(2))


def _edit_checkpointed_oort(path: Path, edit: Callable[[Fields, dict[str, np.ndarray]], None]) -> None:
    """Rewrite the checkpoint at ``path`` with ``edit`` applied to its Oort state's fields (and the
    archive's arrays, where the state's arrays are stored), as an edit by hand would."""
    with np.load(path, allow_pickle=False) as archive:
        members = {name: archive[name] for name in archive.files}
    header = json.loads(members["header"].tobytes())
    (state,) = header["content"]["fields"]["sampler_states"]["__tuple__"]
    assert state["__type__"] == "OortState"
    edit(state["fields"], members)
    members["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    with open(path, "wb") as handle:
        np.savez(handle, **members)


def _last_round_of_client_0(value: int) -> Callable[[Fields, dict[str, np.ndarray]], None]:
    def edit(fields: Fields, members: dict[str, np.ndarray]) -> None:
        name = f"a{fields['last_round']['__array__']}"
        last_round = members[name].copy()
        last_round[0] = value
        members[name] = last_round

    return edit


def test_resume_refuses_a_checkpoint_whose_oort_last_round_is_beyond_its_round(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``last_round = 2**62`` once let ``--resume`` run on (and, in a long run, stall after round 501)."""
    run_dir = tmp_path / "run"
    _interrupted_oort_run(run_dir)
    _edit_checkpointed_oort(run_dir / CHECKPOINT_FILE, _last_round_of_client_0(2**62))
    before = snapshot(run_dir)
    code, out, err = run_cli(["run", "--resume", str(run_dir), "-q"], capsys)
    assert (code, out, len(err.splitlines())) == (2, "", 1), err
    assert "'last_round' field of OortState" in err
    assert snapshot(run_dir) == before


def test_resume_refuses_a_checkpoint_whose_oort_round_is_beyond_the_rounds_done(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    _interrupted_oort_run(run_dir)

    def edit(fields: Fields, members: dict[str, np.ndarray]) -> None:
        fields["round"] = 2**62
        _last_round_of_client_0(2**62)(fields, members)

    _edit_checkpointed_oort(run_dir / CHECKPOINT_FILE, edit)
    code, out, err = run_cli(["run", "--resume", str(run_dir), "-q"], capsys)
    assert (code, out, len(err.splitlines())) == (2, "", 1), err
    assert "sampler state at round 4611686018427387904, beyond the 1 rounds done" in err, err


@pytest.mark.parametrize(
    ("case", "field", "value"),
    [
        ("afl", "losses", 1e308),  # AFL's valuation of it overflowed
        ("afl", "losses", -1e101),
        ("high-loss", "losses", math.inf),
        ("hics-fl", "entropies", 1e308),  # the entropies' variance overflowed
        ("hics-fl", "entropies", 14.0),  # beyond log(10**6), the most classes a model may have
    ],
)
def test_a_saved_loss_or_entropy_that_is_no_measurement_is_refused(case: str, field: str, value: float) -> None:
    """Issue 32: a saved state is held to what its sampler can record (a loss within FEEDBACK_LIMIT, as a
    Feedback's is; an entropy at most log C), so that an edited 1e308 is refused in one line on load."""
    sampler, state = make_case(case, contract_federation(), 3)
    saved = json.loads(json.dumps(sampler_to_dict(sampler, state)))
    saved["state"]["fields"][field]["data"][0] = value if math.isfinite(value) else {"__float__": "inf"}
    with pytest.raises(FedsampleError, match=field) as refused:
        sampler_from_dict(json.loads(json.dumps(saved)))
    assert "\n" not in str(refused.value)
    saved["state"]["fields"][field]["data"][0] = 0.5  # the control: a measurement reads back
    sampler_from_dict(json.loads(json.dumps(saved)))
