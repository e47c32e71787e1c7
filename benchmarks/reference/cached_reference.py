"""The released code's side of a comparison, run once in its side environment and cached by setting
and by the code that produced it (shared by compare_divfl.py and compare_flsim.py)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import subprocess
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
REFERENCE_DIR = pathlib.Path(os.environ.get("FEDSAMPLE_REFERENCE_DIR", "/tmp/fedsample-reference"))


def reference_run(kind: str, driver: str, population: str, options: argparse.Namespace, caller: str) -> dict[str, Any]:
    """``--reference`` if given; else the cached output of ``driver`` for these settings and this code,
    running it first in ``venv-KIND`` on the sources extracted to ``KIND-src``."""
    if options.reference is not None:
        return dict(json.loads(options.reference.read_text()))
    code = hashlib.sha256(b"".join((HERE / f).read_bytes() for f in (driver, population)))
    name = (
        f"{kind}_n{options.clients}_m{options.sampled}_R{options.rounds}_S{options.seeds}_{code.hexdigest()[:10]}.json"
    )
    cached = REFERENCE_DIR / "results" / name
    if not cached.exists():
        python = REFERENCE_DIR / f"venv-{kind}" / "bin" / "python"
        if not python.exists():
            raise SystemExit(
                f"{caller}: no side environment at {python}: run benchmarks/reference/make_env_selectors.sh {kind}"
            )
        cached.parent.mkdir(parents=True, exist_ok=True)
        settings = ("--clients", options.clients, "--sampled", options.sampled, "--rounds", options.rounds)
        subprocess.run(
            [str(python), str(HERE / driver), "--source", str(REFERENCE_DIR / f"{kind}-src")]
            + [str(a) for a in (*settings, "--seeds", options.seeds, "--output", cached)],
            check=True,
        )
    return dict(json.loads(cached.read_text()))
