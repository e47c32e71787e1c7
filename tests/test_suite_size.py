"""The README's test count stays true: within 10% of the tests that a whole default run collects; and the
modules that ``tests/conftest.py`` hands out first under pytest-xdist exist.

The count is the run's own (the items the session selected, on each xdist worker as well), so the test
costs nothing; a run of part of the suite (some files, ``-k``, ``-m slow``, ``--lf``) cannot tell the
whole count and skips, saying so.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# The README's paragraph on `make check`: "... the docs build and 12,345 tests)".
STATED = re.compile(r"\*\*Run the checks\.\*\*.*?(?P<count>\d[\d,]*) tests\b", re.DOTALL)
TOLERANCE = 0.10


def stated_count(text: str) -> int:
    """The test count that the README's paragraph on ``make check`` states."""
    match = STATED.search(text)
    if match is None:
        raise ValueError("README.md's paragraph on `make check` states no test count ('... N tests')")
    return int(match["count"].replace(",", ""))


def _whole_default_run(config: pytest.Config) -> bool:
    """Whether this session collected what ``make test`` collects (the testpaths, the default marks)."""
    return (
        config.args_source == pytest.Config.ArgsSource.TESTPATHS
        and (config.option.markexpr or "") == "not slow"
        and not config.option.keyword
        and not config.getoption("deselect", None)
        and not config.getoption("lf", False)
        and not config.getoption("stepwise", False)
    )


def test_stated_count_reads_the_readme_paragraph() -> None:
    assert stated_count("**Run the checks.** It took 5 min (lint, the docs build and 12,345 tests).") == 12345
    with pytest.raises(ValueError, match="states no test count"):
        stated_count("**Run the checks.** It takes a while.")


def test_the_readme_states_the_test_count_within_ten_percent(request: pytest.FixtureRequest) -> None:
    if not _whole_default_run(request.config):
        pytest.skip("counts the tests of a whole default run (`pytest` or `make test`), not of a part")
    collected = len(request.session.items)
    stated = stated_count(README.read_text(encoding="utf-8"))
    assert abs(stated - collected) <= TOLERANCE * collected, (
        f"README.md states {stated} tests, the suite collects {collected}: update its paragraph on `make check`"
    )


def test_the_long_modules_handed_out_first_exist(request: pytest.FixtureRequest) -> None:
    conftest = request.config.pluginmanager.get_plugin(str(ROOT / "tests" / "conftest.py"))
    assert conftest is not None
    assert conftest.LONG_FIRST
    assert sorted(name for name in conftest.LONG_FIRST if not (ROOT / name).is_file()) == []
