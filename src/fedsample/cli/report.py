"""``fedsample report``: rebuild the summary, figures and Markdown report of a run directory."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fedsample._imports import MissingDependencyError, require
from fedsample.cli._app import add_command
from fedsample.experiments.results.report import write_report


def register(sub: Any) -> tuple[str, Any]:
    parser = add_command(sub, "report")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory written by a comparison run")
    return "report", run


def run(args: argparse.Namespace) -> int:
    try:
        require("matplotlib", extra="plot", package="matplotlib", owner="fedsample report")
    except MissingDependencyError as exc:
        sys.stderr.write(f"fedsample report: note: {exc} The report is written without plots.\n")
    print(write_report(args.run_dir))
    return 0
