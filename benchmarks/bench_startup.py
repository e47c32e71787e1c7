"""Start-up cost: ``import fedsample`` and ``fedsample stats --sizes-file`` against numpy baselines.

Two figures, each measured in one run against its baseline:

1. **Import.** Each import runs in a fresh interpreter (``python -c ...``), ``--repeats`` times,
   and the median is kept. The baseline is ``import numpy, scipy`` (numpy and SciPy's core, which
   the package needs anyway). Target: ``import fedsample`` within 0.15 s of the baseline.
2. **Sizes file.** ``fedsample stats --sizes-file FILE -m 10`` (table output, the default samplers)
   on a file of ``--lines`` sizes (default 10^6, log-normal integers), in a fresh interpreter,
   against numpy's ``loadtxt`` plus ``sort`` of the same file in a fresh interpreter. Target: at
   most 5x.

Children run with bytecode caching on (``PYTHONDONTWRITEBYTECODE`` removed from their
environment), as after any ``pip install``: the warm-up run writes the ``.pyc`` files, so the
timed runs measure imports, not compilation of the sources.

Run: ``python benchmarks/bench_startup.py`` (``--lines 100000`` for a quick run).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

IMPORT_BASELINE = "import numpy, scipy"
IMPORT_PACKAGE = "import fedsample"
LOADTXT_BASELINE = "import sys, numpy as np; np.sort(np.loadtxt(sys.argv[1], dtype=np.int64))"


_ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def _seconds(command: list[str], repeats: int) -> float:
    """Median wall time of ``command`` in fresh processes (one warm-up run first, not counted)."""
    subprocess.run(command, check=True, capture_output=True, env=_ENV)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, env=_ENV)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--lines", type=int, default=1_000_000)
    args = parser.parse_args()
    python = sys.executable
    print(f"python {platform.python_version()}, numpy {np.__version__}, {args.repeats} fresh processes each (median)")

    empty = _seconds([python, "-c", "pass"], args.repeats)
    base = _seconds([python, "-c", IMPORT_BASELINE], args.repeats)
    package = _seconds([python, "-c", IMPORT_PACKAGE], args.repeats)
    print(f"interpreter alone         {empty:7.3f} s")
    print(f"{IMPORT_BASELINE:<25} {base:7.3f} s")
    print(f"{IMPORT_PACKAGE:<25} {package:7.3f} s")
    extra = package - base
    verdict = "within" if extra <= 0.15 else "OVER"
    print(f"import fedsample - baseline: {extra:+.3f} s ({verdict} the 0.15 s target), ratio {package / base:.2f}x")

    rng = np.random.default_rng(0)
    sizes = np.maximum(1, rng.lognormal(4.0, 1.5, size=args.lines)).astype(np.int64)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "sizes.txt"
        np.savetxt(path, sizes, fmt="%d")
        loadtxt = _seconds([python, "-c", LOADTXT_BASELINE, str(path)], args.repeats)
        command = [str(Path(python).parent / "fedsample"), "stats", "--sizes-file", str(path), "-m", "10"]
        stats = _seconds(command, args.repeats)
    print(f"numpy loadtxt + sort, {args.lines} lines   {loadtxt:7.3f} s")
    print(f"fedsample stats --sizes-file -m 10        {stats:7.3f} s")
    verdict = "within" if stats <= 5 * loadtxt else "OVER"
    print(f"stats / (loadtxt + sort): {stats / loadtxt:.2f}x ({verdict} the 5x target)")


if __name__ == "__main__":
    main()
