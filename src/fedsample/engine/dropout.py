"""Dropout whose randomness is a function of the slot's key: reproducible, and the same batched or not.

``torch.func.vmap`` cannot give each client of a batched step its own ``torch.Generator``: with
``randomness="different"`` it draws one tensor for the whole batch from the global generator, so a
client's mask would depend on which other clients share its step, and on the caller's random
state. The engine instead replaces each ``nn.Dropout`` (and ``Dropout1d/2d/3d``) of its private copy
of the model by a :class:`KeyedDropout`, whose mask is a counter-based hash of

* the slot's key, drawn from the stream ``(seed, DROPOUT, t, client)`` of its run (31 bits);
* the local step;
* the position of the call in the forward pass (the ``c``-th dropout call of the step);
* the element's index in the slot's own tensor.

Nothing else enters it, so a slot's masks are the same on the batched backend (where its key is
one entry of a batched tensor inside ``vmap``) and on the sequential one, whatever slots share
the step; the global random state is neither read nor changed. The hash is the ``lowbias32``
integer mixer (``mix(index ^ base)``, ``base`` itself mixed from the key, the step and the call),
whose 24 high bits give the uniform number compared with ``p``. Evaluation runs the model in
``eval()`` mode, where dropout is the identity.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

__all__ = [
    "DropoutKeys",
    "KeyedDropout",
    "as_int32",
    "check_mixer",
    "dropout_keys",
    "keyed_uniforms",
    "mix32",
    "mix32_int",
    "swap_dropout",
]

_MASK32 = 0xFFFFFFFF
# lowbias32 (C. Wellons' hash prospector): two multiplications and three xor-shifts per 32-bit word.
_MULTIPLIERS = (0x7FEB352D, 0x846CA68B)
_STEP_SALT, _CALL_SALT = 0x9E3779B9, 0x85EBCA6B


def mix32_int(x: int) -> int:
    """The 32-bit mixer on a Python int (the same function as :func:`mix32`)."""
    x &= _MASK32
    x ^= x >> 16
    x = (x * _MULTIPLIERS[0]) & _MASK32
    x ^= x >> 15
    x = (x * _MULTIPLIERS[1]) & _MASK32
    return x ^ (x >> 16)


def as_int32(value: int) -> int:
    """A 32-bit word (``[0, 2**32)``) as the int32 with the same bits."""
    value &= _MASK32
    return value - (1 << 32) if value >= 1 << 31 else value


_INT32_MULTIPLIERS = tuple(as_int32(m) for m in _MULTIPLIERS)


def mix32(x: torch.Tensor) -> torch.Tensor:
    """The 32-bit mixer on an int32 tensor holding 32-bit words (two's complement); ``vmap`` batches every op.

    Multiplications wrap around modulo 2**32, as two's complement integer products do on CPUs and GPUs;
    :func:`check_mixer` verifies it on a device before its first keyed mask. Right shifts are masked to
    act as logical shifts on the words. int32 arithmetic costs a sixth of the int64 form with the same bits.
    """
    x = x ^ ((x >> 16) & 0xFFFF)
    x = x * _INT32_MULTIPLIERS[0]
    x = x ^ ((x >> 15) & 0x1FFFF)
    x = x * _INT32_MULTIPLIERS[1]
    return x ^ ((x >> 16) & 0xFFFF)


_CHECKED: set[str] = set()


def check_mixer(device: torch.device) -> None:
    """Verify once per device type that :func:`mix32` gives the Python mixer's words (wrap-around products)."""
    if device.type in _CHECKED:
        return
    words = [0, 1, 2**31 - 1, 2**31, 2**32 - 1, 0x9E3779B9, 123456789]
    got = mix32(torch.tensor([as_int32(w) for w in words], dtype=torch.int32, device=device))
    expected = [as_int32(mix32_int(w)) for w in words]
    if got.tolist() != expected:
        raise RuntimeError(f"keyed dropout: int32 products do not wrap around on {device.type}; masks would differ")
    _CHECKED.add(device.type)


@dataclass
class DropoutKeys:
    """The keys of one local step: the slots' keys (a batched 0-d tensor inside ``vmap``), the step,
    and the number of dropout calls made so far in the step's forward pass."""

    key: torch.Tensor
    step: int
    calls: int = 0


_KEYS: contextvars.ContextVar[DropoutKeys | None] = contextvars.ContextVar("fedsample_dropout_keys", default=None)


@contextlib.contextmanager
def dropout_keys(key: torch.Tensor, step: int) -> Iterator[DropoutKeys]:
    """Within the block, a :class:`KeyedDropout` in training mode draws its masks from ``(key, step)``."""
    keys = DropoutKeys(key, step)
    token = _KEYS.set(keys)
    try:
        yield keys
    finally:
        _KEYS.reset(token)


def keyed_uniforms(keys: DropoutKeys, shape: torch.Size, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Uniform numbers in ``[0, 1)`` of ``shape``, one per element, from the keys and the next call index."""
    call = keys.calls
    keys.calls += 1
    check_mixer(device)
    salt = mix32_int(mix32_int(keys.step * _STEP_SALT) ^ ((call + 1) * _CALL_SALT & _MASK32))
    base = mix32(keys.key.to(torch.int32) ^ as_int32(salt))
    count = 1
    for size in shape:
        count *= int(size)
    index = torch.arange(count, device=device, dtype=torch.int32).view(shape)
    bits = (mix32(index ^ base) >> 8) & 0xFFFFFF
    return bits.to(dtype) * (2.0**-24)


class KeyedDropout(nn.Module):
    """``nn.Dropout`` (``channels=0``) or ``nn.Dropout{1,2,3}d`` (``channels=d``) with keyed masks.

    Outside :func:`dropout_keys` (a module used directly) it is the ordinary PyTorch dropout.
    """

    def __init__(self, p: float, channels: int = 0) -> None:
        super().__init__()
        self.p = float(p)
        self.channels = channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        keys = _KEYS.get()
        if keys is None:
            return self._plain(x)
        if self.p == 1.0:
            return x * 0.0
        shape = x.shape
        if self.channels:
            # One draw per channel: (N, C, 1, ...) for a batched input, (C, 1, ...) for an unbatched one; as
            # PyTorch does, Dropout2d reads a 3-D input as (N, C, L).
            batched = x.dim() == self.channels + 2 or (self.channels == 2 and x.dim() == 3)
            lead = 2 if batched else 1
            shape = torch.Size([*x.shape[:lead], *[1] * (x.dim() - lead)])
        keep = keyed_uniforms(keys, shape, x.dtype, x.device) >= self.p
        return torch.where(keep, x * (1.0 / (1.0 - self.p)), 0.0)

    def _plain(self, x: torch.Tensor) -> torch.Tensor:
        functions = {0: nn.functional.dropout, 1: nn.functional.dropout1d, 2: nn.functional.dropout2d}
        dropout = functions.get(self.channels, nn.functional.dropout3d)
        return dropout(x, self.p, True)

    def extra_repr(self) -> str:
        return f"p={self.p}, channels={self.channels}"


_DROPOUTS: dict[type[nn.Module], int] = {nn.Dropout: 0, nn.Dropout1d: 1, nn.Dropout2d: 2, nn.Dropout3d: 3}


def swap_dropout(module: nn.Module) -> int:
    """Replace, in place, every ``nn.Dropout`` and ``nn.Dropout{1,2,3}d`` of ``module`` (exactly those types,
    not subclasses, which may draw differently) by a :class:`KeyedDropout`; returns how many were replaced.

    Call it on a copy: the engine never changes the user's module.
    """
    replaced = 0
    for parent in list(module.modules()):
        for name, child in list(parent._modules.items()):
            channels = _DROPOUTS.get(type(child)) if child is not None else None
            if channels is not None:
                assert isinstance(child, nn.modules.dropout._DropoutNd)
                keyed = KeyedDropout(child.p, channels)
                keyed.train(child.training)
                parent._modules[name] = keyed
                replaced += 1
    return replaced
