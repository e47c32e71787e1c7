"""The source distribution: an SPDX license with its file, and the whole test suite or none of it.

The sdist is built with setuptools' PEP 517 backend, without isolation, from a copy of the files
git tracks (so the test neither writes into the checkout nor reaches the network).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tracked_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout")
    result = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [line for line in result.stdout.splitlines() if (ROOT / line).is_file()]


def test_license_is_an_spdx_expression_with_its_file() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text().splitlines()[0]


def test_sdist_holds_every_test_file_and_the_license(tmp_path: Path) -> None:
    tracked = _tracked_files()
    source = tmp_path / "source"
    for name in tracked:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    build = "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))"
    result = subprocess.run(
        [sys.executable, "-c", build, str(tmp_path / "dist")],
        cwd=source,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert "license" not in result.stderr.lower(), result.stderr  # no deprecation warning about the license
    archive = tmp_path / "dist" / result.stdout.strip().splitlines()[-1]
    with tarfile.open(archive) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
        pkg_info = tar.extractfile(f"{archive.name.removesuffix('.tar.gz')}/PKG-INFO")
        assert pkg_info is not None
        metadata = pkg_info.read().decode()
    tracked_tests = {name for name in tracked if name.startswith("tests/")}
    assert tracked_tests <= names, sorted(tracked_tests - names)[:5]
    assert "LICENSE" in names
    assert "License-Expression: Apache-2.0" in metadata


@pytest.mark.parametrize("target", ["docs", "lint", "test", "run"])
def test_make_installs_only_into_a_venv_that_is_not_current(target: str, tmp_path: Path) -> None:
    """Issue 35: `make docs` reinstalled the packages every time. With a venv whose install stamps are newer
    than pyproject.toml and the Makefile, the target's commands (printed by make -n) install nothing; without
    the stamps they do."""
    if shutil.which("make") is None:
        pytest.skip("needs make")
    venv = tmp_path / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()

    def commands() -> str:
        done = subprocess.run(["make", "-n", "-C", str(ROOT), target, f"VENV={venv}"], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "pip install" in commands()  # a fresh venv is installed into
    (venv / ".installed").touch()
    (venv / ".installed-dev").touch()
    assert "pip install" not in commands()
