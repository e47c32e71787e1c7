"""Any ``torch.nn.Module`` as the engine's model: its module, its loss, its metrics, how it starts.

A :class:`Model` names the user's module (an instance, or a factory that builds one), a per-sample
loss (:mod:`fedsample.engine.losses`) and optional evaluation metrics. :func:`simulate` also takes
a bare module, a factory or a :class:`~fedsample.engine.paper_models.ModelSpec` (the papers' models),
and turns each into a :class:`Model` with :func:`as_model`.

The engine never trains the user's module itself. :func:`~fedsample.engine.model_binding.bind_model`
makes private copies (one
in ``train()`` mode for local training, one in ``eval()`` mode for every evaluation), replaces
their dropout layers by keyed ones (:mod:`fedsample.engine.dropout`), checks the module on a few
rows of the data (its output against the targets, the loss's and metrics' shapes) before anything
trains, and keeps the parameters and buffers as stacked tensors, one model per client slot and per
run (``torch.func.functional_call`` swaps them in). Buffers (BatchNorm's running statistics) are
part of the model: they travel with the parameters, each client updates its own copy during local
training, and the server combines them (:func:`fedsample.engine.aggregation.combine_buffers`).

Where a hand-fused kernel serves the module (dense ReLU networks: the papers' ``linear``,
``softmax`` and ``mlp``, or a user's ``nn.Sequential`` of ``Linear`` and ``ReLU`` layers, with a
named loss), the fused trainer uses it (:class:`DenseLayout`); ``Model(fused=False)`` turns it off.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from fedsample._suggestions import close_names
from fedsample._validation import Options, invalid, one_of
from fedsample.engine.losses import PerSampleFn
from fedsample.engine.paper_models import DenseNet, ModelSpec, Params
from fedsample.engine.registry import LOSS_NAMES as REGISTERED_LOSS_NAMES
from fedsample.engine.registry import METRIC_NAME, RESERVED_METRICS

__all__ = [
    "DenseLayout",
    "Model",
    "ModelLike",
    "as_model",
    "dense_layout",
    "describe_module",
]

LOSS_NAMES = REGISTERED_LOSS_NAMES
BATCHING = ("auto", "vmap", "threads")
_METRIC_NAME = re.compile(METRIC_NAME)


@dataclass(frozen=True, eq=False)
class Model:
    """A user's model for :func:`~fedsample.engine.simulate`.

    Parameters
    ----------
    module:
        An ``nn.Module`` (its current parameters and buffers are the initial model of every run), or
        a factory called without arguments that returns one (called under a generator seeded from
        ``simulate``'s ``init_seed``, so the initial model is reproducible and the caller's random
        state is left as it was).
    loss:
        ``"auto"`` (cross-entropy for classification, mse for regression), ``"cross-entropy"``,
        ``"mse"``, or a callable ``(output, target) -> (B,)`` giving one loss per sample.
    metrics:
        Extra evaluation metrics, name (lower-case letters, digits, ``_``) to a callable with the
        loss's signature; each is reported as its mean over the test rows (``History.test_metrics``).
    name:
        What the run information calls the model (default: the module's class name).
    initializer:
        Draws the initial parameters from a ``torch.Generator`` (the papers' models); ``None``: the
        module's own initialisation.
    fused:
        Whether a hand-fused kernel may serve the module where one exists (dense ReLU networks).
    batch_dependent:
        Whether the forward pass mixes the samples of a batch (BatchNorm in training mode). Such a
        model trains each client on its exact batch, never padded. ``None``: detected (any BatchNorm).
    batching:
        How the batched backend trains a round's clients together: ``"vmap"`` (one ``torch.func.vmap``
        computation per local step over the stacked models), ``"threads"`` (each client on its own
        module copy, the clients spread over PyTorch's threads, one thread each), or ``"auto"``:
        threads on a CPU for modules with convolutions or recurrent layers (``vmap`` turns a
        convolution of stacked weights into a grouped one, slower on a CPU than one convolution per
        client, and has no batching rule for the fused RNN kernels), ``vmap`` otherwise.

    >>> model = Model(lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)), loss="cross-entropy")
    >>> model.loss
    'cross-entropy'
    """

    module: nn.Module | Callable[[], nn.Module]
    loss: str | PerSampleFn = "auto"
    metrics: Mapping[str, PerSampleFn] = field(default_factory=dict)
    name: str | None = None
    initializer: Callable[[torch.Generator], Params] | None = None
    fused: bool = True
    batch_dependent: bool | None = None
    batching: str = "auto"

    def __post_init__(self) -> None:
        owner = "Model"
        if not isinstance(self.module, nn.Module) and not callable(self.module):
            raise invalid("module", owner, "an nn.Module or a callable returning one", self.module)
        if isinstance(self.loss, str):
            if self.loss not in LOSS_NAMES:
                raise invalid(
                    "loss",
                    owner,
                    f"{one_of(LOSS_NAMES)} or a callable",
                    self.loss,
                    suggestions=close_names(self.loss, LOSS_NAMES),
                )
        elif not callable(self.loss):
            raise invalid("loss", owner, "a loss name or a callable (output, target) -> per-sample losses", self.loss)
        if not isinstance(self.metrics, Mapping):
            raise invalid("metrics", owner, "a mapping of metric names to callables", self.metrics)
        for key, metric in self.metrics.items():
            if not isinstance(key, str) or _METRIC_NAME.fullmatch(key) is None:
                constraint = "named by lower-case letters, digits and '_' (at most 40 characters, a letter first)"
                raise invalid("metrics", owner, constraint, key)
            if key in RESERVED_METRICS or not callable(metric):
                raise invalid(f"metrics[{key!r}]", owner, "a callable, named other than 'loss' or 'accuracy'", metric)
        if self.name is not None and (not isinstance(self.name, str) or not self.name.strip()):
            raise invalid("name", owner, "a non-empty string or None", self.name)
        if not isinstance(self.fused, bool):
            raise invalid("fused", owner, "a bool", self.fused)
        if self.batch_dependent is not None and not isinstance(self.batch_dependent, bool):
            raise invalid("batch_dependent", owner, "a bool or None", self.batch_dependent)
        if self.batching not in BATCHING:
            raise invalid("batching", owner, Options(tuple(BATCHING)), self.batching)


ModelLike = Model | ModelSpec | nn.Module | Callable[[], nn.Module]


def as_model(model: ModelLike, owner: str = "simulate") -> Model:
    """``model`` as a :class:`Model`: a ModelSpec's module and initialisation, a module or a factory with the
    loss chosen from the data (``"auto"``)."""
    if isinstance(model, Model):
        return model
    if isinstance(model, ModelSpec):
        return Model(model.build, name=model.kind, initializer=model.init_params)
    if isinstance(model, nn.Module) or callable(model):
        return Model(model)
    raise invalid("model", owner, "a Model, a ModelSpec, an nn.Module or a callable returning one", model)


@dataclass(frozen=True)
class DenseLayout:
    """Where a dense ReLU network keeps each layer's weight and bias, for the fused kernels.

    ``weights[i]`` and ``biases[i]`` (``None``: no bias) name layer ``i``'s parameters;
    ``squeeze_output`` drops a last output axis of size 1 (the ``linear`` regression model).
    """

    weights: tuple[str, ...]
    biases: tuple[str | None, ...]
    squeeze_output: bool = False

    @property
    def num_layers(self) -> int:
        return len(self.weights)


def dense_layout(module: nn.Module, sample_shape: tuple[int, ...]) -> DenseLayout | None:
    """The layout of ``module`` if it is a dense ReLU network the fused kernels compute exactly, else None."""
    if isinstance(module, DenseNet):
        names = [f"layers.{i}" for i in range(len(module.layers))]
        biases = [f"{n}.bias" if module.layers[i].bias is not None else None for i, n in enumerate(names)]
        return DenseLayout(tuple(f"{n}.weight" for n in names), tuple(biases), module.squeeze_output)
    if type(module) is not nn.Sequential:
        return None
    children = list(module.named_children())
    if children and type(children[0][1]) is nn.Flatten:
        flatten = children.pop(0)[1]
        assert isinstance(flatten, nn.Flatten)
        if flatten.start_dim != 1 or flatten.end_dim != -1:
            return None
    elif len(sample_shape) != 1:
        return None
    # Linear (ReLU Linear)*: an odd number of children alternating Linear and ReLU.
    if len(children) % 2 == 0:
        return None
    weights, biases = [], []
    for position, (name, child) in enumerate(children):
        expected = nn.Linear if position % 2 == 0 else nn.ReLU
        if type(child) is not expected:
            return None
        if isinstance(child, nn.Linear):
            weights.append(f"{name}.weight")
            biases.append(f"{name}.bias" if child.bias is not None else None)
    return DenseLayout(tuple(weights), tuple(biases))


def describe_module(module: nn.Module | Callable[[], nn.Module]) -> str:
    """A short name for a module or factory: its class name, or the factory's qualified name."""
    if isinstance(module, nn.Module):
        return type(module).__name__
    if isinstance(module, functools.partial):
        return describe_module(module.func)
    return str(getattr(module, "__qualname__", None) or getattr(module, "__name__", None) or type(module).__name__)
