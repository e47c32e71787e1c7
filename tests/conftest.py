"""Shared fixtures. Its presence also puts ``tests/`` on ``sys.path`` so that ``sampler_cases`` imports."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from fedsample import Federation
from sampler_cases import contract_federation

# Property-based tests draw the same examples on every run (a fixed seed, like every other
# statistical test here), so that CI results are reproducible; no example database is kept.
settings.register_profile("fedsample", derandomize=True, database=None, deadline=None)
settings.load_profile("fedsample")


@pytest.fixture
def federation() -> Federation:
    """The contract federation: eight clients of unequal sizes."""
    return contract_federation()


@pytest.fixture(scope="session")
def fedsample_script() -> Path:
    """The installed ``fedsample`` console script, next to the interpreter running the tests."""
    script = Path(sys.executable).parent / "fedsample"
    if not script.exists():
        pytest.fail(f"the fedsample console script is not installed at {script}")
    return script


@pytest.fixture
def without_dp_accounting(monkeypatch: pytest.MonkeyPatch) -> None:
    """``importlib.import_module("dp_accounting")`` fails as it does where the ``privacy`` extra is not installed."""
    real = importlib.import_module

    def missing(name: str, *args: Any) -> Any:
        if name == "dp_accounting":
            raise ModuleNotFoundError("No module named 'dp_accounting'", name="dp_accounting")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", missing)
