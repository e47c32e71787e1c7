"""The one error type fedsample raises for bad input."""

from __future__ import annotations

__all__ = ["FedsampleError", "one_line"]


class FedsampleError(ValueError):
    """Bad input to a public fedsample entry point.

    The message names the parameter, the constraint and the value received, in the form
    ``The 'num_sampled' parameter of MDSampler.init must be an int in the range [1, inf).
    Got 0 instead.`` The CLI prints it as one line and exits with status 2.

    Attributes
    ----------
    parameter:
        Name of the offending parameter (``None`` when the error is not about one): the key.
    owner:
        What the parameter belongs to (``MDSampler.init``, a config file), when known.
    constraint:
        The constraint the value breaks (``None`` when the error does not state one), so that a
        caller can restate the error about its own key without parsing the message.
    value:
        The value received (meaningful when ``constraint`` is set).
    suggestions:
        The known names closest to a wrong one, best first (the message's ``Did you mean ...?``).
    noun:
        What ``parameter`` is in the message: ``"parameter"``, or ``"key"`` for a config key.
    """

    def __init__(
        self,
        message: str,
        *,
        parameter: str | None = None,
        owner: str | None = None,
        constraint: object = None,
        value: object = None,
        suggestions: tuple[str, ...] = (),
        noun: str = "parameter",
    ) -> None:
        super().__init__(message)
        self.parameter = parameter
        self.owner = owner
        self.constraint = constraint
        self.value = value
        self.suggestions = suggestions
        self.noun = noun


def one_line(exc: BaseException, limit: int = 300) -> str:
    """``TypeName: message`` of an exception raised by a user's code, on one line, cut at ``limit`` characters."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:limit]}" if text else type(exc).__name__
