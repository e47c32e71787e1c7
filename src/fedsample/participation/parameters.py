"""The participation settings as one declared table: the keys of a config's ``[participation]`` table.

``availability`` ``a`` and ``dropout`` ``d`` become :class:`BernoulliAvailability` ``(a)`` and
:class:`Dropout` ``(d)`` (or ``availability_trace`` a :func:`load_availability_trace` file);
``availability_process`` chooses the availability model that ``a`` is the long-run rate of (Bernoulli,
a Markov chain with ``markov_off_to_on``, or periodic windows of ``cyclic_period`` rounds), and
``availability_label_alpha`` makes the rates heterogeneous and tied to the clients' labels as in FedAU's
experiments (:func:`~fedsample.participation.processes.label_correlated_rates`, mean ``a``, floor
``availability_minimum``). Every other key is :class:`~fedsample.participation.procedure.Participation`'s
own parameter. The config reader (``fedsample.experiments.config.sections``) and ``fedsample stats``' flags
read this one table, and :func:`build_availability` turns its values into the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from fedsample._arrays import IntArray
from fedsample._params import Component, Parameter, declared
from fedsample._validation import Interval, NoneOr, Options, Text, check_param, invalid
from fedsample.participation.availability import AlwaysAvailable, Availability, BernoulliAvailability
from fedsample.participation.procedure import Participation
from fedsample.participation.processes import CyclicAvailability, MarkovAvailability, label_correlated_rates

__all__ = ["AVAILABILITY_PROCESSES", "PARTICIPATION", "build_availability", "client_label_counts"]

AVAILABILITY_PROCESSES: tuple[str, ...] = ("bernoulli", "markov", "cyclic")

PARTICIPATION = Component(
    "participation",
    "Participation",
    {
        "availability": Parameter(1.0, Interval(float, 0, 1, closed="right")),
        "availability_trace": Parameter(
            None, NoneOr(Text("a non-empty path (one line, no control characters)", single_line=True))
        ),
        "availability_process": Parameter("bernoulli", Options(AVAILABILITY_PROCESSES)),
        "availability_label_alpha": Parameter(None, NoneOr(Interval(float, 0, None, closed="neither"))),
        "availability_minimum": Parameter(0.02, Interval(float, 0, 1, closed="right")),
        "markov_off_to_on": Parameter(0.05, Interval(float, 0, 1, closed="right")),
        "cyclic_period": Parameter(100, Interval(int, 2, 10**9, closed="both")),
        "dropout": Parameter(0.0, Interval(float, 0, 1, closed="left")),
        **declared(Participation, "participation").parameters,
    },
)


def client_label_counts(targets: npt.ArrayLike, indptr: npt.ArrayLike, num_classes: int) -> IntArray:
    """``(num_clients, num_classes)``: each client's samples of each label (client ``i`` owns rows
    ``indptr[i]:indptr[i + 1]`` of ``targets``)."""
    labels = np.asarray(targets, dtype=np.int64)
    bounds = np.asarray(indptr, dtype=np.int64)
    client = np.repeat(np.arange(bounds.size - 1), np.diff(bounds))
    counts = np.bincount(client * num_classes + labels, minlength=(bounds.size - 1) * num_classes)
    out: IntArray = counts.reshape(bounds.size - 1, num_classes)
    return out


def build_availability(
    values: Mapping[str, Any], *, label_counts: npt.ArrayLike | None = None, owner: str = "participation"
) -> Availability:
    """The availability model of a ``[participation]`` table's ``values`` (its keys, defaults filled in),
    except a trace, which the caller reads. ``label_counts`` (:func:`client_label_counts`) is needed with
    ``availability_label_alpha``. Each value is checked against the table's constraint."""
    keys = ["availability", "availability_process", "availability_label_alpha", "availability_minimum"]
    for name in [*keys, "markov_off_to_on", "cyclic_period"]:
        check_param(name, owner, values[name], PARTICIPATION.parameters[name].constraint)
    rate = float(values["availability"])
    alpha = values["availability_label_alpha"]
    if alpha is None and rate == 1.0:
        return AlwaysAvailable()
    rates: Any = rate
    if alpha is not None:
        if label_counts is None:
            raise invalid(
                "availability_label_alpha", owner, "None without the clients' labels (a classification data set)", alpha
            )
        rates = label_correlated_rates(label_counts, mean=rate, minimum=values["availability_minimum"], alpha=alpha)
    process = values["availability_process"]
    if process == "markov":
        return MarkovAvailability.stationary(rates, off_to_on=values["markov_off_to_on"])
    if process == "cyclic":
        return CyclicAvailability(rates, period=values["cyclic_period"])
    return BernoulliAvailability(rates)
