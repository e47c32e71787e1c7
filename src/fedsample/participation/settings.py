"""The participation settings as one declared table: the keys of a config's ``[participation]`` table.

``availability`` ``a`` and ``dropout`` ``d`` become :class:`BernoulliAvailability` ``(a)`` and
:class:`Dropout` ``(d)`` (or ``availability_trace`` a :func:`load_availability_trace` file); every
other key is :class:`~fedsample.participation.rounds.Participation`'s own parameter. The config
reader (``fedsample.experiments.sections``) and ``fedsample stats``' flags read this one table.
"""

from __future__ import annotations

from fedsample._params import Component, Parameter, declared
from fedsample._validation import Interval, NoneOr, Text
from fedsample.participation.rounds import Participation

__all__ = ["PARTICIPATION"]

PARTICIPATION = Component(
    "participation",
    "Participation",
    {
        "availability": Parameter(1.0, Interval(float, 0, 1, closed="right")),
        "availability_trace": Parameter(None, NoneOr(Text("a non-empty path", pattern=r".+"))),
        "dropout": Parameter(0.0, Interval(float, 0, 1, closed="left")),
        **declared(Participation, "participation").parameters,
    },
)
