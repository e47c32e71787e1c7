"""``fedsample presets``: list the named experiments, one line each."""

from __future__ import annotations

import argparse
from typing import Any

from fedsample.cli._app import add_command


def register(sub: Any) -> tuple[str, Any]:
    add_command(sub, "presets")
    return "presets", presets


def presets(args: argparse.Namespace) -> int:
    from fedsample.experiments.presets.catalogue import PRESETS

    width = max(len(name) for name in PRESETS)
    paper_width = max(len(p.paper) for p in PRESETS.values())
    for name, preset in PRESETS.items():
        full = " [--full]" if preset.full is not None else ""
        print(f"{name:<{width}}  {preset.paper:<{paper_width}}  {preset.summary}{full}")
    return 0
