"""dp-accounting (Google's maintained accountants), imported on first use.

The package's ``privacy`` extra installs it. Every computation of :mod:`fedsample.privacy` goes
through :func:`dp_accounting`, so a missing extra is one line naming the extra, and through
:func:`quiet`, which keeps dp-accounting's RDP warnings (an order whose series did not converge is
dropped from the minimum, which stays a valid bound) off the terminal.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from types import ModuleType

from fedsample._imports import require

__all__ = ["EXTRA", "dp_accounting", "quiet"]

EXTRA = "privacy"


def dp_accounting() -> ModuleType:
    """The ``dp_accounting`` package, or the library's error naming the extra that installs it."""
    return require("dp_accounting", extra=EXTRA, package="dp-accounting", owner="fedsample.privacy")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """dp-accounting's absl warnings silenced for the duration (the logger's level is restored after)."""
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
