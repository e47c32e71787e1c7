"""Imports made on request: an optional library a feature needs, the home of a package's lazy name,
and a callable a config names.

An optional library (PyTorch, scikit-learn, pyarrow, matplotlib, Flower, Ray, dp-accounting...) is
imported where it is first needed, through :func:`require`: when it is missing, the error is one
:class:`MissingDependencyError` line naming the pip extra that installs it. A package that keeps
its heavy names out of its own import (``fedsample.engine``, ``fedsample.experiments``,
``fedsample.integrations``) looks each up in its home module on first use (:func:`lazy_attribute`).

A config that names a model factory or a loss, as ``"package.module:function"``, runs that code:
that is what naming it asks for (docs/experiments.md, threat model). Only building an experiment
imports it: ``fedsample report``, ``plot`` and ``stats`` never do, and ``run --resume`` imports only
what the run's own config names, saying so first (:func:`warn_imports`).

The module is looked for first in ``directory`` (the config file's directory, recorded in the
resolved config as ``model.path``), then on the Python path. A reference that cannot be imported,
whose import fails, that names no attribute of the module, or that is not callable is one
:class:`~fedsample.errors.FedsampleError` line naming the config key. So is a module of ``directory``
whose top-level name is taken elsewhere (a standard library module, an installed package, a module
imported already), refused before it is imported: it would hide the other from fedsample and its
dependencies, or be ignored itself.

>>> import_reference("math:sqrt", directory=None, key="model.loss", source="config")(9.0)
3.0
"""

from __future__ import annotations

import importlib
import importlib.machinery
import re
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from fedsample.errors import FedsampleError, one_line

__all__ = [
    "REFERENCE",
    "CodeImportWarning",
    "MissingDependencyError",
    "import_reference",
    "is_reference",
    "lazy_attribute",
    "missing_dependency",
    "require",
    "warn_imports",
]


class MissingDependencyError(FedsampleError, ImportError):
    """An optional library needed by a function is not installed (both a FedsampleError and an ImportError)."""


def missing_dependency(
    owner: str, package: str, extra: str, *, missing: str | None = None, parameter: str | None = None
) -> MissingDependencyError:
    """The one error for an optional library that is not installed: ``{owner} needs {package}, which is
    not installed: pip install 'fedsample[{extra}]'``; ``missing`` names a module of the library's own
    dependencies that is the one missing."""
    what = f" (its module {missing!r} is not installed)" if missing else ", which is not installed"
    return MissingDependencyError(
        f"{owner} needs {package}{what}: pip install 'fedsample[{extra}]'", parameter=parameter
    )


def require(module: str, *, extra: str, package: str, owner: str, parameter: str | None = None) -> ModuleType:
    """Import ``module``, or raise :func:`missing_dependency`'s error naming the pip extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.partition(".")[0]
        missing = exc.name if exc.name and exc.name.partition(".")[0] != top else None
        raise missing_dependency(owner, package, extra, missing=missing, parameter=parameter) from exc


def lazy_attribute(package: str, homes: Mapping[str, str], name: str) -> Any:
    """The attribute ``name`` of ``package``, imported from its home module ``homes[name]`` on first use
    (a package's ``__getattr__``) and kept in the package, so that later lookups (and monkeypatching) see
    a plain module attribute."""
    home = homes.get(name)
    if home is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    setattr(sys.modules[package], name, value)
    return value


REFERENCE = re.compile(
    r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
)
"""``package.module:attribute`` (dotted names on both sides of the colon)."""


def is_reference(value: object) -> bool:
    """Whether ``value`` is a ``"package.module:attribute"`` string."""
    return isinstance(value, str) and REFERENCE.fullmatch(value) is not None


def _error(key: str, source: str, reference: str, reason: str) -> FedsampleError:
    return FedsampleError(
        f"The {key!r} key of {source} must name an importable callable 'package.module:function'. "
        f"Got {reference!r}, {reason}, instead.",
        parameter=key,
    )


def _installed(top: str, directory: Path) -> str | None:
    """Where the Python path (``directory`` left out) and the import hooks find a module named ``top`` other
    than ``directory``'s own (an editable install of it), searched without importing it; None if nowhere (a
    bare folder, a namespace package, counts as nowhere)."""
    path = [entry for entry in sys.path if isinstance(entry, str) and Path(entry or ".").resolve() != directory]
    own = {directory / f"{top}.py", directory / top / "__init__.py"}
    for finder in sys.meta_path:
        try:
            if finder is importlib.machinery.PathFinder:
                spec = importlib.machinery.PathFinder.find_spec(top, path)
            else:
                spec = getattr(finder, "find_spec", lambda *_: None)(top, None)
        except Exception:  # a broken import hook finds nothing
            spec = None
        if spec is not None and spec.origin is not None and Path(spec.origin).resolve() not in own:
            return str(spec.origin)
    return None


def _shadowing(name: str, directory: str | None) -> str | None:
    """Why module ``name`` of ``directory`` is refused, if its top-level name is taken elsewhere: imported
    first, it would hide the standard library's module or the installed package of that name from fedsample
    and its dependencies (a ``pyarrow.py`` would break the writing of the metrics, after the training);
    imported second, it would be ignored (Python keeps the first module of a name)."""
    if directory is None:
        return None
    top, base = name.split(".")[0], Path(directory).resolve()
    if not ((base / f"{top}.py").is_file() or (base / top / "__init__.py").is_file()):
        return None  # found on the Python path: no file of the config's hides it
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        return f"whose module {top!r} in {directory} has the name of a standard library module, which it would hide"
    loaded = sys.modules.get(top)
    origin = getattr(loaded, "__file__", None) if loaded is not None else _installed(top, base)
    if loaded is not None and (origin is None or not Path(origin).resolve().is_relative_to(base)):
        return f"whose module was imported earlier from {origin or 'elsewhere'}, not from {directory}"
    if loaded is None and origin is not None:
        return f"whose module {top!r} in {directory} has the name of the installed {origin}, which it would hide"
    return None


class CodeImportWarning(UserWarning):
    """fedsample is about to import code that a file it reads back names (a run directory's ``config.toml``)."""


def locate_reference(reference: str, directory: str | None) -> str | None:
    """The file of the module a ``"package.module:function"`` reference names, found as
    :func:`import_reference` would find it (``directory`` first) but without running any of its code;
    None where no file is found (a namespace package, a module built into Python)."""
    name = reference.partition(":")[0]
    module = sys.modules.get(name)
    if module is not None:
        found = getattr(module, "__file__", None)
        return found if isinstance(found, str) else None
    path: list[str] = ([str(directory)] if directory is not None else []) + [e for e in sys.path if isinstance(e, str)]
    spec = None
    for part in name.split("."):
        try:
            spec = importlib.machinery.PathFinder.find_spec(part, path)
        except (ImportError, ValueError):
            return None
        if spec is None:
            return None
        path = list(spec.submodule_search_locations or [])
    return spec.origin if spec is not None and spec.origin not in (None, "namespace") else None


def warn_imports(references: Sequence[str], named_by: str) -> None:
    """Say, before they are imported, that ``references`` are imported and which file names them: a warning,
    which the command line prints as one line on stderr, ``-q`` or not (docs/experiments.md, threat model)."""
    if references:  # said at every call, not once per place (no registry), and still subject to the filters
        caller = sys._getframe(1)
        text = f"importing {' and '.join(references)}, named by {named_by}"
        module = caller.f_globals.get("__name__")
        warnings.warn_explicit(text, CodeImportWarning, caller.f_code.co_filename, caller.f_lineno, module, None)


def import_reference(reference: str, *, directory: str | None, key: str, source: str) -> Any:
    """The callable ``reference`` names, its module imported from ``directory`` first, then the Python path."""
    if not is_reference(reference):
        raise _error(key, source, reference, "which is not of that form")
    module_name, _, attribute = reference.partition(":")
    shadowing = _shadowing(module_name, directory)
    if shadowing is not None:
        raise _error(key, source, reference, f"{shadowing} (rename it)")
    added = directory is not None and directory not in sys.path
    if added:
        sys.path.insert(0, str(directory))
    importlib.invalidate_caches()  # a module written since the last import is found
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = module_name.split(".")[0]
        if exc.name is not None and (
            exc.name == module_name or module_name.startswith(f"{exc.name}.") or exc.name == top
        ):
            where = f"in {directory} or " if directory else ""
            raise _error(
                key, source, reference, f"whose module {exc.name!r} is not {where}on the Python path"
            ) from None
        raise _error(key, source, reference, f"whose import failed: ModuleNotFoundError: {exc}") from None
    except Exception as exc:  # the user's module: whatever its import raises, said in one line
        raise _error(key, source, reference, f"whose import failed: {one_line(exc, 200)}") from None
    finally:
        if added and str(directory) in sys.path:
            sys.path.remove(str(directory))
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise _error(key, source, reference, f"whose module {module_name!r} has no {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise _error(key, source, reference, f"which is a {type(target).__name__}, not a callable")
    return target
