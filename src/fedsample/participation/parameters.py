"""The participation settings as one declared table: the keys of a config's ``[participation]`` table.

``availability`` ``a`` and ``dropout`` ``d`` become :class:`BernoulliAvailability` ``(a)`` and
:class:`Dropout` ``(d)`` (or ``availability_trace`` a :func:`load_availability_trace` file);
``availability_process`` chooses the availability model that ``a`` is the long-run rate of (Bernoulli,
a Markov chain with ``markov_off_to_on``, or periodic windows of ``cyclic_period`` rounds), and
``availability_label_alpha`` makes the rates heterogeneous and tied to the clients' labels as in FedAU's
experiments (:func:`~fedsample.participation.processes.label_correlated_rates`, mean ``a``, floor
``availability_minimum``). Every other key is :class:`~fedsample.participation.setting.Participation`'s
own parameter. The config reader (``fedsample.experiments.config.sections``) and ``fedsample stats``' flags
read this one table; :func:`check_participation_rules` holds the rules across its keys,
:func:`build_availability` turns its values into the model, and :func:`participation_from_values` into
the :class:`~fedsample.participation.setting.Participation` (with its aggregation policy), for both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from fedsample._arrays import IntArray
from fedsample._params import Component, Parameter, declared
from fedsample._validation import Interval, NoneOr, Options, Text, check_param, invalid
from fedsample.participation.availability import AlwaysAvailable, Availability, BernoulliAvailability, Dropout
from fedsample.participation.policies import POLICY_CLASSES
from fedsample.participation.processes import CyclicAvailability, MarkovAvailability, label_correlated_rates
from fedsample.participation.setting import Participation

__all__ = [
    "AVAILABILITY_PROCESSES",
    "PARTICIPATION",
    "build_availability",
    "check_one_availability_model",
    "check_participation_rules",
    "check_rates_beside_a_trace",
    "client_label_counts",
    "participation_from_values",
]

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
# The keys that are Participation's own parameters.
_SETTING_KEYS = tuple(declared(Participation, "participation").parameters)
# Each key of a trace's one availability model, and the value it must keep beside a trace.
_BESIDE_A_TRACE = {"availability": 1.0, "availability_process": "bernoulli", "availability_label_alpha": None}


def check_participation_rules(
    values: Mapping[str, Any],
    *,
    policies: Sequence[str],
    name: Callable[[str], str] = str,
    owner: str = "participation",
) -> None:
    """The rules across the keys of a ``[participation]`` table's ``values`` (every key, defaults filled
    in), for the config reader and ``fedsample stats``' flags alike: :func:`check_one_availability_model`,
    then :func:`check_rates_beside_a_trace` for ``policies`` (the policies the setting runs). The error
    names the key as ``name`` spells it (``participation.availability``, ``--availability``)."""
    check_one_availability_model(values, name=name, owner=owner)
    check_rates_beside_a_trace(values, policies=policies, name=name, owner=owner)


def check_one_availability_model(
    values: Mapping[str, Any], *, name: Callable[[str], str] = str, owner: str = "participation"
) -> None:
    """Beside an ``availability_trace``, the rate stays 1, the process Bernoulli, the rates untied to labels."""
    if values["availability_trace"] is None:
        return
    trace = name("availability_trace")
    for key, alone in _BESIDE_A_TRACE.items():
        if values[key] != alone:
            raise invalid(name(key), owner, f"{alone!r} when {trace} is given (one availability model)", values[key])


def check_rates_beside_a_trace(
    values: Mapping[str, Any],
    *,
    policies: Sequence[str],
    name: Callable[[str], str] = str,
    owner: str = "participation",
) -> None:
    """Estimated return rates with an ``availability_trace`` when one of ``policies`` divides by the rates
    (:attr:`~fedsample.participation.policies.Policy.needs_return_rates`): a trace has no ``a_i``."""
    if values["availability_trace"] is None or values["return_rates"] != "known":
        return
    if any(POLICY_CLASSES[p].needs_return_rates for p in policies):
        constraint = "'estimated' with an availability trace under the inverse-probability policy (a trace has no a_i)"
        raise invalid(name("return_rates"), owner, constraint, values["return_rates"])


def participation_from_values(values: Mapping[str, Any], availability: Availability) -> Participation:
    """The :class:`~fedsample.participation.setting.Participation` of a ``[participation]`` table's ``values``
    (every key, defaults filled in, checked against the table and by :func:`check_participation_rules`) and
    its ``availability`` model (:func:`build_availability`'s, or a trace the caller read): the one builder
    of the setting and its policy behind the config reader and ``fedsample stats``' flags."""
    dropout = Dropout(values["dropout"]) if values["dropout"] > 0 else None
    return Participation(availability=availability, dropout=dropout, **{key: values[key] for key in _SETTING_KEYS})


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
