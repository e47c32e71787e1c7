"""Argument parsing shared by every command, and the one-line error policy.

Bad input (a :class:`~fedsample.FedsampleError` or an argparse complaint) prints one line on
stderr and exits with status 2; no traceback is shown for it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import re
import signal
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple, NoReturn

from fedsample import __version__
from fedsample._imports import missing_dependency
from fedsample._interrupts import BEFORE_IT_BEGAN, Interrupted, command_name, raising_on_signals
from fedsample._suggestions import close_names, did_you_mean
from fedsample._validation import Options, invalid
from fedsample.errors import FedsampleError

__all__ = ["CommandError", "OneLineParser", "main"]

EXIT_USAGE = 2

# Optional libraries and the pip extra that installs each (pyproject.toml's optional-dependencies).
OPTIONAL_EXTRAS = {
    "torch": "torch",
    "sklearn": "data",
    "pyarrow": "parquet",
    "matplotlib": "plot",
    "flwr": "flower",
    "ray": "ray",
}


class CommandError(FedsampleError):
    """A bad command-line value (raised by the argument helpers)."""


_ASCII_INT = re.compile(r"[+-]?[0-9]+")


def ascii_int(text: str) -> int:
    """The value of an integer flag: ASCII digits with an optional sign (blanks around them are
    ignored), as ``--sizes`` reads its items.

    ``int()`` alone would also take other scripts' digits and underscores.
    """
    if not _ASCII_INT.fullmatch(text.strip()):
        raise ValueError(f"not an ASCII integer: {text!r}")
    return int(text)


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are a single line, without the usage block.

    Every ``type=int`` argument, of any command, is read by :func:`ascii_int`. A value outside a flag's
    choices (or an unknown command) is the library's error, the choices sorted and the closest named;
    an unknown option is told the closest options of its command.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Argument groups share the parser's registry, so this covers every integer flag.
        self.register("type", int, ascii_int)

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(EXIT_USAGE)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        choices = action.choices
        if choices is not None and value not in choices:
            name = max(action.option_strings, key=len) if action.option_strings else action.metavar or action.dest
            raise argparse.ArgumentError(None, str(invalid(str(name), "", Options(tuple(choices)), value)))

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            chosen = self._chosen_command(parsed)
            options = [o for parser in (self, chosen) if parser for o in parser._option_string_actions if o[:2] == "--"]
            unknown = next((token.partition("=")[0] for token in extras if token.startswith("-")), "")
            hint = did_you_mean(close_names(unknown, options))
            (chosen or self).error(f"unrecognized arguments: {' '.join(extras)}" + (f".{hint}" if hint else ""))
        return parsed

    def _chosen_command(self, parsed: argparse.Namespace) -> argparse.ArgumentParser | None:
        """The parser of the sub-command ``parsed`` names, if any."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(parsed, action.dest, None) or "")
                if isinstance(chosen, argparse.ArgumentParser):
                    return chosen
        return None


class Command(NamedTuple):
    """A sub-command: the module that registers it, its one-line help and its description."""

    module: str
    help: str
    description: str


# The sub-commands' texts, in one place. Only the chosen command's module is imported,
# so `fedsample stats` does not pay for the imports of `fedsample run` or `fedsample report`.
COMMANDS: dict[str, Command] = {
    "run": Command(
        "fedsample.cli.run",
        "run a comparison of samplers x seeds (a preset or a TOML config) into a run directory",
        (
            "Run every sampler x seed of an experiment on one federation and write the run directory: "
            "the resolved config, per-round metrics (Parquet and CSV), a summary table, plots and a Markdown report. "
            "TARGET is a preset name (see 'fedsample presets') or a TOML config file; without it the 'default' "
            "preset runs. The options override the experiment's settings."
        ),
    ),
    "presets": Command(
        "fedsample.cli.presets",
        "list the named experiments (run one with 'fedsample run PRESET')",
        (
            "List the presets: the papers' experiments on embedded data, each with the paper and figure it "
            "reproduces; '--full' runs the full-scale variant on the dataset files given with '--data-dir'."
        ),
    ),
    "stats": Command(
        "fedsample.cli.stats",
        "exact statistics of the aggregation weights of several samplers on one federation",
        (
            "Compare samplers on one federation: paper 003's Table 1 (variance, alpha, variance of "
            "the weight sum) extended with gamma, inclusion probabilities and the number of distinct clients."
        ),
    ),
    "privacy": Command(
        "fedsample.cli.privacy",
        "each client's user-level epsilon under several samplers (central DP, dp-accounting)",
        (
            "Account user-level central differential privacy on one federation: the server clips each update to C "
            "and adds N(0, (z C s)^2 I) once a round; each client's epsilon at delta after T rounds follows from its "
            "inclusion probability and weight under each sampler (docs/privacy.md). Give --noise-multiplier and "
            "--rounds, or one of them with --epsilon to solve for the other. Needs the privacy extra."
        ),
    ),
    "sample": Command(
        "fedsample.cli.sample",
        "draw a sampler's selections for a number of rounds",
        (
            "Draw the selections of one sampler. Round t uses the random stream (seed, sampling, t), so "
            "the same seed prints the same selections on every run. A client drawn twice appears once, with its "
            "summed weight. Samplers that learn are drawn at their initial state (there is no training feedback)."
        ),
    ),
    "plot": Command(
        "fedsample.cli.plot",
        "redraw the figures of a run directory from its saved metrics",
        (
            "Rebuild RUN_DIR/plots/*.png (training loss, test accuracy, distinct clients and labels per "
            "round) from RUN_DIR/metrics.parquet or metrics.csv, and print the paths written."
        ),
    ),
    "report": Command(
        "fedsample.cli.report",
        "rebuild the summary tables, figures and report.md of a run directory",
        (
            "Rebuild RUN_DIR/summary.csv, summary.md, summary.tex, plots/*.png and report.md from the saved metrics "
            "(targets and the rolling window come from the [report] table of RUN_DIR/config.toml), and print the "
            "report's path."
        ),
    ),
}


def command_help(name: str) -> str:
    """The one-line help of sub-command ``name`` (shown by ``fedsample --help``)."""
    return COMMANDS[name].help


def add_command(sub: Any, name: str) -> Any:
    """The parser of sub-command ``name``, with its help and description from :data:`COMMANDS`."""
    return sub.add_parser(name, help=COMMANDS[name].help, description=COMMANDS[name].description)


def _build_parser(
    argv: Sequence[str] | None = None,
) -> tuple[OneLineParser, dict[str, Callable[[argparse.Namespace], int]]]:
    """The parser; with ``argv``, only the command it names is fully built (the others list their help)."""
    chosen = None if argv is None else next((token for token in argv if not token.startswith("-")), None)
    parser = OneLineParser(
        prog="fedsample",
        description="Client sampling for federated learning: samplers, exact statistics, simulation.",
    )
    parser.add_argument("--version", action="version", version=f"fedsample {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    handlers: dict[str, Callable[[argparse.Namespace], int]] = {}
    for name, (module_name, help_text, _) in COMMANDS.items():
        if argv is None or name == chosen:
            registered, handler = importlib.import_module(module_name).register(sub)
            handlers[registered] = handler
        else:
            sub.add_parser(name, help=help_text)
    return parser, handlers


# Options whose value may legitimately start with '-' (a bad size list such as "-5,3" must reach
# the validator and be reported with its value, not be mistaken for an option).
_DASH_VALUE_OPTIONS = ("--sizes",)


def _attach_dash_values(argv: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] in _DASH_VALUE_OPTIONS and i + 1 < len(argv) and argv[i + 1].startswith("-"):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``fedsample`` command line and return its exit status.

    SIGINT (Ctrl-C) and SIGTERM end a command in one line on stderr, ``fedsample COMMAND: interrupted by
    SIGINT ...`` (``fedsample run`` says what is saved and how to resume), with exit status 130 and 143; a
    second one ends the process at once. In the console script, one before this function (while its imports
    run) or after it ends the process at once (:func:`fedsample._interrupts.console_startup`).
    """
    tokens = _attach_dash_values(list(sys.argv[1:] if argv is None else argv))
    command = command_name(tokens)
    with raising_on_signals(command):
        try:
            return _main(tokens)
        except KeyboardInterrupt as exc:  # the command's own line, or a bare one (while parsing)
            interrupted = exc if isinstance(exc, Interrupted) else Interrupted(signal.SIGINT)
            detail = f" {interrupted.detail}" if interrupted.detail else ""
            sys.stderr.write(f"{command}: interrupted by {interrupted.signal_name}{detail}\n")
            return interrupted.exit_status


def _main(tokens: list[str]) -> int:
    try:
        parser, handlers = _build_parser(tokens)
        args = parser.parse_args(tokens)
    except KeyboardInterrupt as exc:  # while importing the command's modules
        raise Interrupted(getattr(exc, "signum", signal.SIGINT), BEFORE_IT_BEGAN) from None
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        with _one_line_warnings(args.command):
            return handlers[args.command](args)
    except FedsampleError as exc:
        message = " ".join(str(exc).split())
        sys.stderr.write(f"fedsample {args.command}: error: {message}\n")
        return EXIT_USAGE
    except ModuleNotFoundError as exc:
        extra = OPTIONAL_EXTRAS.get((exc.name or "").partition(".")[0])
        if extra is None:
            raise
        error = missing_dependency("this command", str(exc.name), extra)
        sys.stderr.write(f"fedsample {args.command}: error: {error}\n")
        return EXIT_USAGE
    except BrokenPipeError:  # `fedsample ... | head`
        return 0


@contextlib.contextmanager
def _one_line_warnings(command: str) -> Iterator[None]:
    """fedsample's own warnings (a model falling back to the sequential backend...) as one line on stderr,
    ``fedsample COMMAND: warning: ...``, instead of Python's two lines with the source line."""
    shown = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        if category.__module__.startswith("fedsample"):
            sys.stderr.write(f"fedsample {command}: warning: {' '.join(str(message).split())}\n")
        else:
            shown(message, category, *args, **kwargs)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


def run() -> NoReturn:
    """Console-script entry point."""
    raise SystemExit(main())
