"""Models of the papers' experiments: construction, seeded initialisation, parameter layout and shapes."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from fedsample.engine import MODEL_KINDS, ModelSpec
from fedsample.errors import FedsampleError

SPECS = {
    "linear": ModelSpec("linear", (7,), 1),
    "softmax": ModelSpec("softmax", (7,), 4),
    "mlp": ModelSpec("mlp", (7,), 4),
    "cnn": ModelSpec("cnn", (1, 28, 28), 10),
    "lstm": ModelSpec("lstm", (80,), 80),
}


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _inputs(spec: ModelSpec, batch: int) -> torch.Tensor:
    generator = _generator(99)
    if spec.kind == "lstm":
        return torch.randint(0, spec.output_dim, (batch, *spec.input_shape), generator=generator)
    return torch.randn((batch, *spec.input_shape), generator=generator)


def test_every_kind_has_a_spec() -> None:
    assert set(SPECS) == set(MODEL_KINDS)


@pytest.mark.parametrize("kind", MODEL_KINDS)
def test_init_params_match_the_module_and_load(kind: str) -> None:
    """init_params gives one tensor per module parameter, same names, shapes and dtypes; it loads strictly."""
    spec = SPECS[kind]
    module = spec.build()
    params = spec.init_params(_generator(0))
    assert list(params) == [n for n, _ in module.named_parameters()]
    for name, p in module.named_parameters():
        assert params[name].shape == p.shape
        assert params[name].dtype == torch.float32
    module.load_state_dict(params, strict=True)


@pytest.mark.parametrize("kind", MODEL_KINDS)
def test_init_params_are_deterministic_per_generator_seed(kind: str) -> None:
    """The same generator seed gives bit-identical parameters (so nothing comes from torch's global
    stream, which advances between the calls); another seed changes every tensor."""
    spec = SPECS[kind]
    first = spec.init_params(_generator(5))
    again = spec.init_params(_generator(5))
    other = spec.init_params(_generator(6))
    for name in first:
        assert torch.equal(first[name], again[name]), name
        assert not torch.equal(first[name], other[name]), name


@pytest.mark.parametrize("kind", ["linear", "softmax", "mlp", "cnn"])
def test_init_follows_pytorch_fan_in_bounds(kind: str) -> None:
    """Weights and biases lie in U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (PyTorch's default) and fill most of it."""
    spec = SPECS[kind]
    module = spec.build()
    params = spec.init_params(_generator(0))
    for name, value in params.items():
        weight = module.get_parameter(name.rsplit(".", 1)[0] + ".weight")
        bound = 1.0 / math.sqrt(weight[0].numel())
        assert float(value.abs().max()) <= bound, name
        if value.numel() >= 50:  # the largest of >= 50 uniform draws exceeds 0.8 bound w.p. > 1 - 0.9**50
            assert float(value.abs().max()) > 0.8 * bound, name


@pytest.mark.parametrize("kind", MODEL_KINDS)
def test_zero_init_gives_zeros(kind: str) -> None:
    """zero_init (paper 001's linear regression starts at theta = 0) gives all-zero parameters."""
    spec = dataclasses.replace(SPECS[kind], zero_init=True)
    params = spec.init_params(_generator(0))
    assert params
    assert all(torch.count_nonzero(v) == 0 for v in params.values())


@pytest.mark.parametrize(
    ("spec", "names"),
    [
        (ModelSpec("linear", (7,), 1), {"layers.0.weight": (1, 7), "layers.0.bias": (1,)}),
        (ModelSpec("softmax", (7,), 4), {"layers.0.weight": (4, 7), "layers.0.bias": (4,)}),
        (
            ModelSpec("mlp", (7,), 4),
            {"layers.0.weight": (50, 7), "layers.0.bias": (50,), "layers.1.weight": (4, 50), "layers.1.bias": (4,)},
        ),
        (
            ModelSpec("mlp", (2, 3), 3, hidden=8),
            {"layers.0.weight": (8, 6), "layers.0.bias": (8,), "layers.1.weight": (3, 8), "layers.1.bias": (3,)},
        ),
        (ModelSpec("softmax", (7,), 4, bias=False), {"layers.0.weight": (4, 7)}),
    ],
    ids=["linear", "softmax", "mlp-hidden-50", "mlp-hidden-8-flattened", "softmax-no-bias"],
)
def test_dense_parameter_names_and_shapes(spec: ModelSpec, names: dict[str, tuple[int, ...]]) -> None:
    """Dense models keep layers.<i>.weight / layers.<i>.bias, the layout the stacked kernels read."""
    params = spec.init_params(_generator(0))
    assert {n: tuple(v.shape) for n, v in params.items()} == names


@pytest.mark.parametrize(
    ("spec", "output_shape"),
    [
        (ModelSpec("linear", (7,), 1), (5,)),  # regression: one squeezed output per sample
        (ModelSpec("softmax", (7,), 4), (5, 4)),
        (ModelSpec("mlp", (7,), 4), (5, 4)),
        (ModelSpec("mlp", (1, 8, 8), 10), (5, 10)),  # images are flattened
        (ModelSpec("cnn", (3, 32, 32), 10), (5, 10)),
        (ModelSpec("cnn", (1, 28, 28), 10), (5, 10)),
        (ModelSpec("cnn", (1, 18, 18), 3), (5, 3)),  # the smallest image the CNN accepts
        (ModelSpec("lstm", (80,), 80), (5, 80)),
    ],
    ids=["linear", "softmax", "mlp", "mlp-images", "cnn-cifar", "cnn-mnist", "cnn-smallest", "lstm"],
)
def test_output_shapes(spec: ModelSpec, output_shape: tuple[int, ...]) -> None:
    module = spec.build()
    module.load_state_dict(spec.init_params(_generator(0)))
    out = module(_inputs(spec, 5))
    assert tuple(out.shape) == output_shape
    assert torch.isfinite(out).all()


def test_cnn_layers_follow_paper_000() -> None:
    """conv 32/64/64 (3x3) with 2x2 pooling after the first two, then fc 64 and fc classes."""
    shapes = {n: tuple(v.shape) for n, v in ModelSpec("cnn", (3, 32, 32), 10).init_params(_generator(0)).items()}
    assert shapes == {
        "conv1.weight": (32, 3, 3, 3),
        "conv1.bias": (32,),
        "conv2.weight": (64, 32, 3, 3),
        "conv2.bias": (64,),
        "conv3.weight": (64, 64, 3, 3),
        "conv3.bias": (64,),
        "fc1.weight": (64, 64 * 4 * 4),  # 32 -> 30 -> 15 -> 13 -> 6 -> 4
        "fc1.bias": (64,),
        "fc2.weight": (10, 64),
        "fc2.bias": (10,),
    }
    mnist = ModelSpec("cnn", (1, 28, 28), 10).init_params(_generator(0))
    assert tuple(mnist["conv1.weight"].shape) == (32, 1, 3, 3)
    assert tuple(mnist["fc1.weight"].shape) == (64, 64 * 3 * 3)  # 28 -> 26 -> 13 -> 11 -> 5 -> 3


def test_lstm_follows_paper_003() -> None:
    """Vocabulary 80, embedding 8, two LSTM layers of 100 units, a linear read-out to 80 characters."""
    shapes = {n: tuple(v.shape) for n, v in ModelSpec("lstm", (80,), 80).init_params(_generator(0)).items()}
    assert shapes == {
        "embed.weight": (80, 8),
        "lstm.weight_ih_l0": (400, 8),
        "lstm.weight_hh_l0": (400, 100),
        "lstm.bias_ih_l0": (400,),
        "lstm.bias_hh_l0": (400,),
        "lstm.weight_ih_l1": (400, 100),
        "lstm.weight_hh_l1": (400, 100),
        "lstm.bias_ih_l1": (400,),
        "lstm.bias_hh_l1": (400,),
        "out.weight": (80, 100),
        "out.bias": (80,),
    }


def test_tasks_and_dense_flags() -> None:
    assert [SPECS[k].task for k in MODEL_KINDS] == ["regression"] + ["classification"] * 4
    assert [SPECS[k].is_dense for k in MODEL_KINDS] == [True, True, True, False, False]


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"kind": "resnet", "input_shape": (7,), "output_dim": 2}, "kind"),
        ({"kind": "softmax", "input_shape": (7,), "output_dim": 0}, "output_dim"),
        ({"kind": "softmax", "input_shape": (7,), "output_dim": 2.0}, "output_dim"),
        ({"kind": "mlp", "input_shape": (7,), "output_dim": 2, "hidden": 0}, "hidden"),
        ({"kind": "softmax", "input_shape": (), "output_dim": 2}, "input_shape"),
        ({"kind": "softmax", "input_shape": (0,), "output_dim": 2}, "input_shape"),
        ({"kind": "softmax", "input_shape": (7.5,), "output_dim": 2}, "input_shape"),
        ({"kind": "cnn", "input_shape": (28, 28), "output_dim": 10}, "input_shape"),
        ({"kind": "cnn", "input_shape": (1, 17, 17), "output_dim": 10}, "input_shape"),
        ({"kind": "cnn", "input_shape": (3, 8, 8), "output_dim": 10}, "input_shape"),
        ({"kind": "cnn", "input_shape": (3, 32, 16), "output_dim": 10}, "input_shape"),
    ],
    ids=[
        "unknown-kind",
        "zero-outputs",
        "float-outputs",
        "zero-hidden",
        "empty-shape",
        "zero-features",
        "float-features",
        "cnn-without-channels",
        "cnn-17x17",
        "cnn-8x8",
        "cnn-narrow",
    ],
)
def test_model_spec_rejects_bad_values(kwargs: dict[str, object], parameter: str) -> None:
    """Bad specs fail at construction with FedsampleError naming the parameter (too-small CNN images included)."""
    with pytest.raises(FedsampleError, match=rf"'{parameter}' parameter of ModelSpec") as info:
        ModelSpec(**kwargs)  # type: ignore[arg-type]
    assert info.value.parameter == parameter
