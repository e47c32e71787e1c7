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


# Under pytest-xdist, the modules of the longest tests (whole runs through the command line, the notebooks,
# the wheel; each 5 to 50 s of CPU) are handed out first, so that no worker is left running one of them
# at the end while the others wait. The order within each part is the collection's.
LONG_FIRST = frozenset(
    {
        "tests/test_docs_snippets.py",
        "tests/test_notebooks.py",
        "tests/test_examples.py",
        "tests/test_wheel.py",
        "tests/test_packaging.py",
        "tests/experiments/test_resume.py",
        "tests/experiments/test_resumable.py",
        "tests/experiments/test_ray.py",
        "tests/experiments/test_rundir_faults.py",
        "tests/experiments/test_rundir_kill.py",
        "tests/cli/test_cli_interrupts.py",
        "tests/engine/test_engine_backends.py",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: every worker sorts its collection the same way
        items.sort(key=lambda item: item.nodeid.split("::", 1)[0] not in LONG_FIRST)


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> list[pytest.Item] | None:
    """A test function marked slow makes no items in a run that deselects the slow tests (the default
    ``-m 'not slow'``): the hostile suite's sweeps alone are 13,000 parameter sets, whose items every xdist
    worker would build only to deselect them. Slow marks on a class, a module or a parameter set are left to
    the usual deselection."""
    if collector.config.option.markexpr == "not slow" and any(
        mark.name == "slow" for mark in getattr(obj, "pytestmark", ())
    ):
        return []
    return None


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


# Under pytest-xdist the workers collect the tests, so a folder's conftest that summarises what it collected
# (tests/hostile's case counts) leaves its lines in the worker's ``workeroutput["summaries"]``, by title;
# the controller prints them once (every worker collects the same tests).
_WORKER_SUMMARIES: dict[str, list[str]] = {}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    for title, lines in getattr(node, "workeroutput", {}).get("summaries", {}).items():
        _WORKER_SUMMARIES.setdefault(title, lines)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for title, lines in _WORKER_SUMMARIES.items():
        terminalreporter.write_sep("-", title)
        for line in lines:
            terminalreporter.write_line(line)
