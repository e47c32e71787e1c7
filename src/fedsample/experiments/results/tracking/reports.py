"""What every tracker shares: the contract the runner feeds, a report row's scalars, the reports of the
runs of a Ray task, a run's folder name, and the files a tracker writes in a run directory.

>>> import math
>>> row = {"label": "md", "sampler": "md", "seed": 0, "round": 1, "train_loss": 1.5, "test_loss": math.nan,
...        "distinct_clients": 5, "distinct_labels": -1}
>>> scalars(row)
{'train_loss': 1.5, 'distinct_clients': 5.0}
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from fedsample import _io
from fedsample._imports import missing_dependency

if TYPE_CHECKING:
    from fedsample.engine.history import History
    from fedsample.engine.specs import RoundReport

__all__ = [
    "IDENTITY",
    "Tracker",
    "announce",
    "flat_parameters",
    "folder_name",
    "reports_from_histories",
    "require",
    "scalars",
]

# The columns that name a row (not scalars of it).
IDENTITY = ("label", "sampler", "seed", "round")
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")


class Tracker(Protocol):
    """What the runner feeds: every :class:`RoundReport` (``log``), ``flush`` before a checkpoint is saved,
    then ``close`` (``complete``: the runs finished), or ``abandon`` after the tracker failed."""

    name: str

    def log(self, report: RoundReport) -> None: ...

    def flush(self) -> None: ...

    def close(self, *, complete: bool) -> None: ...

    def abandon(self) -> None: ...


def scalars(row: Mapping[str, Any]) -> dict[str, float]:
    """The values of a report row to write: every numeric column but the row's identity, less the missing
    marks (NaN, and ``-1`` for a count)."""
    values: dict[str, float] = {}
    for name, value in row.items():
        if name in IDENTITY or isinstance(value, (str, bool)) or not isinstance(value, (int, float)):
            continue
        if isinstance(value, int) and value == -1:
            continue
        if isinstance(value, float) and math.isnan(value):
            continue
        values[name] = float(value)
    return values


def reports_from_histories(histories: Sequence[History]) -> Iterator[RoundReport]:
    """The reports :func:`fedsample.engine.simulate` gave while it trained the runs of ``histories``, one per
    round, rebuilt from their metrics table (the runs of a Ray task, reported when the task returns)."""
    from fedsample.engine.specs import RoundReport
    from fedsample.experiments.results.metrics import metrics_table

    tables = [metrics_table([history]) for history in histories]
    rounds = max(history.num_rounds for history in histories)
    evaluated = {int(r) for history in histories for r in history.eval_rounds}
    for done in range(rounds + 1):
        rows = tuple(
            {name: _plain(values[done]) for name, values in table.items()}
            for table in tables
            if done < len(table["round"])
        )
        yield RoundReport(round=done, total=rounds, evaluated=done in evaluated, rows=rows)


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def folder_name(label: str) -> str:
    """A folder name for a run's label: the label itself when it is a plain lower-case name, else its letters
    and a short hash of it (two labels never share a folder, even on a file system that ignores case)."""
    if _SAFE_NAME.fullmatch(label) and label not in (".", "..") and label == label.lower():
        return label  # (a capital letter gets the hash: "MD" and "md" share a folder where case is ignored)
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("._-")[:60] or "run"
    return f"{cleaned}-{hashlib.sha1(label.encode()).hexdigest()[:8]}"


def announce(path: Path) -> None:
    """List ``path`` in the open run directory's manifest before its first byte (and make its folders)."""
    guard = _io.current_guard()
    if guard is not None:
        guard.announce(path)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)


def require(module: str, extra: str, parameter: str) -> None:
    """Refuse, in one line, a tracker whose package is not installed."""
    if importlib.util.find_spec(module) is None:
        raise missing_dependency(f"The '{parameter}' parameter", f"the {module} package", extra, parameter=parameter)


def flat_parameters(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested table as dotted keys (``training.rounds``); lists as their text."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flat_parameters(value, f"{name}."))
        else:
            flat[name] = value
    return flat
