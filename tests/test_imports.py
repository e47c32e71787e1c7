"""import_reference: a config's 'package.module:function', from the config's directory first, one-line errors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fedsample._imports import import_reference, is_reference
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
