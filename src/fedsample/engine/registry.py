"""The engine's names and parameter tables, without PyTorch.

Every configurable part of the engine (the training settings, each local algorithm, each server
optimizer, the model) declares its parameters here once: name, default and constraint. The torch
classes read their defaults and checks from these tables, and the config reader and the CLI check
a configuration against them without importing torch (scikit-learn's ``_parameter_constraints``).

>>> ALGORITHMS["fedprox"].defaults
{'mu': 0.01}
>>> try:
...     ALGORITHMS["fedprox"].check({"mu": -1.0})
... except ValueError as error:  # a FedsampleError
...     print(error)
The 'mu' parameter of FedProx must be a float in the range [0, 3.4028234663852886e+38]. Got -1.0 instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from fedsample._params import Component, Parameter
from fedsample._threads import ThreadsSetting
from fedsample._validation import Boolean, Interval, Options, invalid

__all__ = [
    "ALGORITHMS",
    "BACKENDS",
    "LOSS_NAMES",
    "METRIC_NAME",
    "MODEL",
    "MODEL_KINDS",
    "RESERVED_METRICS",
    "SERVER_OPTIMIZERS",
    "TRAINING",
    "Component",
    "DeviceName",
    "Parameter",
    "component",
    "local_lr_at",
]


@dataclass(frozen=True)
class DeviceName:
    """A PyTorch device name the engine accepts: ``'cpu'``, ``'cuda'`` or ``'cuda:<index>'``."""

    def is_satisfied_by(self, value: object) -> bool:
        # Checked by pattern: torch.device would raise a RuntimeError on "cudax" or "cuda:".
        return isinstance(value, str) and re.fullmatch(r"cpu|cuda(:[0-9]+)?", value) is not None

    def __str__(self) -> str:
        return "'cpu' or 'cuda[:index]'"


_POSITIVE_INT = Interval(int, 1, None, closed="left")
# Step sizes and weights enter float32 tensor arithmetic as scalars: PyTorch refuses a scalar beyond
# float32's largest value (RuntimeError "value cannot be converted to type float without overflow").
_FLOAT32_MAX = 3.4028234663852886e38
_POSITIVE = Interval(float, 0, _FLOAT32_MAX, closed="right")
_DECAY = Interval(float, 0, 1, closed="left")
# A hidden layer's width: a Linear of 2**40 units over its inputs stays within PyTorch's int64 storage sizes
# (2**63 - 1 units overflowed them, a RuntimeError, where the memory check would refuse it in one line).
MAX_HIDDEN = 2**40

MODEL_KINDS: tuple[str, ...] = ("linear", "softmax", "mlp", "cnn", "lstm")
# The losses named without code (fedsample.engine.losses; "auto": cross-entropy or mse by the task).
LOSS_NAMES: tuple[str, ...] = ("auto", "cross-entropy", "mse")
# A model's extra evaluation metric: its name (the metrics files' column test_<name>), and the names taken.
METRIC_NAME = r"[a-z][a-z0-9_]{0,39}"
RESERVED_METRICS: tuple[str, ...] = ("loss", "accuracy")
BACKENDS: tuple[str, ...] = ("batched", "sequential")

# The scalar settings of TrainingConfig, in the order they are checked.
TRAINING = Component(
    name="training",
    owner="TrainingConfig",
    parameters={
        "rounds": Parameter(100, _POSITIVE_INT),
        "num_sampled": Parameter(10, _POSITIVE_INT),
        "local_steps": Parameter(10, _POSITIVE_INT),
        "batch_size": Parameter(50, _POSITIVE_INT),
        "eval_every": Parameter(1, _POSITIVE_INT),
        "local_lr": Parameter(0.05, _POSITIVE),
        "max_rejected_rounds": Parameter(20, Interval(int, 0, None, closed="left")),
        "lr_decay": Parameter(1.0, Interval(float, 0, 1, closed="right")),
        "importance": Parameter("size", Options(("size", "uniform"))),
        "backend": Parameter("batched", Options(BACKENDS)),
        "device": Parameter("cpu", DeviceName()),
        # PyTorch's threads while the simulation runs (fedsample._threads): "auto" caps PyTorch's own
        # count at the CPUs the process may use (affinity, cgroup quota).
        "threads": Parameter("auto", ThreadsSetting()),
    },
)


def local_lr_at(local_lr: float, lr_decay: float, round: int) -> float:
    """The local learning rate of round ``round`` (from 0): ``eta_l(t) = local_lr * lr_decay**t``, the one
    decay rule of the engine's rounds and the Flower client's."""
    return local_lr * lr_decay**round


# ModelSpec's checked settings (its input_shape comes from the data).
MODEL = Component(
    name="model",
    owner="ModelSpec",
    parameters={
        "kind": Parameter("mlp", Options(MODEL_KINDS)),
        "output_dim": Parameter(1, _POSITIVE_INT),
        "hidden": Parameter(50, Interval(int, 1, MAX_HIDDEN, closed="both")),
        "bias": Parameter(True, Boolean()),
        "zero_init": Parameter(False, Boolean()),
    },
)

ALGORITHMS: dict[str, Component] = {
    "fedavg": Component("fedavg", "FedAvg", {}),
    "fedprox": Component("fedprox", "FedProx", {"mu": Parameter(0.01, Interval(float, 0, _FLOAT32_MAX))}),
    "minibatch-sgd": Component("minibatch-sgd", "MiniBatchSGD", {}),
    "scaffold": Component("scaffold", "Scaffold", {}),
}


def _adaptive(name: str, owner: str, *, beta2: bool) -> Component:
    parameters: dict[str, Parameter[Any]] = {
        "lr": Parameter(0.1, _POSITIVE),
        "beta1": Parameter(0.9, _DECAY),
        "tau": Parameter(1e-3, _POSITIVE),
        "bias_correction": Parameter(False, Boolean()),
        "adaptive": Parameter(True, Boolean()),
    }
    if beta2:
        parameters["beta2"] = Parameter(0.99, _DECAY)
    return Component(name, owner, parameters)


SERVER_OPTIMIZERS: dict[str, Component] = {
    "sgd": Component("sgd", "ServerSGD", {"lr": Parameter(1.0, _POSITIVE)}),
    "fedavgm": Component(
        "fedavgm",
        "ServerMomentum",
        {"lr": Parameter(1.0, _POSITIVE), "beta": Parameter(0.9, _DECAY), "nesterov": Parameter(False, Boolean())},
    ),
    "fedadam": _adaptive("fedadam", "FedAdam", beta2=True),
    "fedyogi": _adaptive("fedyogi", "FedYogi", beta2=True),
    "fedadagrad": _adaptive("fedadagrad", "FedAdagrad", beta2=False),
}

_KINDS: dict[str, dict[str, Component]] = {"algorithm": ALGORITHMS, "server": SERVER_OPTIMIZERS}


def component(kind: str, name: str, owner: str = "the engine registry") -> Component:
    """The ``"algorithm"`` or ``"server"`` component called ``name``; an error names ``kind`` otherwise."""
    if kind not in _KINDS:
        raise invalid("kind", "component", Options(tuple(_KINDS)), kind)
    table = _KINDS[kind]
    if name not in table:
        raise invalid(kind, owner, Options(tuple(table)), name)
    return table[name]
