"""Lazy imports of optional libraries, with an error that names the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from fedsample.errors import FedsampleError

__all__ = ["MissingDependencyError", "require"]


class MissingDependencyError(FedsampleError, ImportError):
    """An optional library needed by a function is not installed (both a FedsampleError and an ImportError)."""


def require(module: str, *, extra: str, package: str, owner: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingDependencyError` naming the pip extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{owner} needs {package}, which is not installed: pip install 'fedsample[{extra}]' (or {package})."
        ) from exc
