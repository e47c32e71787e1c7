"""Comparing two run directories file by file, the wall-clock fields aside (shared by the Ray and thread tests)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fedsample.experiments.results.metrics import read_metrics

# Files that hold wall-clock seconds: compared field by field without them, every other file byte for byte.
TIMED = {"metrics.csv", "metrics.parquet", "summary.csv", "summary.md", "summary.tex", "report.md", "runs.json"}
# The manifest lists every file the run wrote, a Ray run's task files (removed at its end) included.
MANIFEST = "manifest.json"


def assert_same_run_directory(first: Path, second: Path, *, manifests: bool = True) -> None:
    """Every file equal, byte for byte, except the wall-clock fields (seconds per round, run seconds).

    ``manifests=False`` leaves the manifests out, for a directory that a test assembled by hand.
    """
    names = sorted(str(p.relative_to(first)) for p in first.rglob("*") if p.is_file())
    assert names == sorted(str(p.relative_to(second)) for p in second.rglob("*") if p.is_file())
    for name in names:
        if name not in TIMED and name != MANIFEST:
            assert (first / name).read_bytes() == (second / name).read_bytes(), name
    if MANIFEST in names and manifests:
        assert _without_tasks(first / MANIFEST) == _without_tasks(second / MANIFEST)
    a, b = read_metrics(first), read_metrics(second)
    assert a.keys() == b.keys()
    for column in a:
        if column != "round_seconds":
            np.testing.assert_array_equal(a[column], b[column], err_msg=column)
    runs_a, runs_b = (json.loads((d / "runs.json").read_text()) for d in (first, second))
    for payload in (runs_a, runs_b):
        payload["info"].pop("seconds")
    assert runs_a == runs_b
    for name in ("summary.csv", "summary.md", "summary.tex", "report.md"):
        # the seconds per round end each row of summary.csv and are the report's note on wall time;
        # the report also names its own directory
        lines_a, lines_b = (
            [_without_shared_time(line) for line in (d / name).read_text().replace(str(d), "RUN").splitlines()]
            for d in (first, second)
        )
        assert len(lines_a) == len(lines_b), name
        for x, y in zip(lines_a, lines_b, strict=True):
            assert x == y or _without_last_cell(x) == _without_last_cell(y), (name, x, y)


def _without_tasks(manifest: Path) -> dict[str, object]:
    listed = json.loads(manifest.read_text())
    for key in ("files", "directories"):
        listed[key] = [entry for entry in listed[key] if entry != "tasks" and not entry.startswith("tasks/")]
    return dict(listed)


def _without_last_cell(row: str) -> str:
    return row.rstrip(" |").rsplit("|" if "|" in row else ",", 1)[0]


def _without_shared_time(line: str) -> str:
    """The report's note on the wall time, whatever it says (shared by every label, or per label)."""
    return "Wall time" if line.startswith("Wall time") else line
