"""``fedsample report``: rebuild the summary, figures and Markdown report of a run directory."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fedsample.cli._app import command_help
from fedsample.data._optional import MissingDependencyError, require
from fedsample.experiments.report import write_report


def register(sub: Any) -> tuple[str, Any]:
    parser = sub.add_parser(
        "report",
        help=command_help("report"),
        description="Rebuild RUN_DIR/summary.csv, summary.md, plots/*.png and report.md from the saved metrics "
        "(targets and the rolling window come from the [report] table of RUN_DIR/config.toml), and print the "
        "report's path.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory written by a comparison run")
    return "report", run


def run(args: argparse.Namespace) -> int:
    try:
        require("matplotlib", extra="plot", package="matplotlib", owner="fedsample report")
    except MissingDependencyError as exc:
        sys.stderr.write(f"fedsample report: note: {exc} The report is written without plots.\n")
    print(write_report(args.run_dir))
    return 0
