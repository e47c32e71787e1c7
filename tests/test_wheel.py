"""The wheel works on its own: built from this tree, installed into a new virtual environment, run
from a folder outside the source tree.

The wheel is built with setuptools' PEP 517 backend, without isolation, from a copy of the files it
is built from (so the test neither writes into the checkout nor reaches the network); set
``FEDSAMPLE_WHEEL`` to a built wheel (``make dist`` writes one to ``dist/``) to test that one instead.
The new environment holds fedsample from the wheel and nothing else: a ``.pth`` file lends it the
test interpreter's site-packages for numpy, scipy, torch and scikit-learn, whose own ``.pth`` files
(the editable install of fedsample among them) are not read, so ``import fedsample`` can only find
the wheel's copy, and the test checks that it does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import fedsample
from cli_helpers import digits_config

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "fedsample"
# What the wheel is built from; build outputs and caches stay behind.
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in", "src")
SKIP = shutil.ignore_patterns("__pycache__", "*.py[cod]", "*.egg-info", "build", "dist")


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    """A folder of this module's own: pytest prunes its older base folders when other sessions start
    (three are kept), which removed the environment below while a long suite ran beside others."""
    with tempfile.TemporaryDirectory(prefix="fedsample-wheel-") as folder:
        yield Path(folder)


@pytest.fixture(scope="module")
def wheel(scratch: Path) -> Path:
    """The wheel under test: ``FEDSAMPLE_WHEEL``, or one built here from a copy of the tree."""
    given = os.environ.get("FEDSAMPLE_WHEEL")
    if given:
        return Path(given).resolve()
    work = scratch / "wheel"
    source = work / "source"
    source.mkdir(parents=True)
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=SKIP)
        else:
            shutil.copy2(ROOT / name, source / name)
    build = "import sys; from setuptools import build_meta; print(build_meta.build_wheel(sys.argv[1]))"
    result = subprocess.run(
        [sys.executable, "-c", build, str(work / "dist")],
        cwd=source,
        env=_clean_environment(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return work / "dist" / result.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def environment(wheel: Path, scratch: Path) -> Path:
    """A new virtual environment with the wheel installed (no network: no index, no dependencies)."""
    venv = scratch / "venv" / "env"
    venv.parent.mkdir()
    clean = _clean_environment()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], env=clean, check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        env=clean,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # numpy, torch and the rest come from the test interpreter's environment, after the new one's own.
    (Path(purelib) / "lent.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = [sys.executable, "-m", "pip", "--python", str(python), "install"]
    result = subprocess.run(
        [*install, "--no-index", "--no-deps", "--no-compile", str(wheel)],
        env=clean,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    (venv / "pip-install.log").write_text(result.stdout + result.stderr)  # read if fedsample goes missing
    return venv


def _clean_environment() -> dict[str, str]:
    """This process's environment less what points Python elsewhere: an earlier test (Flower's Ray backend)
    sets ``PYTHONPATH`` to this interpreter's path, under which pip found the editable fedsample already
    installed and left the wheel out of the new environment."""
    return {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "VIRTUAL_ENV"))}


def _run(environment: Path, cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``args`` (a script of the new environment first) in ``cwd``, with nothing pointing at the tree."""
    env = _clean_environment()
    env["PATH"] = f"{environment / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    command = [str(environment / "bin" / args[0]), *args[1:]]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def test_wheel_holds_the_package_its_marker_and_its_entry_point(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = next(name for name in names if name.endswith(".dist-info/METADATA"))
        metadata = archive.read(info).decode()
        entry_points = archive.read(info.replace("METADATA", "entry_points.txt")).decode()
    modules = {path.relative_to(PACKAGE.parent).as_posix() for path in PACKAGE.rglob("*.py")}
    assert modules <= names, sorted(modules - names)[:5]
    assert "fedsample/py.typed" in names
    assert not any(name.startswith(("tests/", "docs/", "benchmarks/")) for name in names)
    assert f"Version: {fedsample.__version__}\n" in metadata
    assert "fedsample = fedsample.cli._app:run" in entry_points


def test_installed_wheel_runs_outside_the_source_tree(environment: Path, tmp_path: Path) -> None:
    located = _run(environment, tmp_path, "python", "-c", "import fedsample; print(fedsample.__file__)")
    assert located.returncode == 0, located.stderr + (environment / "pip-install.log").read_text()
    assert Path(located.stdout.strip()).is_relative_to(environment), located.stdout

    version = _run(environment, tmp_path, "fedsample", "--version")
    assert (version.returncode, version.stdout.strip()) == (0, f"fedsample {fedsample.__version__}"), version.stderr

    stats = _run(environment, tmp_path, "fedsample", "stats", "--sizes", "1,2,3", "-m", "2", "--samplers", "md")
    assert stats.returncode == 0, stats.stderr
    assert "3 clients" in stats.stdout
    assert any(line.startswith("md ") for line in stats.stdout.splitlines()), stats.stdout

    (tmp_path / "tiny.toml").write_text(digits_config(rounds=2, seeds=1))
    run = _run(environment, tmp_path, "fedsample", "run", "tiny.toml", "--out", "runs/tiny")
    assert run.returncode == 0, run.stderr[-4000:]
    metrics = (tmp_path / "runs" / "tiny" / "metrics.csv").read_text().splitlines()
    assert len(metrics) > 1
    assert (tmp_path / "runs" / "tiny" / "report.md").is_file()
