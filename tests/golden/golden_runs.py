"""Golden outputs: the metrics and sampler states of fixed runs, to prove a refactor changes nothing.

``python tests/golden/golden_runs.py write`` runs every case through the real command line and stores,
per case, the per-round metrics and the summary (without their wall-clock columns, which no two
runs share) and the SHA-256 of every other file that carries results: the sampler states and
``runs.json``. ``python tests/golden/golden_runs.py check`` (and ``tests/golden/test_golden.py``) runs
them again and compares byte for byte.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

# name -> arguments of `fedsample run` (the run directory and -q are added). Rounds are shortened
# where the preset's own count would make the check slow; the default preset runs as shipped.
CASES: dict[str, list[str]] = {
    "default": ["default"],
    "default-short": ["default", "--set", "training.rounds=3"],
    "osmd-linear": ["osmd-linear", "--set", "training.rounds=40"],
    "fedsampling-lognormal": ["fedsampling-lognormal", "--set", "training.rounds=8"],
    "clustered-dirichlet": ["clustered-dirichlet", "--set", "training.rounds=4"],
    "impact-quadratic": ["impact-quadratic"],
}
# Cases cheap enough for the default test run (the others are marked slow).
QUICK = ("default-short",)

_TIMING_COLUMNS = {"round_seconds", "round_seconds_mean"}


def _without_timing(path: Path) -> str:
    """The CSV at ``path`` with its wall-clock columns removed (every other byte kept)."""
    rows = list(csv.reader(io.StringIO(path.read_text())))
    keep = [k for k, name in enumerate(rows[0]) if name not in _TIMING_COLUMNS]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in rows:
        writer.writerow([row[k] for k in keep])
    return out.getvalue()


def _drop_timing(value: object) -> object:
    """``value`` (parsed JSON) without its wall-clock entries (keys ``seconds`` or ``*_seconds``)."""
    if isinstance(value, dict):
        return {k: _drop_timing(v) for k, v in value.items() if k != "seconds" and not k.endswith("_seconds")}
    if isinstance(value, list):
        return [_drop_timing(v) for v in value]
    return value


def snapshot(run_dir: Path) -> dict[str, str]:
    """What a case is compared on: stored file name -> text.

    Each ``metrics.csv`` and ``summary.csv`` of the run (a suite has one per sub-run) is kept as text
    without its wall-clock columns, under its path with ``/`` written ``__``; ``digests.json`` holds
    the SHA-256 of every ``runs.json`` (without its wall-clock entries), ``quadratic.json`` and
    sampler state.
    """
    out: dict[str, str] = {}
    digests = {}
    for path in sorted(run_dir.rglob("*")):
        relative = str(path.relative_to(run_dir))
        if path.name in ("metrics.csv", "summary.csv"):
            out[relative.replace("/", "__")] = _without_timing(path)
        elif path.name == "runs.json":  # its wall-clock entries removed
            text = json.dumps(_drop_timing(json.loads(path.read_text())), sort_keys=True)
            digests[relative] = hashlib.sha256(text.encode()).hexdigest()
        elif path.name == "quadratic.json" or (path.parent.name == "states" and path.suffix == ".json"):
            digests[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
    out["digests.json"] = json.dumps(digests, indent=1, sort_keys=True) + "\n"
    return out


def run_case(name: str, folder: Path) -> dict[str, str]:
    from fedsample.cli import main

    run_dir = folder / name
    status = main(["run", *CASES[name], "-o", str(run_dir), "-q"])
    if status != 0:
        raise RuntimeError(f"golden case {name!r} exited with {status}")
    return snapshot(run_dir)


def stored(name: str) -> dict[str, str]:
    folder = HERE / "data" / name
    return {path.name: path.read_text() for path in sorted(folder.iterdir())}


def differences(name: str) -> list[str]:
    """The files of case ``name`` that differ from the stored golden outputs (empty when identical)."""
    with tempfile.TemporaryDirectory() as folder:
        now = run_case(name, Path(folder))
    golden = stored(name)
    return sorted(key for key in set(now) | set(golden) if now.get(key) != golden.get(key))


def main(argv: list[str]) -> int:
    action, names = argv[0], argv[1:] or list(CASES)
    if action == "write":
        for name in names:
            with tempfile.TemporaryDirectory() as folder:
                files = run_case(name, Path(folder))
            target = HERE / "data" / name
            target.mkdir(parents=True, exist_ok=True)
            for key, text in files.items():
                (target / key).write_text(text)
            print(f"{name}: wrote {', '.join(sorted(files))}")
        return 0
    failed = 0
    for name in names:
        diff = differences(name)
        print(f"{name}: {'identical' if not diff else 'DIFFERS in ' + ', '.join(diff)}")
        failed += bool(diff)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:] or ["check"]))
