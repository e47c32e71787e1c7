"""Golden outputs: the metrics and sampler states of fixed runs, to prove a refactor changes nothing.

``python tests/golden/golden_runs.py write [CASE ...]`` runs every case through the real command line and
stores, per case, the per-round metrics and the summary (without their wall-clock columns, which no two
runs share) and the SHA-256 of every other file that carries results: the sampler states and
``runs.json``. ``python tests/golden/golden_runs.py check`` (and ``tests/golden/test_golden.py``) runs
them again and compares byte for byte.

The float32 kernels of PyTorch differ between CPU families (AVX-512 and AVX2 builds of the same matmul
round differently in the last bit), so one machine's outputs are not another's. Each case keeps one
stored set per machine family, ``data/CASE/VARIANT/``; ``write`` stores this machine's under its
variant (``--variant NAME``; by default the name of :func:`machine_variant`), leaving the others.
A check passes when the outputs equal one stored set byte for byte. On a machine whose family has no
stored set, it compares the metrics and summaries with every stored set within :data:`RELATIVE_TOLERANCE`
instead (the state digests cannot be compared that way) and says so: such a check shows that
nothing moved beyond rounding, not that nothing moved at all; write this machine's set before a refactor.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import platform
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Every registered sampler that runs on the default federation without per-client inputs of its own
# (clustered and clustered-groups take a matrix or group ids; the population samplers, a sizes file).
EVERY_SAMPLER = (
    "high-loss", "round-robin", "number-of-samples", "sequential", "afl", "osmd", "adaptive-osmd",
    "uniform-is", "mabs", "vrb", "avare", "poisson", "binomial", "bernoulli", "clustered-size", "delta",
    "clustered-similarity", "divfl", "fedcbs", "fedcor", "fedsampling", "fixed-rate", "full", "hics-fl", "md",
    "oort", "optimal", "optimal-distribution", "power-of-choice", "systematic", "uniform", "fedavg-uniform",
)  # fmt: skip

# name -> arguments of `fedsample run` (the run directory and -q are added). Rounds are shortened
# where the preset's own count would make the check slow; the default preset runs as shipped.
CASES: dict[str, list[str]] = {
    "default": ["default"],
    "default-short": ["default", "--set", "training.rounds=3"],
    "osmd-linear": ["osmd-linear", "--set", "training.rounds=40"],
    "fedsampling-lognormal": ["fedsampling-lognormal", "--set", "training.rounds=8"],
    "clustered-dirichlet": ["clustered-dirichlet", "--set", "training.rounds=4"],
    "impact-quadratic": ["impact-quadratic"],
    # Written before the redesign of issue 33, to hold every registered sampler, the aggregation
    # policies, the system model and the two-phase path to what they did (3 or 4 rounds each).
    "every-sampler": [
        "default",
        *(f"--sampler={name}" for name in EVERY_SAMPLER),
        "--seeds",
        "1",
        "--set",
        "training.rounds=3",
    ],
    **{
        preset: [preset, "--set", "training.rounds=4"]
        for preset in (
            "selection-systems",
            "delta-vs-optimal",
            "active-and-balanced",
            "unknown-participation",
            "correlation-and-heterogeneity",
            "osmd-skewed",
            "impact-md-vs-uniform",
            "clustered-mnist-shards",
        )
    },
}
# Cases cheap enough for the default test run (the others are marked slow).
QUICK = ("default-short",)

_TIMING_COLUMNS = {"round_seconds", "round_seconds_mean"}
# Where no stored set is of this machine's family: the largest relative difference of a number allowed.
RELATIVE_TOLERANCE = 1e-4


def machine_variant() -> str:
    """The name of this machine's stored sets: the CPU capability PyTorch dispatches to and the architecture."""
    import torch

    return f"{torch.backends.cpu.get_cpu_capability().lower()}-{platform.machine()}"


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


def stored(name: str) -> dict[str, dict[str, str]]:
    """Every stored set of case ``name``: variant -> file name -> text."""
    folder = HERE / "data" / name
    return {
        variant.name: {path.name: path.read_text() for path in sorted(variant.iterdir())}
        for variant in sorted(folder.iterdir())
        if variant.is_dir()
    }


def _close(a: str, b: str) -> bool:
    """Whether two CSV cells are equal, or numbers within :data:`RELATIVE_TOLERANCE` of each other."""
    if a == b:
        return True
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    return abs(x - y) <= RELATIVE_TOLERANCE * max(abs(x), abs(y), 1e-12)


def _csv_close(a: str, b: str) -> bool:
    rows_a, rows_b = list(csv.reader(io.StringIO(a))), list(csv.reader(io.StringIO(b)))
    return len(rows_a) == len(rows_b) and all(
        len(x) == len(y) and all(_close(u, v) for u, v in zip(x, y, strict=True))
        for x, y in zip(rows_a, rows_b, strict=True)
    )


def compare(now: dict[str, str], sets: dict[str, dict[str, str]]) -> tuple[str, list[str]]:
    """How ``now`` matches the stored ``sets``: ``("identical", [])`` with the variant it equals byte for
    byte, else ``("close", [])`` when every CSV is within tolerance of some set (no set of this machine's
    family), else ``("differs", files)`` with the files that differ from the closest set."""
    best: list[str] | None = None
    for variant, golden in sets.items():
        diff = sorted(key for key in set(now) | set(golden) if now.get(key) != golden.get(key))
        if not diff:
            return f"identical to {variant}", []
        best = diff if best is None or len(diff) < len(best) else best
    for variant, golden in sets.items():
        csvs = [key for key in golden if key.endswith(".csv")]
        if set(csvs) == {key for key in now if key.endswith(".csv")} and all(
            _csv_close(now[key], golden[key]) for key in csvs
        ):
            return f"within {RELATIVE_TOLERANCE:g} of {variant} (no stored set of {machine_variant()})", []
    return "DIFFERS", best or ["(no stored set)"]


def differences(name: str) -> list[str]:
    """The files of case ``name`` that differ from the stored golden outputs (empty when they match)."""
    with tempfile.TemporaryDirectory() as folder:
        now = run_case(name, Path(folder))
    return compare(now, stored(name))[1]


def main(argv: list[str]) -> int:
    action, rest = argv[0], argv[1:]
    variant = machine_variant()
    if "--variant" in rest:
        at = rest.index("--variant")
        variant, rest = rest[at + 1], rest[:at] + rest[at + 2 :]
    names = rest or list(CASES)
    if action == "write":
        for name in names:
            with tempfile.TemporaryDirectory() as folder:
                files = run_case(name, Path(folder))
            target = HERE / "data" / name / variant
            target.mkdir(parents=True, exist_ok=True)
            for old in target.iterdir():
                old.unlink()
            for key, text in files.items():
                (target / key).write_text(text)
            print(f"{name}: wrote {variant}: {', '.join(sorted(files))}")
        return 0
    failed = 0
    for name in names:
        with tempfile.TemporaryDirectory() as folder:
            now = run_case(name, Path(folder))
        verdict, diff = compare(now, stored(name))
        print(f"{name}: {verdict}" + (f" in {', '.join(diff)}" if diff else ""))
        failed += bool(diff)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:] or ["check"]))
