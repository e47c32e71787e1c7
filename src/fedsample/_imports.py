"""Import a callable a config names, as ``"package.module:function"``: deliberately, and only on request.

A config that names a model factory or a loss runs that code: that is what naming it asks for
(docs/experiments.md, threat model). Only building an experiment imports it: ``fedsample report``,
``plot`` and ``stats`` never do, and ``run --resume`` imports only what the run's own config names.

The module is looked for first in ``directory`` (the config file's directory, recorded in the
resolved config as ``model.path``), then on the Python path. A reference that cannot be imported,
whose import fails, that names no attribute of the module, or that is not callable is one
:class:`~fedsample.errors.FedsampleError` line naming the config key.

>>> import_reference("math:sqrt", directory=None, key="model.loss", source="config")(9.0)
3.0
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from typing import Any

from fedsample.errors import FedsampleError, one_line

__all__ = ["REFERENCE", "import_reference", "is_reference"]

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


def _check_origin(module: Any, name: str, directory: str | None, key: str, source: str, reference: str) -> None:
    """Refuse a module imported earlier from elsewhere while ``directory`` holds one of that name (Python keeps
    the first module of a name, so the file beside the config would be silently ignored)."""
    if directory is None:
        return
    top = name.split(".")[0]
    base = Path(directory)
    beside = (base / f"{top}.py").is_file() or (base / top / "__init__.py").is_file()
    origin = getattr(module, "__file__", None)
    if beside and origin is not None and not Path(origin).resolve().is_relative_to(base.resolve()):
        reason = f"whose module was imported earlier from {origin}, not from {directory} (rename one of them)"
        raise _error(key, source, reference, reason)


def import_reference(reference: str, *, directory: str | None, key: str, source: str) -> Any:
    """The callable ``reference`` names, its module imported from ``directory`` first, then the Python path."""
    if not is_reference(reference):
        raise _error(key, source, reference, "which is not of that form")
    module_name, _, attribute = reference.partition(":")
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
    _check_origin(module, module_name, directory, key, source, reference)
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise _error(key, source, reference, f"whose module {module_name!r} has no {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise _error(key, source, reference, f"which is a {type(target).__name__}, not a callable")
    return target
