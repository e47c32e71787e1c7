"""Shared by the tests that drive the command line: an in-process call of ``fedsample.cli.main``, a
run of the installed console script, a small run config on the embedded digits data, and a snapshot
of a folder's paths and bytes."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from fedsample.cli import main

MD_AND_UNIFORM = """
[[samplers]]
name = "md"

[[samplers]]
name = "uniform"
"""


def run_cli(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run the CLI in-process: its exit status, stdout and stderr; argparse's own errors exit through SystemExit."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code) if exc.code is not None else 0
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_script(script: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the console script ``script`` (the ``fedsample_script`` fixture) with ``args``; its output as text."""
    return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=timeout, check=False)


def digits_config(
    *,
    name: str = "tiny",
    description: str | None = None,
    seeds: int = 2,
    hidden: int = 16,
    rounds: int = 3,
    local_lr: float = 0.1,
    tables: str = MD_AND_UNIFORM,
) -> str:
    """A run config's TOML: the embedded digits data over 10 Dirichlet (alpha 0.5) clients, an MLP, 3
    clients a round with 2 local steps of batch 5; ``tables`` (samplers, server, report, run) follow."""
    head = f'name = "{name}"\n' + (f'description = "{description}"\n' if description is not None else "")
    return f"""
{head}seeds = {seeds}

[federation]
dataset = "digits"
partition = "dirichlet"
num_clients = 10
alpha = 0.5

[model]
kind = "mlp"
hidden = {hidden}

[training]
rounds = {rounds}
num_sampled = 3
local_steps = 2
batch_size = 5
local_lr = {local_lr}
{tables}"""


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (None for a folder)."""
    return {
        path.relative_to(root).as_posix(): (None if path.is_dir() else path.read_bytes())
        for path in sorted(root.rglob("*"))
    }
