"""The models of the papers' experiments, as ``torch.nn`` modules with seeded initialisation.

* ``linear``: linear regression, ``y = w.x (+ b)``, mean squared error (paper 001's simulation);
* ``softmax``: softmax (multinomial logistic) regression;
* ``mlp``: one hidden layer of 50 ReLU units (paper 000's MNIST experiment);
* ``cnn``: three 3x3 convolutions of 32/64/64 channels with 2x2 max pooling after the first two,
  then fully connected layers to 64 and 10 (paper 000's CIFAR-10 experiment; the paper's dropout
  is left out, so that results stay comparable with earlier releases; dropout itself is keyed and
  reproducible, :mod:`fedsample.engine.dropout`);
* ``lstm``: character model of paper 003: 8-dimensional embedding, two LSTM layers of 100 units,
  a linear read-out of the last step (sequence length 80).

A :class:`ModelSpec` is plain data; :meth:`ModelSpec.build` makes the module and
:meth:`ModelSpec.init_params` draws its parameters from a ``torch.Generator`` (never the global
random state). The engine trains these modules like any user's module
(:mod:`fedsample.engine.user_model`); the dense ones (``linear``, ``softmax``, ``mlp``) take its fused
kernels, which read their layers as ``layers.<i>.weight`` / ``layers.<i>.bias``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from fedsample._validation import Interval, invalid
from fedsample.engine.registry import MODEL, MODEL_KINDS

__all__ = ["MODEL_KINDS", "CharLSTM", "CifarCNN", "DenseNet", "ModelSpec", "Params"]

Params = dict[str, torch.Tensor]
ModelKind = Literal["linear", "softmax", "mlp", "cnn", "lstm"]
_POSITIVE_INT = Interval(int, 1, None, closed="left")


class DenseNet(nn.Module):
    """Fully connected layers with ReLU between them; no hidden layer gives a linear model."""

    def __init__(self, widths: tuple[int, ...], *, bias: bool = True, squeeze_output: bool = False) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b, bias=bias) for a, b in itertools.pairwise(widths))
        self.squeeze_output = squeeze_output

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.reshape(x.shape[0], -1)
        for i, layer in enumerate(self.layers):
            h = layer(h)
            if i + 1 < len(self.layers):
                h = torch.relu(h)
        return h.squeeze(-1) if self.squeeze_output else h


def _cnn_feature_size(size: int) -> int:
    """Side of the last convolution's output for an input side ``size`` (3x3 convs, 2x2 pools)."""
    return ((size - 2) // 2 - 2) // 2 - 2


class CifarCNN(nn.Module):
    """conv3x3(32) - pool - conv3x3(64) - pool - conv3x3(64) - fc(64) - fc(classes), ReLU activations."""

    def __init__(self, in_channels: int, height: int, width: int, num_classes: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.conv3 = nn.Conv2d(64, 64, 3)
        h, w = _cnn_feature_size(height), _cnn_feature_size(width)
        if h < 1 or w < 1:
            raise ValueError(f"images of {height}x{width} are too small for the CIFAR CNN")
        self.fc1 = nn.Linear(64 * h * w, 64)
        self.fc2 = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.relu(self.conv3(x))
        x = torch.relu(self.fc1(x.flatten(1)))
        out: torch.Tensor = self.fc2(x)
        return out


class CharLSTM(nn.Module):
    """Embedding(vocab, 8) - LSTM(100) x 2 - Linear(vocab) on the last position."""

    def __init__(self, vocab_size: int, embed_dim: int = 8, hidden: int = 100, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed_dim)
        self.lstm = nn.LSTM(embed_dim, hidden, num_layers=layers, batch_first=True)
        self.out = nn.Linear(hidden, vocab_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.lstm(self.embed(x.long()))
        out: torch.Tensor = self.out(h[:, -1])
        return out


@dataclass(frozen=True)
class ModelSpec:
    """Which model to train, on inputs of ``input_shape`` with ``output_dim`` outputs.

    ``output_dim`` is the number of classes (the regression model ``linear`` has one output).
    ``hidden`` is the MLP's hidden width; ``bias`` applies to the dense models; ``zero_init``
    starts from all-zero parameters (paper 001's linear regression starts at zero).
    """

    kind: ModelKind
    input_shape: tuple[int, ...]
    output_dim: int
    hidden: int = MODEL.defaults["hidden"]
    bias: bool = MODEL.defaults["bias"]
    zero_init: bool = MODEL.defaults["zero_init"]

    def __post_init__(self) -> None:
        MODEL.validate({key: getattr(self, key) for key in MODEL.parameters})
        if self.kind == "linear" and self.output_dim != 1:
            raise invalid("output_dim", "ModelSpec", "1 for the 'linear' (regression) model", self.output_dim)
        shape = self.input_shape
        valid = isinstance(shape, (tuple, list)) and len(shape) > 0
        if not valid or not all(_POSITIVE_INT.is_satisfied_by(s) for s in shape):
            raise invalid("input_shape", "ModelSpec", "a non-empty tuple of positive ints", shape)
        object.__setattr__(self, "input_shape", tuple(int(s) for s in shape))
        if self.kind == "cnn":
            if len(self.input_shape) != 3:
                raise invalid("input_shape", "ModelSpec", "(channels, height, width) for the 'cnn' model", shape)
            if min(_cnn_feature_size(s) for s in self.input_shape[1:]) < 1:
                raise invalid("input_shape", "ModelSpec", "images of at least 18x18 for the 'cnn' model", shape)

    @property
    def task(self) -> Literal["classification", "regression"]:
        return "regression" if self.kind == "linear" else "classification"

    @property
    def is_dense(self) -> bool:
        """Whether the batched backend's stacked kernels serve this model."""
        return self.kind in ("linear", "softmax", "mlp")

    @property
    def dense_widths(self) -> tuple[int, ...]:
        features = math.prod(self.input_shape)
        if self.kind == "linear":
            return (features, 1)
        if self.kind == "softmax":
            return (features, self.output_dim)
        return (features, self.hidden, self.output_dim)

    def build(self) -> nn.Module:
        """A fresh module (its initial parameters are meaningless until :meth:`init_params` is loaded)."""
        if self.is_dense:
            return DenseNet(self.dense_widths, bias=self.bias, squeeze_output=self.kind == "linear")
        if self.kind == "cnn":
            c, h, w = self.input_shape
            return CifarCNN(c, h, w, self.output_dim)
        return CharLSTM(self.output_dim)

    def init_params(self, generator: torch.Generator) -> Params:
        """Initial parameters drawn from ``generator``: PyTorch's default fan-in uniform scheme."""
        module = self.build()
        params: Params = {}
        for name, p in module.named_parameters():
            value = torch.zeros_like(p.detach())
            if not self.zero_init:
                value = _default_init(name, value, module, generator)
            params[name] = value
        return params

    def flops_per_sample(self) -> float:
        """Forward multiply-adds x 2 for one sample (training costs about 3x this)."""
        if self.is_dense:
            w = self.dense_widths
            return float(sum(2 * a * b for a, b in itertools.pairwise(w)))
        module = self.build()
        return float(2 * sum(p.numel() for p in module.parameters()))


def _default_init(name: str, value: torch.Tensor, module: nn.Module, generator: torch.Generator) -> torch.Tensor:
    """U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases (PyTorch's defaults), N(0, 1) for embeddings."""
    if name.startswith("embed"):
        return torch.randn(value.shape, generator=generator, dtype=value.dtype)
    if "lstm" in name:
        lstm = module.get_submodule("lstm")
        assert isinstance(lstm, nn.LSTM)
        bound = 1.0 / math.sqrt(lstm.hidden_size)
        return (torch.rand(value.shape, generator=generator, dtype=value.dtype) * 2 - 1) * bound
    weight = module.get_parameter(name.rsplit(".", 1)[0] + ".weight")
    fan_in = weight[0].numel() if weight.dim() > 1 else weight.numel()
    bound = 1.0 / math.sqrt(fan_in)
    return (torch.rand(value.shape, generator=generator, dtype=value.dtype) * 2 - 1) * bound
