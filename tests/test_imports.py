"""import_reference: a config's 'package.module:function', from the config's directory first, one-line errors; a
module of the config's directory that would hide another of its name is refused before it is imported."""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from fedsample._imports import CodeImportWarning, import_reference, is_reference, warn_imports
from fedsample.errors import FedsampleError


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("a:b", True),
        ("pkg.mod:make.inner", True),
        ("mod", False),
        ("mod:", False),
        (":f", False),
        ("a b:c", False),
        ("mod:f()", False),
        (3, False),
    ],
)
def test_the_reference_form(text: object, ok: bool) -> None:
    assert is_reference(text) is ok


def test_a_module_beside_the_config_is_found_and_the_path_is_left_as_it_was(tmp_path: Path) -> None:
    (tmp_path / "fedsample_test_factory_a.py").write_text("def make(width=3):\n    return ['made', width]\n")
    before = list(sys.path)
    make = import_reference("fedsample_test_factory_a:make", directory=str(tmp_path), key="model.factory", source="c")
    assert make(width=5) == ["made", 5]
    assert sys.path == before


@pytest.mark.parametrize(
    ("source", "reference", "match"),
    [
        (None, "fedsample_test_absent_module:make", r"'model.factory' key of c.toml .* module 'fedsample_test_absent_"),
        ("import fedsample_test_nothing_there\n", "fedsample_test_factory_b:make", r"import failed: ModuleNotFound"),
        ("raise RuntimeError('boom')\n", "fedsample_test_factory_c:make", r"import failed: RuntimeError: boom"),
        ("x = 1\n", "fedsample_test_factory_d:make", r"has no 'make'"),
        ("make = 3\n", "fedsample_test_factory_e:make", r"which is a int, not a callable"),
        (None, "not a reference", r"which is not of that form"),
    ],
)
def test_what_cannot_be_imported_is_one_line(tmp_path: Path, source: str | None, reference: str, match: str) -> None:
    if source is not None:
        (tmp_path / f"{reference.partition(':')[0]}.py").write_text(source)
    with pytest.raises(FedsampleError, match=match) as caught:
        import_reference(reference, directory=str(tmp_path), key="model.factory", source="c.toml")
    assert len(str(caught.value).splitlines()) == 1
    assert caught.value.parameter == "model.factory"


def test_a_module_of_the_same_name_imported_from_elsewhere_is_refused(tmp_path: Path) -> None:
    """Python keeps the first module of a name: the file beside a second config would be ignored silently."""
    first, second = tmp_path / "a", tmp_path / "b"
    for directory, value in ((first, 1), (second, 2)):
        directory.mkdir()
        (directory / "fedsample_test_twice.py").write_text(f"def make():\n    return {value}\n")
    assert import_reference("fedsample_test_twice:make", directory=str(first), key="model.factory", source="c")() == 1
    with pytest.raises(FedsampleError, match=r"imported earlier from .*/a/fedsample_test_twice.py, not from .*/b"):
        import_reference("fedsample_test_twice:make", directory=str(second), key="model.factory", source="c")


MARKING = "import pathlib\npathlib.Path(__file__).with_suffix('.imported').write_text('x')\ndef make():\n    return 1\n"


@pytest.mark.parametrize(
    "module", ["pyarrow", "matplotlib", "numpy", "torch", "scipy", "json", "signal", "typing", "sys", "fedsample"]
)
def test_a_module_named_like_an_installed_package_or_the_standard_library_is_refused_unimported(
    tmp_path: Path, module: str
) -> None:
    pytest.importorskip(module)  # installed (whether imported already or not: both are refused)
    (tmp_path / f"{module}.py").write_text(MARKING)
    with pytest.raises(FedsampleError, match=r"\(rename it\)") as caught:
        import_reference(f"{module}:make", directory=str(tmp_path), key="model.factory", source="c.toml")
    assert len(str(caught.value).splitlines()) == 1
    assert f"Got '{module}:make', whose module" in str(caught.value)
    assert not (tmp_path / f"{module}.imported").exists()


@pytest.mark.parametrize("layout", ["module", "package"])
def test_a_package_on_the_python_path_not_imported_yet_is_not_hidden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    installed, mine = tmp_path / "site", tmp_path / "config"
    (installed / "fedsample_test_installed").mkdir(parents=True)
    (installed / "fedsample_test_installed" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(installed))
    if layout == "module":
        mine.mkdir()
        (mine / "fedsample_test_installed.py").write_text(MARKING)
    else:
        (mine / "fedsample_test_installed").mkdir(parents=True)
        (mine / "fedsample_test_installed" / "__init__.py").write_text(MARKING)
    with pytest.raises(
        FedsampleError, match=r"has the name of the installed .*/site/fedsample_test_installed/__init__"
    ):
        import_reference("fedsample_test_installed:make", directory=str(mine), key="model.factory", source="c")
    assert "fedsample_test_installed" not in sys.modules
    assert not list(mine.rglob("*.imported"))


def test_a_package_installed_from_the_configs_own_directory_is_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An editable install whose import hook finds the very package beside the config hides nothing."""
    package = tmp_path / "fedsample_test_editable"
    package.mkdir()
    (package / "__init__.py").write_text("def make():\n    return 2\n")

    class EditableFinder:  # as setuptools' strict editable installs do
        @staticmethod
        def find_spec(name: str, path: object, target: object = None) -> Any:
            if name != "fedsample_test_editable":
                return None
            return importlib.util.spec_from_file_location(name, package / "__init__.py")

    monkeypatch.setattr(sys, "meta_path", [EditableFinder, *sys.meta_path])
    try:
        make = import_reference("fedsample_test_editable:make", directory=str(tmp_path), key="k", source="c")
        assert make() == 2
    finally:
        sys.modules.pop("fedsample_test_editable", None)


def test_a_module_whose_name_is_free_and_the_directory_on_the_path_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The config's directory on the Python path too (the working directory of a notebook) hides nothing."""
    (tmp_path / "fedsample_test_free_name.py").write_text(MARKING)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        for _ in range(2):  # built twice (checked, then run): the second time it is imported already, from there
            make = import_reference("fedsample_test_free_name:make", directory=str(tmp_path), key="k", source="c")
            assert make() == 1
    finally:
        sys.modules.pop("fedsample_test_free_name", None)


def test_the_notice_of_imported_code_is_a_warning_naming_the_file() -> None:
    for _ in range(2):  # said at every resume, not once per process
        with pytest.warns(CodeImportWarning, match=r"^importing a:b and c:d, named by runs/x/config.toml$"):
            warn_imports(["a:b", "c:d"], "runs/x/config.toml")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_imports([], "runs/x/config.toml")  # nothing named, nothing said
