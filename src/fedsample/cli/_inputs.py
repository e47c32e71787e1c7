"""Command-line inputs shared by several commands: the federation and sampler choices."""

from __future__ import annotations

import argparse
import codecs
import io
import re
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fedsample._arrays import IntArray
from fedsample._keyvalue import SAMPLER_KEY, parse_key_value
from fedsample._reading import open_input
from fedsample._suggestions import close_names
from fedsample._threads import ThreadsSetting
from fedsample._validation import Constraint, Interval, NoneOr, Options, OptionsOrPath, invalid, one_of
from fedsample.cli._app import CommandError
from fedsample.federation import BUILTIN_FEDERATIONS, Federation, builtin_sizes
from fedsample.samplers import Sampler, make_sampler, sampler_names

__all__ = [
    "add_federation_arguments",
    "build_samplers",
    "federation_from_args",
    "flag_options",
    "parse_sampler_params",
]

_INT = re.compile(r"^\+?[0-9]+$")
_SIZES_RULE = "a comma-separated list of positive integers below 2**63"


def add_sampler_arguments(parser: argparse.ArgumentParser, verb: str, defaults: tuple[str, ...]) -> None:
    """``--samplers`` (those a command ``verb``s: compare, account) and ``--param`` (their hyperparameters)."""
    parser.add_argument(
        "--samplers",
        metavar="NAME,...",
        help=f"samplers to {verb} (default: {','.join(defaults)}; known: {', '.join(sampler_names())})",
    )
    parser.add_argument("--param", action="append", metavar="SAMPLER.NAME=VALUE", help="a sampler hyperparameter")


def add_federation_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--sizes", metavar="N1,N2,...", help="client sizes, comma-separated")
    group.add_argument("--sizes-file", metavar="PATH", help="a file with one client size per line ('#' comments)")
    group.add_argument(
        "--federation",
        metavar="NAME",
        help="a built-in federation: "
        + "; ".join(f"{k} ({v[0]})" for k, v in BUILTIN_FEDERATIONS.items())
        + " (default: unbalanced)",
    )
    parser.add_argument(
        "--importance",
        choices=("size", "uniform"),
        default="size",
        help="importances p_i = n_i/M (size, the default) or 1/n (uniform)",
    )
    parser.add_argument(
        "-m", "--num-sampled", type=int, default=10, metavar="M", help="clients drawn per round (default 10)"
    )


def _parse_size_tokens(tokens: list[str], *, where: str, parameter: str) -> list[int]:
    values = []
    for position, token in enumerate(tokens, start=1):
        token = token.strip()
        value = _size_value(token)
        if value is None:
            shown = token if len(token) <= 40 else token[:37] + "..."
            raise CommandError(
                f"The {parameter!r} parameter must be {_SIZES_RULE}. Got {shown!r} ({where} {position}) instead.",
                parameter=parameter,
            )
        values.append(value)
    return values


def _size_value(text: str) -> int | None:
    """The value of ``text`` if it is a positive integer below 2**63 (ASCII digits, an optional '+'), else None.

    Only the significant digits reach ``int()``, which refuses text of more than 4300 digits.
    """
    if not _INT.match(text):
        return None
    digits = text.lstrip("+").lstrip("0")
    value = int(digits) if 0 < len(digits) <= 19 else 0
    return value if 0 < value < 2**63 else None


# A sizes file holds at most this many bytes (about 10^7 clients): reading stops there, so a
# mistaken path such as /dev/zero is refused at once instead of filling memory. Larger populations
# go through fedsample.samplers.population.samplers (a memory-mapped .npy of sizes), not a text file.
MAX_SIZES_FILE_BYTES = 64 * 2**20
_SIZES_FILE_RULE = "a file with one positive integer below 2**63 per line"
_COMMENT = re.compile(rb"#[^\n]*")
# Bytes a valid file may hold once comments are removed: ASCII digits, '+', and blanks.
_ALLOWED_BYTES = np.zeros(256, dtype=bool)
_ALLOWED_BYTES[list(b"0123456789+ \t\r\n")] = True
_INT64_MAX = np.iinfo(np.int64).max


def _read_capped(path_text: str) -> bytes:
    path = Path(path_text)
    try:
        with open_input(path) as handle:
            data = handle.read(MAX_SIZES_FILE_BYTES + 1)
    except FileNotFoundError:
        raise CommandError(
            f"The '--sizes-file' parameter must name an existing file. Got {path_text!r} (no such file) instead.",
            parameter="--sizes-file",
        ) from None
    except OSError as exc:
        raise CommandError(
            f"The '--sizes-file' parameter must name a readable text file. "
            f"Got {path_text!r} ({exc.__class__.__name__}) instead.",
            parameter="--sizes-file",
        ) from None
    if len(data) > MAX_SIZES_FILE_BYTES:
        raise CommandError(
            f"The '--sizes-file' parameter must name a file of at most {MAX_SIZES_FILE_BYTES} bytes (for larger "
            f"populations use fedsample.samplers.population.samplers). Got {path_text!r}, which holds more, instead.",
            parameter="--sizes-file",
        )
    return data


def _first_bad_line(data: bytes, path_text: str) -> CommandError:
    """The error naming the first line of ``data`` that is not one positive integer (the slow path)."""
    number, text = 0, ""
    for number, raw in enumerate(data.split(b"\n"), start=1):  # noqa: B007 (the line is reported below)
        text = raw.split(b"#", 1)[0].strip().decode("ascii", errors="replace")
        if text and _size_value(text) is None:
            break
    return CommandError(
        f"The '--sizes-file' parameter must name {_SIZES_FILE_RULE}. Got {text[:40]!r} on line {number} of "
        f"{path_text!r} instead.",
        parameter="--sizes-file",
    )


def _sizes_from_file(path_text: str) -> IntArray:
    """Read a sizes file: vectorised checks of the bytes, then numpy's C parser (no per-line Python)."""
    data = _read_capped(path_text).removeprefix(codecs.BOM_UTF8)  # an editor's byte-order mark is no size
    body = _COMMENT.sub(b"", data) if b"#" in data else data
    if not body.strip():
        raise CommandError(
            f"The '--sizes-file' parameter must name {_SIZES_FILE_RULE}. Got {path_text!r} with no sizes instead.",
            parameter="--sizes-file",
        )
    codes = np.frombuffer(body, dtype=np.uint8)
    if not _ALLOWED_BYTES[codes].all() or not _one_number_per_line(codes):
        raise _first_bad_line(data, path_text)
    sizes = np.fromstring(body, dtype=np.int64, sep=" ")
    if (sizes == _INT64_MAX).any():  # fromstring saturates: let the exact parser judge such files
        sizes = _exact_sizes(body, data, path_text)
    if sizes.size == 0 or not (sizes > 0).all():
        raise _first_bad_line(data, path_text)
    return sizes


def _one_number_per_line(codes: npt.NDArray[np.uint8]) -> bool:
    """Whether bytes of digits, '+' and blanks hold at most one ``+?[0-9]+`` token per line."""
    digit = (codes >= ord("0")) & (codes <= ord("9"))
    plus = codes == ord("+")
    word = digit | plus
    start = word.copy()
    start[1:] &= ~word[:-1]
    before_digit = np.zeros_like(digit)
    before_digit[:-1] = digit[1:]
    if (plus & ~(start & before_digit)).any():  # a '+' must open a token and precede a digit
        return False
    line = np.cumsum(codes == ord("\n"))
    return bool((np.diff(line[start]) > 0).all())


def _exact_sizes(body: bytes, data: bytes, path_text: str) -> IntArray:
    try:
        table = np.loadtxt(io.BytesIO(body), dtype=np.int64, ndmin=2, comments=None)
    except ValueError:  # a number beyond int64
        raise _first_bad_line(data, path_text) from None
    sizes: IntArray = table[:, 0]
    return sizes


def federation_from_args(args: argparse.Namespace, *, seed: int = 0) -> tuple[Federation, str]:
    """The federation the arguments describe, and a short label of where it came from."""
    if args.num_sampled < 1:
        raise CommandError(
            f"The '-m/--num-sampled' parameter must be an int of at least 1. Got {args.num_sampled} instead.",
            parameter="--num-sampled",
        )
    if args.sizes is not None:
        tokens = args.sizes.split(",")
        if args.sizes.strip() == "":
            raise CommandError(f"The '--sizes' parameter must be {_SIZES_RULE}. Got '' instead.", parameter="--sizes")
        sizes: IntArray | list[int] = _parse_size_tokens(tokens, where="item", parameter="--sizes")
        label = "--sizes"
    elif args.sizes_file is not None:
        sizes = _sizes_from_file(args.sizes_file)
        label = args.sizes_file
    else:
        name = args.federation or "unbalanced"
        if name not in BUILTIN_FEDERATIONS:
            raise invalid("--federation", "", Options(tuple(BUILTIN_FEDERATIONS)), name)
        sizes = builtin_sizes(name, seed=seed)
        label = name
    return Federation.from_sizes(sizes, importance=args.importance), label


def parse_sampler_params(items: list[str] | None) -> dict[str, dict[str, Any]]:
    """``["poisson.capped=true", ...]`` into ``{"poisson": {"capped": True}}`` (values read by ``read_value``)."""
    params: dict[str, dict[str, Any]] = {}
    for item in items or []:
        key, value = parse_key_value(item, flag="--param", form="SAMPLER.NAME", key=SAMPLER_KEY)
        name, _, field = key.rpartition(".")
        params.setdefault(name, {})[field] = value
    return params


def build_samplers(names: list[str], params: dict[str, dict[str, Any]], *, flag: str) -> list[Sampler[Any]]:
    """The samplers ``names`` (given by ``flag``) with their ``--param`` hyperparameters."""
    for name in params:
        if name not in names:
            rule = f"SAMPLER.NAME naming a sampler being used, {one_of(names)}"
            raise invalid("--param", "", rule, name, suggestions=close_names(name, names))
    for name in names:
        if name not in sampler_names():
            raise invalid(flag, "", Options(tuple(sampler_names())), name)
    return [make_sampler(name, **params.get(name, {})) for name in names]


def flag_options(constraint: Constraint) -> dict[str, Any]:
    """argparse options of a flag that sets a declared parameter: its type, and its choices when it takes names.

    A parameter that takes names or a file path is a plain string flag whose help states the
    constraint. The parameter's table stays the one place its values are declared; the value is
    checked against the constraint where the parameter is read.
    """
    inner = constraint.inner if isinstance(constraint, NoneOr) else constraint
    if isinstance(inner, Interval):
        return {"type": inner.kind}
    if isinstance(inner, Options):
        return {"choices": inner.values}
    if isinstance(inner, OptionsOrPath):
        return {"metavar": "NAME|FILE" if inner.values else "FILE", "help": str(inner)}
    if isinstance(inner, ThreadsSetting):
        return {"type": _auto_or_int, "metavar": "auto|N"}
    return {}


def _auto_or_int(text: str) -> int | str:
    """A thread count as typed: ``auto``, or an int (checked where the setting is read)."""
    return int(text) if text.strip().lstrip("+-").isdigit() else text
