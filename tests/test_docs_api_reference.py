"""Every ``fedsample.*`` name that a Python block of the docs uses imports as written and has an entry in the
API reference (issue 35, item 3).

The names are read from the code (not run): ``from fedsample.X import a, b``, ``import fedsample.X`` and
attribute chains ``fedsample.X.a`` in every ``python`` block of README.md, docs/*.md and the examples'
READMEs. Each must import as written, and the object it names must be one that a ``:::`` directive of
docs/api/*.md renders: the directive's own object, the ``members`` it lists, or, without a list, every
name of the module's ``__all__`` that its source binds (``if TYPE_CHECKING:`` imports included: the docs'
generator, griffe, reads the source; a name that a module ``__getattr__`` supplies on first use is
invisible to it), with a docstring (``show_if_no_docstring`` is off in mkdocs.yml). The site built
from docs/api/ (``make docs``) shows the same entries.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import types
from pathlib import Path
from typing import Any

import pytest

from test_docs_snippets import BLOCKS

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api"
DIRECTIVE = re.compile(r"^::: (?P<target>[\w.]+)[ \t]*\n(?P<options>(?:[ \t]+.*\n|\n(?=[ \t]))*)", re.MULTILINE)


def used_names(code: str) -> set[str]:
    """The dotted path of each ``fedsample`` name the code imports (``fedsample.data.federate``) or reaches
    by attributes (``fedsample.Federation.from_sizes``)."""
    found: set[str] = set()
    try:
        tree = ast.parse(code)
    except SyntaxError:  # a fragment with a `...` placeholder: test_docs_snippets runs what runs
        return found
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "fedsample":
            found |= {f"{node.module}.{alias.name}" for alias in node.names if alias.name != "*"}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("fedsample.")}
        elif isinstance(node, ast.Attribute):
            chain = _chain(node)
            if len(chain) > 1 and chain[0] == "fedsample":
                found.add(".".join(chain))
    return {path for path in found if not any(other.startswith(path + ".") for other in found)}  # inner links


def _bound_in_source(module: types.ModuleType) -> set[str]:
    """The names the module's source binds at its top level, ``if TYPE_CHECKING:`` imports included (what the
    docs' generator, griffe, reads); not those a module ``__getattr__`` supplies."""
    names: set[str] = set()
    body = list(ast.parse(inspect.getsource(module)).body)
    while body:
        node = body.pop()
        if isinstance(node, ast.If):
            body += node.body + node.orelse
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def resolve(path: str) -> tuple[Any, Any]:
    """``(outer, obj)``: what ``path`` names, and its outermost non-module object (the entry the reference
    needs: a class for a method), or the module itself."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        outer = None
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
            outer = obj if outer is None else outer
        return (obj if outer is None else outer), obj
    raise ImportError(f"no module in {path!r}")


def _chain(node: ast.AST) -> list[str]:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else []


def _documented(obj: object) -> bool:
    doc = obj.__dict__.get("__doc__") if isinstance(obj, type) else getattr(obj, "__doc__", None)
    if isinstance(obj, type) and doc and doc.startswith(f"{obj.__name__}("):  # a dataclass's made-up one
        return False
    return bool(doc) or not isinstance(obj, (type, types.FunctionType))


def rendered() -> list[tuple[str, Any]]:
    """``(page, object)`` for every object a directive of docs/api/ renders."""
    out: list[tuple[str, Any]] = []
    for page in sorted(API.glob("*.md")):
        for match in DIRECTIVE.finditer(page.read_text(encoding="utf-8")):
            target, options = match["target"], match["options"]
            obj = resolve(target)[1]
            out.append((page.name, obj))
            if not isinstance(obj, types.ModuleType):
                continue
            listed = re.search(r"members:[ \t]*\n((?:[ \t]+- .*\n)+)", options)
            if re.search(r"members:[ \t]*false", options):
                names: list[str] = []
            elif listed:
                names = re.findall(r"- (\w+)", listed[1])
            else:
                names = [n for n in getattr(obj, "__all__", []) if n in vars(obj) or n in _bound_in_source(obj)]
            out += [(page.name, getattr(obj, n)) for n in names]
    return [(page, obj) for page, obj in out if _documented(obj)]


USED: dict[str, set[str]] = {}
for _block in BLOCKS:
    if _block.lang == "python":
        for _path in used_names(_block.code):
            USED.setdefault(_path, set()).add(_block.name)


@pytest.fixture(scope="module")
def reference() -> list[Any]:
    return [obj for _, obj in rendered()]


@pytest.mark.parametrize("path", sorted(USED))
def test_a_name_the_docs_use_imports_and_has_a_reference_entry(path: str, reference: list[Any]) -> None:
    where = ", ".join(sorted(USED[path]))
    try:
        outer, _ = resolve(path)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{where}: {path} does not import as written: {exc}")
    named = getattr(outer, "__name__", path)
    assert any(o is outer for o in reference), (
        f"{where}: {path} has no entry in docs/api/ (a '::: {getattr(outer, '__module__', named)}' directive "
        f"that lists {named}, with a docstring)"
    )


def test_the_reader_finds_imports_and_attribute_chains() -> None:
    code = "import fedsample\nfrom fedsample.data import a, b as c\nfedsample.stats.x(1)\ny = fedsample.Federation.f\n"
    assert used_names(code) == {"fedsample.data.a", "fedsample.data.b", "fedsample.stats.x", "fedsample.Federation.f"}
    assert len(USED) > 40  # the docs teach many names: a reader that found none would pass everything


def test_the_directive_reader_sees_members_lists() -> None:
    pages = {page for page, _ in rendered()}
    assert {"experiments.md", "data.md", "samplers.md"} <= pages
    assert inspect.isfunction(resolve("fedsample.experiments.runner.run_experiment")[1])
