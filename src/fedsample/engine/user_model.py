"""Any ``torch.nn.Module`` as the engine's model: its module, its loss, its metrics, how it starts.

A :class:`Model` names the user's module (an instance, or a factory that builds one), a per-sample
loss (:mod:`fedsample.engine.losses`) and optional evaluation metrics. :func:`simulate` also takes
a bare module, a factory or a :class:`~fedsample.engine.paper_models.ModelSpec` (the papers' models),
and turns each into a :class:`Model` with :func:`as_model`.

The engine never trains the user's module itself. :func:`bind_model` makes private copies (one
in ``train()`` mode for local training, one in ``eval()`` mode for every evaluation), replaces
their dropout layers by keyed ones (:mod:`fedsample.engine.dropout`), checks the module on a few
rows of the data (its output against the targets, the loss's and metrics' shapes) before anything
trains, and keeps the parameters and buffers as stacked tensors, one model per client slot and per
run (``torch.func.functional_call`` swaps them in). Buffers (BatchNorm's running statistics) are
part of the model: they travel with the parameters, each client updates its own copy during local
training, and the server combines them (:func:`fedsample.engine.aggregation.combine_buffers`).

Where a hand-fused kernel serves the module (dense ReLU networks: the papers' ``linear``,
``softmax`` and ``mlp``, or a user's ``nn.Sequential`` of ``Linear`` and ``ReLU`` layers, with a
named loss), the batched backend uses it (:class:`DenseLayout`); ``Model(fused=False)`` turns it off.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from fedsample._suggestions import close_names
from fedsample._validation import Options, invalid, one_of
from fedsample.engine.dropout import dropout_keys, swap_dropout
from fedsample.engine.losses import LOSSES, PerSampleFn
from fedsample.engine.paper_models import DenseNet, ModelSpec, Params
from fedsample.engine.registry import LOSS_NAMES as REGISTERED_LOSS_NAMES
from fedsample.engine.registry import METRIC_NAME, RESERVED_METRICS
from fedsample.engine.tensors import as_features, as_targets
from fedsample.errors import FedsampleError, one_line
from fedsample.rng import Stream, stream_rng

__all__ = [
    "BoundModel",
    "DenseLayout",
    "Model",
    "ModelLike",
    "as_model",
    "bind_model",
    "dense_layout",
    "describe_module",
]

LOSS_NAMES = REGISTERED_LOSS_NAMES
BATCHING = ("auto", "vmap", "threads")
_METRIC_NAME = re.compile(METRIC_NAME)
# Rows of the data the module is checked on before training.
_CHECK_ROWS = 4


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


@dataclass(frozen=True, eq=False)
class BoundModel:
    """A :class:`Model` bound to a data set's task, with the engine's private copies of its module.

    ``train_module`` (``train()`` mode, dropout keyed) and ``eval_module`` (``eval()`` mode) are never
    the user's module; their own tensors are never read: every call passes the slot's parameters and
    buffers. ``parameter_names`` and ``buffer_names`` give the stacked tensors' names; ``dense`` the
    fused kernels' layout (``None``: the generic ``torch.func`` path).
    """

    model: Model
    name: str
    task: str
    loss_name: str | None
    loss: PerSampleFn
    metrics: dict[str, PerSampleFn]
    train_module: nn.Module
    eval_module: nn.Module
    parameter_names: tuple[str, ...]
    buffer_names: tuple[str, ...]
    dense: DenseLayout | None
    batch_dependent: bool
    keyed_dropout: bool
    # Convolutions or recurrent layers: layers vmap batches slowly on a CPU, or not at all.
    convolutional_or_recurrent: bool = False
    # Parameters with requires_grad=False (a frozen backbone): carried, never trained (their update is 0).
    frozen: frozenset[str] = frozenset()
    # A random operation other than the keyed dropout in the training forward pass (checked on the data).
    draws_randomness: bool = False
    # The module's state_dict keys, each to the parameter or buffer it holds (tied weights share one;
    # non-persistent buffers have none): what RunResult.state_dict() gives back.
    state_names: tuple[tuple[str, str], ...] = ()

    @property
    def is_regression(self) -> bool:
        return self.task == "regression"

    def threaded(self, device: torch.device) -> bool:
        """Whether the batched backend trains this model's slots on threads (see :class:`Model`'s ``batching``)."""
        if self.dense is not None or self.model.batching == "vmap":
            return False
        return self.model.batching == "threads" or (device.type == "cpu" and self.convolutional_or_recurrent)

    def to(self, device: torch.device) -> BoundModel:
        """The same model with its private modules on ``device``."""
        self.train_module.to(device)
        self.eval_module.to(device)
        return self

    def initial_state(self, seed: int) -> tuple[Params, Params]:
        """The initial parameters and buffers: the ``initializer``'s, the factory's (seeded by ``seed``) or the
        module's own (``seed`` unused), copied."""
        model = self.model
        generator_seed = torch_seed(seed)
        if model.initializer is not None:
            params = model.initializer(torch.Generator().manual_seed(generator_seed))
            buffers = {n: b.detach().clone() for n, b in self.train_module.named_buffers()}
            return {n: params[n] for n in self.parameter_names}, buffers
        source = model.module if isinstance(model.module, nn.Module) else _seeded_call(model.module, generator_seed)
        return _state(source)


def torch_seed(seed: int) -> int:
    """The torch seed of the initial model of a comparison whose init seed is ``seed``: the stream
    ``(seed, MODEL_INIT)``."""
    return int(stream_rng(seed, Stream.MODEL_INIT).integers(0, 2**62))


def _seeded_call(factory: Callable[[], nn.Module], seed: int) -> nn.Module:
    """``factory()`` with PyTorch's generators seeded by ``seed`` (the CPU's, and every GPU's where there are
    any), the caller's random state restored after."""
    gpus = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=gpus):
        torch.default_generator.manual_seed(seed)
        if gpus:
            torch.cuda.manual_seed_all(seed)
        return factory()


def _state_names(module: nn.Module) -> tuple[tuple[str, str], ...]:
    """Each ``state_dict`` key of ``module`` with the name ``named_parameters`` / ``named_buffers`` gives its tensor."""
    names = {id(t): n for n, t in (*module.named_parameters(), *module.named_buffers())}
    return tuple(
        (key, names[id(value)]) for key, value in module.state_dict(keep_vars=True).items() if id(value) in names
    )


def _state(module: nn.Module) -> tuple[Params, Params]:
    params = {n: p.detach().clone() for n, p in module.named_parameters()}
    buffers = {n: b.detach().clone() for n, b in module.named_buffers()}
    return params, buffers


def _instantiate(model: Model, owner: str) -> nn.Module:
    """A private copy of the model's module (a factory is called under a fixed seed)."""
    source = model.module
    what = model.name or describe_module(source)
    kind = "a module that copies" if isinstance(source, nn.Module) else "a module factory that runs"
    try:
        module = copy.deepcopy(source) if isinstance(source, nn.Module) else _seeded_call(source, 0)
    except FedsampleError:
        raise
    except Exception as exc:  # the user's module or factory: any failure is reported in one line
        raise invalid("model", owner, kind, f"{what} raising {one_line(exc)}") from None
    if not isinstance(module, nn.Module):
        raise invalid("model", owner, "a factory returning an nn.Module", f"{what} returning {module!r:.80}")
    return module.to("cpu")  # the engine moves its own copies to the run's device


def bind_model(
    model: ModelLike,
    *,
    task: str,
    num_classes: int | None = None,
    features: npt.ArrayLike | None = None,
    targets: npt.ArrayLike | None = None,
    owner: str = "simulate",
) -> BoundModel:
    """Bind ``model`` to a data set: resolve its loss for ``task``, copy its module, check it on the first
    training rows (``features``, ``targets``; without them nothing is checked, as for the papers' models
    in a unit test), and find a fused kernel for it.

    Raises a :class:`~fedsample.errors.FedsampleError` naming ``model`` when the factory fails or returns
    something else than a module, when the module fails on the data's samples, or when its output does not
    fit the targets (one logit per class for cross-entropy; one value per sample for mse; one loss per sample
    from a callable loss or metric).
    """
    spec = model if isinstance(model, ModelSpec) else None
    if spec is not None and (spec.task == "regression") != (task == "regression"):
        raise invalid("model", owner, f"a model for a {task} task", spec.kind)
    wrapped = as_model(model, owner)
    loss_name = _loss_name(wrapped, task, owner)
    loss = LOSSES[loss_name] if loss_name is not None else wrapped.loss
    assert callable(loss)
    template = _instantiate(wrapped, owner)
    train_module, eval_module = copy.deepcopy(template).train(), copy.deepcopy(template).eval()
    replaced = swap_dropout(train_module)
    if not any(True for _ in template.parameters()):
        raise invalid("model", owner, "a module with at least one parameter to train", describe_module(wrapped.module))
    if any(p.is_complex() for p in template.parameters()):
        raise invalid("model", owner, "a module with real-valued parameters", describe_module(wrapped.module))
    x = np.asarray(features) if features is not None else None
    if x is not None:
        sample_shape: tuple[int, ...] = tuple(int(s) for s in x.shape[1:])
        floating_inputs = x.dtype.kind == "f"
    else:
        sample_shape = spec.input_shape if spec is not None else ()
        floating_inputs = spec is not None and spec.kind != "lstm"
    batch_dependent = wrapped.batch_dependent
    if batch_dependent is None:  # statistics of the batch: BatchNorm, and instance norms' running averages
        batch_dependent = any(
            isinstance(m, nn.modules.batchnorm._BatchNorm)
            or (isinstance(m, nn.modules.instancenorm._InstanceNorm) and m.track_running_stats)
            for m in template.modules()
        )
    buffers = tuple(n for n, _ in template.named_buffers())
    frozen = frozenset(n for n, p in template.named_parameters() if not p.requires_grad)
    if len(frozen) == len(list(template.parameters())):
        raise invalid("model", owner, "a module with at least one trainable parameter (requires_grad)", "none")
    dense = None
    named = loss_name is not None and (loss_name == "mse") == (task == "regression")
    floating = floating_inputs and all(p.dtype == torch.float32 for p in template.parameters())
    if wrapped.fused and named and floating and not buffers and not frozen:
        dense = dense_layout(template, sample_shape)
    bound = BoundModel(
        model=wrapped,
        name=wrapped.name or (spec.kind if spec is not None else describe_module(wrapped.module)),
        task=task,
        loss_name=loss_name,
        loss=loss,
        metrics=dict(wrapped.metrics),
        train_module=train_module,
        eval_module=eval_module,
        parameter_names=tuple(n for n, _ in template.named_parameters()),
        buffer_names=buffers,
        dense=dense,
        batch_dependent=bool(batch_dependent),
        keyed_dropout=replaced > 0,
        convolutional_or_recurrent=any(
            isinstance(m, (nn.modules.conv._ConvNd, nn.RNNBase)) for m in template.modules()
        ),
        frozen=frozen,
        state_names=_state_names(template),
    )
    if x is not None and targets is not None:
        draws = _check_on_data(bound, template, x, np.asarray(targets), num_classes, owner)
        bound = dataclasses.replace(bound, draws_randomness=draws)
    return bound


def check_batches(model: BoundModel, sizes: npt.ArrayLike, batch_size: int, owner: str) -> None:
    """Refuse training batches of one sample for a model whose forward pass mixes a batch (BatchNorm raises
    on them in training mode): ``batch_size`` and every client's size must be at least 2."""
    if not model.batch_dependent:
        return
    counts = np.asarray(sizes, dtype=np.int64)
    constraint = "trained on batches of at least 2 samples: its forward pass mixes a batch's samples (BatchNorm)"
    if batch_size < 2:
        raise invalid("batch_size", owner, f"at least 2 for the model {model.name!r}, {constraint}", batch_size)
    if counts.size and int(counts.min()) < 2:
        client = int(np.argmin(counts))
        raise invalid("model", owner, constraint, f"{model.name!r} with client {client} holding {int(counts[client])}")


def bind_to_data(model: ModelLike, data: Any, owner: str) -> BoundModel:
    """``model`` bound to a data set's task and classes, and checked on its first training rows
    (:func:`bind_model`; ``data`` a :class:`~fedsample.data.FederatedDataset` or any TrainingData)."""
    return bind_model(
        model,
        task=data.task,
        num_classes=data.num_classes,
        features=data.train_features,
        targets=data.train_targets,
        owner=owner,
    )


def _loss_name(model: Model, task: str, owner: str) -> str | None:
    """The named loss of ``model`` for ``task`` (None for a callable loss)."""
    if not isinstance(model.loss, str):
        return None
    if model.loss == "auto":
        return "mse" if task == "regression" else "cross-entropy"
    if model.loss == "cross-entropy" and task == "regression":
        raise invalid("loss", owner, "'mse', 'auto' or a callable for a regression data set", model.loss)
    if model.loss == "mse" and task == "classification":
        raise invalid("loss", owner, "'cross-entropy', 'auto' or a callable for a classification data set", model.loss)
    return model.loss


def _check_on_data(
    bound: BoundModel,
    template: nn.Module,
    features: npt.NDArray[Any],
    targets: npt.NDArray[Any],
    num_classes: int | None,
    owner: str,
) -> bool:
    """Run the module on the first rows (``eval()`` mode, no gradient) and check what it gives, then train it
    one step on them (:func:`_check_training`); returns whether it draws from the global generator."""
    rows = min(_CHECK_ROWS, features.shape[0])
    if rows == 0:
        return False
    x = as_features(features[:rows], "cpu")
    y = as_targets(targets[:rows], "cpu", bound.task)
    what = bound.model.name or describe_module(bound.model.module)
    params, buffers = _state(template)
    try:
        with torch.no_grad():
            output = torch.func.functional_call(bound.eval_module, (params, buffers), (x,))
    except Exception as exc:  # the user's forward pass
        constraint = f"a module that runs on samples of shape {tuple(x.shape[1:])} and dtype {x.dtype}"
        raise invalid("model", owner, constraint, f"{what} raising {one_line(exc)}") from None
    if not isinstance(output, torch.Tensor) or not output.is_floating_point():
        raise invalid(
            "model", owner, "a module returning one floating-point tensor", f"{what} returning {type(output).__name__}"
        )
    if output.dim() == 0 or output.shape[0] != rows:
        raise invalid(
            "model",
            owner,
            f"a module returning one output per sample ({rows} rows in)",
            f"{what} with output shape {tuple(output.shape)}",
        )
    if bound.loss_name == "cross-entropy":
        classes = int(num_classes or 0)
        if output.dim() != 2 or output.shape[1] < classes:
            constraint = f"a module returning one logit per class, shape (B, C) with C >= {classes} classes"
            raise invalid("model", owner, constraint, f"{what} with output shape {tuple(output.shape)}")
    if bound.loss_name == "mse" and not (output.dim() == 1 or (output.dim() == 2 and output.shape[1] == 1)):
        constraint = "a module returning one value per sample for mse, shape (B,) or (B, 1)"
        raise invalid("model", owner, constraint, f"{what} with output shape {tuple(output.shape)}")
    for label, function in (("loss", bound.loss), *((f"metrics[{k!r}]", f) for k, f in bound.metrics.items())):
        _check_per_sample(label, function, output, y, rows, owner)
    return _check_training(bound, x, y, what, owner)


def _check_training(bound: BoundModel, x: torch.Tensor, y: torch.Tensor, what: str, owner: str) -> bool:
    """One ``train()``-mode forward and backward pass on a copy (keyed dropout on, BatchNorm on the rows'
    statistics); returns whether the module drew from PyTorch's global generator (a random operation other
    than the keyed dropout), which the batched backend cannot give each client on its own."""
    module = copy.deepcopy(bound.train_module)
    with torch.random.fork_rng(devices=[]):
        before = torch.get_rng_state()
        try:
            with dropout_keys(torch.tensor(1), 0):
                output = module(x)
            bound.loss(output, y).mean().backward()  # type: ignore[no-untyped-call]
        except Exception as exc:  # the user's training step
            constraint = f"a module that trains (train() mode, backward pass) on {x.shape[0]} samples"
            raise invalid("model", owner, constraint, f"{what} raising {one_line(exc)}") from None
        return not torch.equal(torch.get_rng_state(), before)


def _check_per_sample(
    label: str, function: PerSampleFn, output: torch.Tensor, y: torch.Tensor, rows: int, owner: str
) -> None:
    try:
        with torch.no_grad():
            values = function(output, y)
    except Exception as exc:  # the user's loss or metric
        raise invalid(
            label, owner, "a callable (output, target) -> one value per sample", f"one raising {one_line(exc)}"
        ) from None
    if not isinstance(values, torch.Tensor) or tuple(values.shape) != (rows,) or not values.is_floating_point():
        shape = tuple(values.shape) if isinstance(values, torch.Tensor) else type(values).__name__
        raise invalid(
            label, owner, f"a callable returning one float per sample, shape ({rows},)", f"one returning {shape}"
        )
    if label == "loss" and not bool(torch.isfinite(values).all()):
        raise invalid(label, owner, "finite losses at the initial model", f"{values.tolist()[:4]}")
