"""The one error type fedsample raises for bad input."""

from __future__ import annotations

__all__ = ["FedsampleError"]


class FedsampleError(ValueError):
    """Bad input to a public fedsample entry point.

    The message names the parameter, the constraint and the value received, in the form
    ``The 'num_sampled' parameter of MDSampler.init must be an int in the range [1, inf).
    Got 0 instead.`` The CLI prints it as one line and exits with status 2.

    Attributes
    ----------
    parameter:
        Name of the offending parameter (``None`` when the error is not about one).
    """

    def __init__(self, message: str, *, parameter: str | None = None) -> None:
        super().__init__(message)
        self.parameter = parameter
