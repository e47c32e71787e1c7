"""The fixed runs of ``golden_runs.py`` reproduce their committed outputs byte for byte (this machine family's stored
set), or within a stated tolerance where no set of this machine family is stored."""

from __future__ import annotations

import pytest
from golden_runs import CASES, QUICK, differences


@pytest.mark.parametrize(
    "name", [pytest.param(name, marks=() if name in QUICK else pytest.mark.slow) for name in CASES]
)
def test_golden_outputs_are_reproduced_bit_for_bit(name: str) -> None:
    assert differences(name) == []
