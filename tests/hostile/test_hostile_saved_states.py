"""Saved sampler states edited by hand, generated from each state's own fields (issue 32 item 10, part 2).

Every sampler case of :mod:`sampler_cases` (each registered sampler, learned states after four rounds of
synthetic feedback) is saved as ``fedsample stats --sampler-state`` reads it, and each generic edit of
:func:`hostile_states.edits` is read back with :func:`sampler_from_dict`: it must be refused in one line
(the library's error), or give a sampler and a state that draw valid selections (ids in range, finite
weights) and take the next round's feedback with no error but the library's. The default suite reads one
edit per node of each state, in turn through the kinds of edit; the slow sweep reads them all.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import numpy as np
import pytest
from hostile_samplers import check_selection, check_state
from hostile_states import Edit, edits
from hostile_values import assert_one_line

from fedsample import FedsampleError, Selection
from fedsample.samplers.persistence import sampler_from_dict, sampler_to_dict
from sampler_cases import (
    CASES,
    CONTRACT_NUM_SAMPLED,
    WARM_UP_ROUNDS,
    client_norms,
    contract_federation,
    make_case,
    synthetic_feedback,
)

N = contract_federation().num_clients


@cache
def _saved(case: str) -> dict[str, Any]:
    sampler, state = make_case(case, contract_federation(), CONTRACT_NUM_SAMPLED)
    saved: dict[str, Any] = json.loads(json.dumps(sampler_to_dict(sampler, state), allow_nan=False))
    return saved


@cache
def _edits(case: str) -> list[Edit]:
    return edits(_saved(case))


def _split() -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(default, slow): per case, one edit of each node of the state (``state.design.probabilities``),
    taking turns through the kinds of edit, and every top-level edit, in the default suite; every other
    edit in the slow sweep."""
    default: list[tuple[str, int]] = []
    slow: list[tuple[str, int]] = []
    for case in CASES:
        seen: dict[str, int] = {}
        for index, edit in enumerate(_edits(case)):
            node = edit.label.split(" ", 1)[0]
            turn = seen.get(node, 0)
            seen[node] = turn + 1
            chosen = not edit.label.startswith("state") or turn == _turn(case, node)
            (default if chosen else slow).append((case, index))
    return default, slow


def _turn(case: str, node: str) -> int:
    """Which of a node's edits the default suite reads: the k-th, k rotating with the node's position, so
    that across cases every kind of edit is read."""
    nodes = sorted({e.label.split(" ", 1)[0] for e in _edits(case)})
    count = sum(1 for e in _edits(case) if e.label.split(" ", 1)[0] == node)
    return (nodes.index(node) + CASES.index(case)) % count


DEFAULT, SLOW = _split()

# Edits that expose a defect whose fix is another helper's: (case, label) -> reason (none known today).
KNOWN: dict[tuple[str, str], str] = {}


def _params(cases: list[tuple[str, int]]) -> list[Any]:
    out = []
    for case, index in cases:
        label = _edits(case)[index].label
        marks = [pytest.mark.xfail(strict=True, reason=KNOWN[case, label])] if (case, label) in KNOWN else []
        out.append(pytest.param(case, index, id=f"{case}: {label}", marks=marks))
    return out


@pytest.mark.parametrize(("case", "index"), _params(DEFAULT))
def test_an_edited_saved_state(case: str, index: int) -> None:
    _read_edited(case, index)


@pytest.mark.slow
@pytest.mark.parametrize(("case", "index"), _params(SLOW))
def test_an_edited_saved_state_sweep(case: str, index: int) -> None:
    _read_edited(case, index)


def test_every_saved_state_reads_back_untouched() -> None:
    """The control: each unedited file reads back and is used."""
    for case in CASES:
        _use(*sampler_from_dict(json.loads(json.dumps(_saved(case)))))


def _read_edited(case: str, index: int) -> None:
    edited = _edits(case)[index].apply(_saved(case))
    try:
        sampler, state = sampler_from_dict(json.loads(json.dumps(edited)))
    except FedsampleError as error:
        assert_one_line(error)
        return
    _use(sampler, state)


def _use(sampler: Any, state: Any) -> None:
    """A state that was read must draw valid selections; its next round's feedback may be refused only
    by the library's one-line error (an edited round counter makes the feedback's round an earlier one)."""
    check_state(sampler, state, N)
    rng, norms = np.random.default_rng(3), client_norms(N)
    t = int(getattr(state, "round", WARM_UP_ROUNDS))
    if sampler.two_phase:
        candidates = Selection(clients=np.arange(N), weights=sampler.importances(state))
        try:
            state = sampler.update(state, synthetic_feedback(t, candidates, norms))
        except FedsampleError as error:
            assert_one_line(error)
            return
    for _ in range(2):
        selection = sampler.sample(state, rng)
        check_selection(selection, N)
    if not sampler.two_phase:
        try:
            sampler.update(state, synthetic_feedback(t, selection, norms))
        except FedsampleError as error:
            assert_one_line(error)
