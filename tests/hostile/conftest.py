"""The hostile-input suite (issue 32 item 10), generated from what the code declares.

Its modules import their helpers by name (``hostile_values``, ``hostile_samplers``...), which this
folder's place on ``sys.path`` allows. At the end of a run that selected any of its tests, the terminal
summary says how many cases each surface ran: one per test, and for a hypothesis test the examples it
draws (its ``hostile_examples`` mark), so that ``pytest tests/hostile -q`` reports them (under pytest-xdist,
the workers collect and the controller prints, through ``tests/conftest.py``).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SURFACES = {
    "test_hostile_sampler_bounds.py": "samplers' hyperparameters at their bounds",
    "test_hostile_saved_states.py": "saved sampler states, edited",
    "test_hostile_config_keys.py": "config keys through run --set",
    "test_hostile_data_files.py": "data files of every format",
    "test_hostile_entry_points.py": "Python entry points",
}
_COUNTS: Counter[str] = Counter()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "hostile_examples(n): a hypothesis test of the hostile suite drawing n examples")


def pytest_collection_finish(session: pytest.Session) -> None:
    _COUNTS.clear()
    for item in session.items:
        path = Path(str(item.fspath)).resolve()
        if path.parent == HERE:
            mark = item.get_closest_marker("hostile_examples")
            _COUNTS[path.name] += int(mark.args[0]) if mark else 1
    worker_output = getattr(session.config, "workeroutput", None)
    if worker_output is not None and _COUNTS:  # an xdist worker: the controller prints it (tests/conftest.py)
        worker_output.setdefault("summaries", {})[TITLE] = _summary()


TITLE = "hostile cases per surface (hypothesis tests counted by their examples)"


def _summary() -> list[str]:
    lines = [f"{surface}: {_COUNTS[module]} ({module})" for module, surface in SURFACES.items() if _COUNTS[module]]
    return [*lines, f"all surfaces: {sum(_COUNTS.values())}"]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _COUNTS or hasattr(terminalreporter.config, "workeroutput"):
        return
    terminalreporter.write_sep("-", TITLE)
    for line in _summary():
        terminalreporter.write_line(line)
