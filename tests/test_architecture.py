"""The package's layers, checked on the real import graph: no lower layer imports a higher one.

Every ``import``/``from ... import`` of a ``fedsample`` module counts, the lazy ones inside
functions included: a lazy import still ties the lower layer to the higher one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "fedsample"

# Layer -> the layers it may import (besides itself). Lowest first; see docs/architecture.md.
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "designs": {"core"},
    "samplers": {"core", "designs"},
    "participation": {"core", "designs", "samplers"},
    "stats": {"core", "designs", "samplers", "participation"},
    # User-level DP accounting of a sampler's design (dp-accounting underneath, imported lazily).
    "privacy": {"core", "designs", "samplers"},
    "data": {"core"},
    "engine": {"core", "designs", "samplers", "participation", "stats", "data", "privacy"},
    "experiments": {"core", "designs", "samplers", "participation", "stats", "data", "engine", "privacy"},
    "integrations": {"core", "designs", "samplers", "participation", "stats", "data", "engine", "privacy"},
    "cli": {"core", "designs", "samplers", "participation", "stats", "data", "engine", "experiments", "privacy"},
    "api": {"core", "designs", "samplers", "participation", "stats", "data"},  # fedsample/__init__.py
}


def layer_of(module: str) -> str:
    """The layer of a dotted module name under ``fedsample``."""
    parts = module.split(".")
    if len(parts) == 1:
        return "api"
    room = parts[1]
    if room in ALLOWED:
        return room
    return "core"  # the small top-level modules: errors, validation, arrays, rng, serialization, ...


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` for every absolute import of a fedsample module in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            # `from fedsample import samplers` imports the sub-package samplers
            if node.module == "fedsample":
                names = [f"fedsample.{alias.name}" for alias in node.names]
            out.extend((node.lineno, name) for name in names)
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
    return [(line, name) for line, name in out if name == "fedsample" or name.startswith("fedsample.")]


def upward_imports() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        source = layer_of(module)
        for line, target in imports_of(path):
            if target == "fedsample":
                continue
            destination = layer_of(target)
            if destination != source and destination not in ALLOWED[source]:
                found.append(f"{path.relative_to(SRC)}:{line}: {source} imports {destination} ({target})")
    return found


def test_no_layer_imports_a_layer_above_it() -> None:
    assert upward_imports() == []


def test_every_package_room_has_a_layer() -> None:
    rooms = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert rooms <= set(ALLOWED), f"packages without a layer: {sorted(rooms - set(ALLOWED))}"


def private_imports() -> list[str]:
    """``from M import _name`` of a private function, class or constant of another module."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("fedsample"):
                for alias in node.names:
                    if not alias.name.startswith("_") or alias.name.startswith("__"):
                        continue
                    # A private *module* of a package (fedsample._io) is shared inside the package.
                    target = SRC / Path(*f"{node.module}.{alias.name}".split("."))
                    if not (target.with_suffix(".py").exists() or target.is_dir()):
                        found.append(f"{path.relative_to(SRC)}:{node.lineno}: {alias.name} from {node.module}")
    return found


def test_no_module_imports_another_modules_private_names() -> None:
    assert private_imports() == []


def test_the_check_sees_a_private_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "fedsample"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "_io.py").write_text("def _helper():\n    pass\n")
    (package / "user.py").write_text("from fedsample import _io\nfrom fedsample._io import _helper\n")
    monkeypatch.setattr(__import__(__name__), "SRC", tmp_path)
    monkeypatch.setattr(__import__(__name__), "PACKAGE", package)
    assert private_imports() == ["fedsample/user.py:2: _helper from fedsample._io"]


@pytest.mark.parametrize(
    ("module", "layer"),
    [
        ("fedsample.samplers.adaptive.osmd", "samplers"),
        ("fedsample.designs.exact", "designs"),
        ("fedsample.stats.montecarlo", "stats"),
        ("fedsample.stats.compare", "stats"),
        ("fedsample.errors", "core"),
        ("fedsample.privacy.accountant", "privacy"),
        ("fedsample.samplers.schemes.fedsampling_ldp", "samplers"),
        ("fedsample", "api"),
    ],
)
def test_layer_table_reads_as_documented(module: str, layer: str) -> None:
    assert layer_of(module) == layer


@pytest.mark.parametrize(
    ("target", "layer"),
    [
        ("fedsample.engine.loop", "engine"),
        # The design moments live in fedsample.designs: a sampler reaching into stats (as persistence once
        # did, inside a function) runs up a layer.
        ("fedsample.stats.montecarlo", "stats"),
    ],
)
def test_the_check_sees_an_upward_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str, layer: str
) -> None:
    """A planted upward import, lazy inside a function, of a sampler module is reported."""
    planted = tmp_path / "fedsample" / "samplers"
    planted.mkdir(parents=True)
    (tmp_path / "fedsample" / "__init__.py").write_text("")
    (planted / "__init__.py").write_text("")
    (planted / "bad.py").write_text(f"def f():\n    from {target} import g\n")
    monkeypatch.setattr(__import__(__name__), "SRC", tmp_path)
    monkeypatch.setattr(__import__(__name__), "PACKAGE", tmp_path / "fedsample")
    assert upward_imports() == [f"fedsample/samplers/bad.py:2: samplers imports {layer} ({target})"]


# --- docs/architecture.md's import table, redrawn from the graph ---------------------------------

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
BEGIN, END = "<!-- import-graph:begin -->", "<!-- import-graph:end -->"
_ORDER = list(ALLOWED)


def layer_table() -> str:
    """The Markdown table of the layers, their packages and the layers each one really imports."""
    members: dict[str, set[str]] = {layer: set() for layer in ALLOWED}
    imported: dict[str, set[str]] = {layer: set() for layer in ALLOWED}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        source = layer_of(module)
        parts = module.split(".")
        keep_whole = source in ("core", "api")
        members[source].add(module if keep_whole else ".".join(parts[:2]))
        for _, target in imports_of(path):
            if target != "fedsample" and layer_of(target) != source:
                imported[source].add(layer_of(target))
    rows = ["| layer | modules | imports (measured) |", "|---|---|---|"]
    for layer in _ORDER:
        names = ", ".join(f"`{name}`" for name in sorted(members[layer]))
        uses = ", ".join(sorted(imported[layer], key=_ORDER.index)) or "nothing above numpy"
        rows.append(f"| {layer} | {names} | {uses} |")
    return "\n".join(rows)


def test_docs_architecture_table_is_the_real_import_graph() -> None:
    text = DOC.read_text()
    assert BEGIN in text, f"{DOC.name} lacks the generated import table"
    assert END in text, f"{DOC.name} lacks the end of the generated import table"
    current = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert current == layer_table(), "docs/architecture.md is stale: run `python tests/test_architecture.py`"


if __name__ == "__main__":  # rewrite the table in docs/architecture.md
    text = DOC.read_text()
    head, rest = text.split(BEGIN, 1)
    DOC.write_text(f"{head}{BEGIN}\n{layer_table()}\n{END}{rest.split(END, 1)[1]}")
    print(f"rewrote the import table of {DOC}")
