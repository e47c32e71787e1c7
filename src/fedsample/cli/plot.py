"""``fedsample plot``: redraw the figures of a run directory from its saved metrics."""

from __future__ import annotations

import argparse
from typing import Any

from fedsample.cli._app import add_command
from fedsample.experiments.results.report import rebuild_plots


def register(sub: Any) -> tuple[str, Any]:
    parser = add_command(sub, "plot")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory written by a comparison run")
    return "plot", run


def run(args: argparse.Namespace) -> int:
    for path in rebuild_plots(args.run_dir):
        print(path)
    return 0
